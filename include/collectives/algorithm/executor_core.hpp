// Moved to <collectives/runtime/executor_core.hpp> with the rest of the runtime (the schedules
// stay in algorithm/). This path keeps programs that include it working.
#pragma once

#include "../runtime/executor_core.hpp"
