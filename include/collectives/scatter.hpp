// scatter / scatterv: the root hands part i of its buffer to rank i.
#pragma once

#include <ranges>
#include <span>

#include "algorithm/automatic.hpp"
#include "detail/call.hpp"

namespace collectives {

// Out-of-place: the root's `input` has P*N elements (other ranks may pass an empty
// one); every rank's `output` has N and receives part rank*N.. of it.
template <algorithm Algorithm = automatic, transport Tr, buffer In, writable_buffer Out>
  requires std::same_as<element_of<In>, element_of<Out>>
void scatter(communicator<Tr>& comm, const In& input, Out&& output, int root) {
  using T = element_of<Out>;
  static_assert(implements<Algorithm, kind::scatter>, "collectives: this algorithm does not implement scatter");
  const char* call = "scatter";
  detail::check_root(call, root, comm.size());
  const std::size_t n = std::ranges::size(output);
  const std::size_t total = detail::checked_product(call, n, static_cast<std::size_t>(comm.size()));
  if (comm.rank() == root) detail::check_size(call, "input", std::ranges::size(input), total);
  detail::check_bytes<T>(call, total);
  no_reduce op;
  detail::run<Algorithm, memory_space_of<Out>>(comm, call, kind::scatter{}, {.count = n, .root = root},
                                               std::ranges::data(input), std::ranges::data(output), op);
}

// In-place: `data` has P*N elements on every rank; rank i's part lands at i*N.
template <algorithm Algorithm = automatic, transport Tr, writable_buffer Data>
void scatter(communicator<Tr>& comm, Data&& data, int root) {
  const auto part = detail::even_parts("scatter", detail::as_span(data), comm.rank(), comm.size());
  scatter<Algorithm>(comm, part.all, part.own, root);
}

// Out-of-place, uneven: rank i receives counts[i] elements, taken back to back from
// the root's `input`.
template <algorithm Algorithm = automatic, transport Tr, buffer In, writable_buffer Out>
  requires std::same_as<element_of<In>, element_of<Out>>
void scatterv(communicator<Tr>& comm, const In& input, Out&& output, std::span<const std::size_t> counts, int root) {
  using T = element_of<Out>;
  static_assert(implements<Algorithm, kind::scatterv>, "collectives: this algorithm does not implement scatterv");
  const char* call = "scatterv";
  detail::check_root(call, root, comm.size());
  detail::check_counts(call, counts, comm.size());
  const std::size_t total = detail::checked_total(call, counts);
  detail::check_size(call, "output", std::ranges::size(output), counts[static_cast<std::size_t>(comm.rank())]);
  if (comm.rank() == root) detail::check_size(call, "input", std::ranges::size(input), total);
  detail::check_bytes<T>(call, total);
  no_reduce op;
  detail::run<Algorithm, memory_space_of<Out>>(comm, call, kind::scatterv{}, {.root = root, .counts = counts},
                                               std::ranges::data(input), std::ranges::data(output), op);
}

// In-place, uneven: `data` holds all parts back to back; rank i's lands in place.
template <algorithm Algorithm = automatic, transport Tr, writable_buffer Data>
void scatterv(communicator<Tr>& comm, Data&& data, std::span<const std::size_t> counts, int root) {
  const auto part = detail::uneven_parts("scatterv", detail::as_span(data), counts, comm.rank(), comm.size());
  scatterv<Algorithm>(comm, part.all, part.own, counts, root);
}

}  // namespace collectives
