#pragma once

#include <collectives/transport/automatic.hpp>

// A communicator for the job the launcher started, over whichever transport
// COLLECTIVES_TRANSPORT (or the launch) picks.
collectives::communicator<collectives::automatic_transport> make_communicator();
