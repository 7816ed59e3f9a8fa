// The reducing collectives of collectives_perf_cuda, in a translation unit of their own
// so that their instantiations (every type x op x algorithm, and their kernels)
// compile beside the rest.
#include "ours_device.hpp"

namespace perf {

int run_reduction(device_backend& backend, const options& o) {
  switch (o.which) {
    case collective::all_reduce: return run_perf<collective::all_reduce>(backend, o);
    case collective::reduce_scatter: return run_perf<collective::reduce_scatter>(backend, o);
    case collective::reduce: return run_perf<collective::reduce>(backend, o);
    default: return 2;
  }
}

}  // namespace perf
