// Moved to <collectives/runtime/in_flight.hpp> with the rest of the runtime (the schedules
// stay in algorithm/). This path keeps programs that include it working.
#pragma once

#include "../runtime/in_flight.hpp"
