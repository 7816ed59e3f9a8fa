// barrier: returns on a rank only once every rank has entered it.
#pragma once

#include <cstddef>

#include "algorithm/direct.hpp"
#include "detail/call.hpp"

namespace collectives {

template <transport Tr>
void barrier(communicator<Tr>& comm) {
  no_reduce op;
  static constexpr std::byte signal{1};  // static: a non-blocking barrier reads it after this returns
  detail::run<direct>(comm, "barrier", kind::barrier{}, {}, &signal, static_cast<std::byte*>(nullptr), op);
}

}  // namespace collectives
