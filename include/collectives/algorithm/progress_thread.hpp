// Moved to <collectives/runtime/progress_thread.hpp> with the rest of the runtime (the schedules
// stay in algorithm/). This path keeps programs that include it working.
#pragma once

#include "../runtime/progress_thread.hpp"
