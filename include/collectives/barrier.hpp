// barrier: returns on a rank only once every rank has entered it.
#pragma once

#include <cstddef>

#include "algorithm/direct.hpp"
#include "detail/call.hpp"

namespace collectives {

template <transport Tr>
void barrier(communicator<Tr>& comm) {
  no_reduce op;
  const std::byte signal{1};
  detail::run<direct>(comm, "barrier", kind::barrier{}, {}, &signal, static_cast<std::byte*>(nullptr), op);
}

}  // namespace collectives
