// The umbrella header: every collective, blocking and not, the built-in ops, the in-process transport
// and run_ranks. Transports with outside dependencies have headers of their own.
#pragma once

#include "all_gather.hpp"
#include "all_reduce.hpp"
#include "all_to_all.hpp"
#include "barrier.hpp"
#include "broadcast.hpp"
#include "communicator.hpp"
#include "element_types.hpp"
#include "error.hpp"
#include "gather.hpp"
#include "nonblocking.hpp"
#include "ops/builtin.hpp"
#include "point_to_point.hpp"
#include "reduce.hpp"
#include "reduce_scatter.hpp"
#include "run_ranks.hpp"
#include "scatter.hpp"
#include "split.hpp"
#include "transport/declarations.hpp"
#include "transport/inproc.hpp"
