// gather / gatherv: the root ends with every rank's buffer, in rank order.
#pragma once

#include <ranges>
#include <span>

#include "algorithm/automatic.hpp"
#include "detail/call.hpp"

namespace collectives {

// Out-of-place: each rank gives N elements; the root's `output` has P*N (other
// ranks may pass an empty one) and receives rank i's at offset i*N.
template <algorithm Algorithm = automatic, transport Tr, buffer In, writable_buffer Out>
  requires std::same_as<element_of<In>, element_of<Out>>
void gather(communicator<Tr>& comm, const In& input, Out&& output, int root) {
  using T = element_of<Out>;
  static_assert(implements<Algorithm, kind::gather>, "collectives: this algorithm does not implement gather");
  const char* call = "gather";
  detail::check_root(call, root, comm.size());
  const std::size_t n = std::ranges::size(input);
  const std::size_t total = detail::checked_product(call, n, static_cast<std::size_t>(comm.size()));
  if (comm.rank() == root) detail::check_size(call, "output", std::ranges::size(output), total);
  detail::check_bytes<T>(call, total);
  no_reduce op;
  detail::run<Algorithm, memory_space_of<Out>>(comm, call, kind::gather{}, {.count = n, .root = root},
                                               std::ranges::data(input), std::ranges::data(output), op);
}

// In-place: `data` has P*N elements on every rank and rank i's part is at i*N.
template <algorithm Algorithm = automatic, transport Tr, writable_buffer Data>
void gather(communicator<Tr>& comm, Data&& data, int root) {
  const auto part = detail::even_parts("gather", detail::as_span(data), comm.rank(), comm.size());
  gather<Algorithm>(comm, part.own, part.all, root);
}

// Out-of-place, uneven: rank i gives counts[i] elements; the root's `output` holds
// them back to back (rank i's at counts[0] + ... + counts[i-1]).
template <algorithm Algorithm = automatic, transport Tr, buffer In, writable_buffer Out>
  requires std::same_as<element_of<In>, element_of<Out>>
void gatherv(communicator<Tr>& comm, const In& input, Out&& output, std::span<const std::size_t> counts, int root) {
  using T = element_of<Out>;
  static_assert(implements<Algorithm, kind::gatherv>, "collectives: this algorithm does not implement gatherv");
  const char* call = "gatherv";
  detail::check_root(call, root, comm.size());
  detail::check_counts(call, counts, comm.size());
  const std::size_t total = detail::checked_total(call, counts);
  detail::check_size(call, "input", std::ranges::size(input), counts[static_cast<std::size_t>(comm.rank())]);
  if (comm.rank() == root) detail::check_size(call, "output", std::ranges::size(output), total);
  detail::check_bytes<T>(call, total);
  no_reduce op;
  detail::run<Algorithm, memory_space_of<Out>>(comm, call, kind::gatherv{}, {.root = root, .counts = counts},
                                               std::ranges::data(input), std::ranges::data(output), op);
}

// In-place, uneven: `data` holds all parts back to back on every rank.
template <algorithm Algorithm = automatic, transport Tr, writable_buffer Data>
void gatherv(communicator<Tr>& comm, Data&& data, std::span<const std::size_t> counts, int root) {
  const auto part = detail::uneven_parts("gatherv", detail::as_span(data), counts, comm.rank(), comm.size());
  gatherv<Algorithm>(comm, part.own, part.all, counts, root);
}

}  // namespace collectives
