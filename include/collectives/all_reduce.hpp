// all_reduce: every rank ends with op over all ranks' buffers, element-wise.
#pragma once

#include <ranges>
#include <span>

#include "algorithm/automatic.hpp"
#include "algorithm/hierarchical.hpp"
#include "detail/accumulated_call.hpp"
#include "detail/call.hpp"

namespace collectives {

// Out-of-place: `input` and `output` have the same size on every rank.
template <algorithm Algorithm = automatic, transport Tr, buffer In, writable_buffer Out, class Op>
  requires std::same_as<element_of<In>, element_of<Out>>
void all_reduce(communicator<Tr>& comm, const In& input, Out&& output, Op op) {
  using T = element_of<Out>;
  static_assert(implements<Algorithm, kind::all_reduce>, "collectives: this algorithm does not implement all_reduce");
  const char* call = "all_reduce";
  detail::check_size(call, "output", std::ranges::size(output), std::ranges::size(input));
  detail::check_bytes<T>(call, std::ranges::size(input));
  if constexpr (detail::reduces_through_accumulator<Op>) {
    static_assert(detail::check_accumulation<Algorithm, Op, T, memory_space_of<Out>>());
    detail::all_reduce_through<Algorithm, memory_space_of<Out>>(comm, detail::span_of(input), detail::span_of(output),
                                                                op);
  } else {
    static_assert(detail::check_reduction<Algorithm, Op, T>());
    detail::run<Algorithm, memory_space_of<Out>>(comm, call, kind::all_reduce{}, {.count = std::ranges::size(input)},
                                                 std::ranges::data(input), std::ranges::data(output), op);
  }
}

// In-place: `data` is the input and receives the result.
template <algorithm Algorithm = automatic, transport Tr, writable_buffer Data, class Op>
void all_reduce(communicator<Tr>& comm, Data&& data, Op op) {
  all_reduce<Algorithm>(comm, data, data, op);
}

// One value: returns op over every rank's `value`.
template <algorithm Algorithm = automatic, transport Tr, class T, class Op>
  requires(!std::ranges::range<T>)
T all_reduce(communicator<Tr>& comm, const T& value, Op op) {
  T result = value;
  all_reduce<Algorithm>(comm, std::span{&value, 1}, std::span{&result, 1}, op);
  return result;
}

}  // namespace collectives
