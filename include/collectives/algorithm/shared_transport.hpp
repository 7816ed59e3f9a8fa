// Moved to <collectives/runtime/shared_transport.hpp> with the rest of the runtime (the schedules
// stay in algorithm/). This path keeps programs that include it working.
#pragma once

#include "../runtime/shared_transport.hpp"
