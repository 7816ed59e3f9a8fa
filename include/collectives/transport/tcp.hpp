// communicator<tcp>: the TCP transport (<collectives/transport/tcp/transport.hpp>, which
// says how it works and what it needs) and the communicator over it.
//
//   auto comm = collectives::communicator<collectives::tcp>::from_env();
#pragma once

#include "../communicator.hpp"
#include "tcp/transport.hpp"

#if defined(COLLECTIVES_SEPARATE_COMPILATION)
namespace collectives {
// Compiled in the library (impl/src.hpp).
extern template class executor_core<tcp>;
extern template class communicator<tcp>;
}  // namespace collectives
#endif
