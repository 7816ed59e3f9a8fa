// communicator<automatic_transport>: automatic_transport (<collectives/transport/automatic/transport.hpp>, which
// says how it works and what it needs) and the communicator over it.
//
//   auto comm = collectives::communicator<collectives::automatic_transport>::from_env();
#pragma once

#include "../communicator.hpp"
#include "automatic/transport.hpp"

#if defined(COLLECTIVES_SEPARATE_COMPILATION)
namespace collectives {
// Compiled in the library (impl/src.hpp).
extern template class executor_core<automatic_transport>;
extern template class communicator<automatic_transport>;
}  // namespace collectives
#endif
