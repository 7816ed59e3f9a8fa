// communicator<rdma>: the RDMA transport (<collectives/transport/rdma/transport.hpp>, which
// says how it works and what it needs) and the communicator over it.
//
//   auto comm = collectives::communicator<collectives::rdma>::from_env();
#pragma once

#include "../communicator.hpp"
#include "rdma/transport.hpp"

#if defined(COLLECTIVES_SEPARATE_COMPILATION)
namespace collectives {
// Compiled in the library (impl/rdma_src.hpp).
extern template class executor_core<rdma>;
extern template class communicator<rdma>;
}  // namespace collectives
#endif
