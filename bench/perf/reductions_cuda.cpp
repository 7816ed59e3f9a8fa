// The reducing collectives of collectives_perf_cuda, in a translation unit of their own
// so that their instantiations (every type x op x algorithm; the kernels are
// device_reductions.cu's) compile beside the rest.
#include "ours_device.hpp"
#include "program.hpp"

namespace perf {

int run_reduction(device_backend& backend, const options& o) { return run_reductions_of(backend, o); }

}  // namespace perf
