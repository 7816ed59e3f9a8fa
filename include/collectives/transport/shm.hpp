// communicator<shm>: the shared-memory transport (<collectives/transport/shm/transport.hpp>, which
// says how it works and what it needs) and the communicator over it.
//
//   auto comm = collectives::communicator<collectives::shm>::from_env();
#pragma once

#include "../communicator.hpp"
#include "shm/transport.hpp"

#if defined(COLLECTIVES_SEPARATE_COMPILATION)
namespace collectives {
// Compiled in the library (impl/src.hpp).
extern template class executor_core<shm>;
extern template class communicator<shm>;
}  // namespace collectives
#endif
