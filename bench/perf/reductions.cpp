// The reducing collectives of collectives_perf, in a translation unit of their own so
// that their instantiations (every type x op x algorithm) compile beside the rest.
#include "ours.hpp"
#include "program.hpp"

namespace perf {

int run_reduction(library_backend& backend, const options& o) { return run_reductions_of(backend, o); }

}  // namespace perf
