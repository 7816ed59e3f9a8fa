// Moved to <collectives/runtime/plan_cache.hpp> with the rest of the runtime (the schedules
// stay in algorithm/). This path keeps programs that include it working.
#pragma once

#include "../runtime/plan_cache.hpp"
