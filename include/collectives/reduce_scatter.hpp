// reduce_scatter / reduce_scatterv: part i of op over all ranks' buffers ends on
// rank i.
#pragma once

#include <ranges>
#include <span>
#include <vector>

#include "algorithm/automatic.hpp"
#include "detail/accumulated_call.hpp"
#include "detail/call.hpp"

namespace collectives {

// Out-of-place: `input` has P*N elements, `output` N; rank i receives the reduction
// of everyone's part i*N...
template <algorithm Algorithm = automatic, transport Tr, buffer In, writable_buffer Out, class Op>
  requires std::same_as<element_of<In>, element_of<Out>>
void reduce_scatter(communicator<Tr>& comm, const In& input, Out&& output, Op op) {
  using T = element_of<Out>;
  static_assert(implements<Algorithm, kind::reduce_scatter>,
                "collectives: this algorithm does not implement reduce_scatter");
  const char* call = "reduce_scatter";
  const std::size_t n = std::ranges::size(output);
  const std::size_t total = detail::checked_product(call, n, static_cast<std::size_t>(comm.size()));
  detail::check_size(call, "input", std::ranges::size(input), total);
  detail::check_bytes<T>(call, total);
  if constexpr (detail::reduces_through_accumulator<Op>) {
    static_assert(detail::check_accumulation<Algorithm, Op, T, memory_space_of<Out>>());
    const std::vector<std::size_t> counts(static_cast<std::size_t>(comm.size()), n);
    detail::reduce_scatter_through<Algorithm, memory_space_of<Out>>(comm, call, {.count = n}, counts,
                                                                    detail::span_of(input), detail::span_of(output), op);
  } else {
    static_assert(detail::check_reduction<Algorithm, Op, T>());
    detail::run<Algorithm, memory_space_of<Out>>(comm, call, kind::reduce_scatter{}, {.count = n},
                                                 std::ranges::data(input), std::ranges::data(output), op);
  }
}

// In-place: `data` has P*N elements; this rank's result lands at rank*N (the rest
// of `data` is left as it was).
template <algorithm Algorithm = automatic, transport Tr, writable_buffer Data, class Op>
void reduce_scatter(communicator<Tr>& comm, Data&& data, Op op) {
  const auto part = detail::even_parts("reduce_scatter", detail::as_span(data), comm.rank(), comm.size());
  reduce_scatter<Algorithm>(comm, part.all, part.own, op);
}

// Out-of-place, uneven: `input` holds parts of counts[0], counts[1], ... elements
// back to back; rank i receives the reduction of part i (counts[i] elements).
template <algorithm Algorithm = automatic, transport Tr, buffer In, writable_buffer Out, class Op>
  requires std::same_as<element_of<In>, element_of<Out>>
void reduce_scatterv(communicator<Tr>& comm, const In& input, Out&& output, std::span<const std::size_t> counts, Op op) {
  using T = element_of<Out>;
  static_assert(implements<Algorithm, kind::reduce_scatterv>,
                "collectives: this algorithm does not implement reduce_scatterv");
  const char* call = "reduce_scatterv";
  detail::check_counts(call, counts, comm.size());
  const std::size_t total = detail::checked_total(call, counts);
  detail::check_size(call, "input", std::ranges::size(input), total);
  detail::check_size(call, "output", std::ranges::size(output), counts[static_cast<std::size_t>(comm.rank())]);
  detail::check_bytes<T>(call, total);
  if constexpr (detail::reduces_through_accumulator<Op>) {
    static_assert(detail::check_accumulation<Algorithm, Op, T, memory_space_of<Out>>());
    detail::reduce_scatter_through<Algorithm, memory_space_of<Out>>(comm, call, {.counts = counts}, counts,
                                                                    detail::span_of(input), detail::span_of(output), op);
  } else {
    static_assert(detail::check_reduction<Algorithm, Op, T>());
    detail::run<Algorithm, memory_space_of<Out>>(comm, call, kind::reduce_scatterv{}, {.counts = counts},
                                                 std::ranges::data(input), std::ranges::data(output), op);
  }
}

// In-place, uneven: this rank's result lands on its own part of `data`.
template <algorithm Algorithm = automatic, transport Tr, writable_buffer Data, class Op>
void reduce_scatterv(communicator<Tr>& comm, Data&& data, std::span<const std::size_t> counts, Op op) {
  const auto part = detail::uneven_parts("reduce_scatterv", detail::as_span(data), counts, comm.rank(), comm.size());
  reduce_scatterv<Algorithm>(comm, part.all, part.own, counts, op);
}

}  // namespace collectives
