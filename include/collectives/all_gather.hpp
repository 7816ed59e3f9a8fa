// all_gather / all_gatherv: every rank ends with every rank's buffer, in rank order.
#pragma once

#include <ranges>
#include <span>

#include "algorithm/automatic.hpp"
#include "detail/call.hpp"

namespace collectives {

// Out-of-place: each rank gives N elements; `output` has P*N and receives rank i's
// at offset i*N.
template <algorithm Algorithm = automatic, transport Tr, buffer In, writable_buffer Out>
  requires std::same_as<element_of<In>, element_of<Out>>
void all_gather(communicator<Tr>& comm, const In& input, Out&& output) {
  using T = element_of<Out>;
  static_assert(implements<Algorithm, kind::all_gather>,
                "collectives: this algorithm does not implement all_gather");
  const char* call = "all_gather";
  const std::size_t n = std::ranges::size(input);
  const std::size_t total = detail::checked_product(call, n, static_cast<std::size_t>(comm.size()));
  detail::check_size(call, "output", std::ranges::size(output), total);
  detail::check_bytes<T>(call, total);
  no_reduce op;
  detail::run<Algorithm, memory_space_of<Out>>(comm, call, kind::all_gather{}, {.count = n},
                                               std::ranges::data(input), std::ranges::data(output), op);
}

// In-place: `data` has P*N elements and this rank's part is already at rank*N.
template <algorithm Algorithm = automatic, transport Tr, writable_buffer Data>
void all_gather(communicator<Tr>& comm, Data&& data) {
  const auto part = detail::even_parts("all_gather", detail::as_span(data), comm.rank(), comm.size());
  all_gather<Algorithm>(comm, part.own, part.all);
}

// Out-of-place, uneven: rank i gives counts[i] elements; `output` holds them back
// to back.
template <algorithm Algorithm = automatic, transport Tr, buffer In, writable_buffer Out>
  requires std::same_as<element_of<In>, element_of<Out>>
void all_gatherv(communicator<Tr>& comm, const In& input, Out&& output, std::span<const std::size_t> counts) {
  using T = element_of<Out>;
  static_assert(implements<Algorithm, kind::all_gatherv>,
                "collectives: this algorithm does not implement all_gatherv");
  const char* call = "all_gatherv";
  detail::check_counts(call, counts, comm.size());
  const std::size_t total = detail::checked_total(call, counts);
  detail::check_size(call, "input", std::ranges::size(input), counts[static_cast<std::size_t>(comm.rank())]);
  detail::check_size(call, "output", std::ranges::size(output), total);
  detail::check_bytes<T>(call, total);
  no_reduce op;
  detail::run<Algorithm, memory_space_of<Out>>(comm, call, kind::all_gatherv{}, {.counts = counts},
                                               std::ranges::data(input), std::ranges::data(output), op);
}

// In-place, uneven: `data` holds all parts back to back, this rank's already in place.
template <algorithm Algorithm = automatic, transport Tr, writable_buffer Data>
void all_gatherv(communicator<Tr>& comm, Data&& data, std::span<const std::size_t> counts) {
  const auto part = detail::uneven_parts("all_gatherv", detail::as_span(data), counts, comm.rank(), comm.size());
  all_gatherv<Algorithm>(comm, part.own, part.all, counts);
}

}  // namespace collectives
