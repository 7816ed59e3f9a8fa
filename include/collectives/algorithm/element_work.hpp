// Moved to <collectives/runtime/element_work.hpp> with the rest of the runtime (the schedules
// stay in algorithm/). This path keeps programs that include it working.
#pragma once

#include "../runtime/element_work.hpp"
