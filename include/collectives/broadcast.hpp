// broadcast: the root's buffer is copied to every rank.
#pragma once

#include <ranges>
#include <span>

#include "algorithm/automatic.hpp"
#include "detail/call.hpp"

namespace collectives {

// Out-of-place: `input` is read on the root only (other ranks may pass an empty
// one); `output` receives the root's data on every rank, the root included.
template <algorithm Algorithm = automatic, transport Tr, buffer In, writable_buffer Out>
  requires std::same_as<element_of<In>, element_of<Out>>
void broadcast(communicator<Tr>& comm, const In& input, Out&& output, int root) {
  using T = element_of<Out>;
  static_assert(implements<Algorithm, kind::broadcast>, "collectives: this algorithm does not implement broadcast");
  const char* call = "broadcast";
  detail::check_root(call, root, comm.size());
  if (comm.rank() == root) detail::check_size(call, "input", std::ranges::size(input), std::ranges::size(output));
  detail::check_bytes<T>(call, std::ranges::size(output));
  no_reduce op;
  detail::run<Algorithm, memory_space_of<Out>>(comm, call, kind::broadcast{},
                                               {.count = std::ranges::size(output), .root = root},
                                               std::ranges::data(input), std::ranges::data(output), op);
}

// In-place: `data` is sent from the root and overwritten everywhere else.
template <algorithm Algorithm = automatic, transport Tr, writable_buffer Data>
void broadcast(communicator<Tr>& comm, Data&& data, int root) {
  broadcast<Algorithm>(comm, data, data, root);
}

}  // namespace collectives
