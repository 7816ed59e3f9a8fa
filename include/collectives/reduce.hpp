// reduce: the root ends with op over all ranks' buffers, element-wise.
#pragma once

#include <ranges>
#include <span>

#include "algorithm/automatic.hpp"
#include "detail/accumulated_call.hpp"
#include "detail/call.hpp"

namespace collectives {

// Out-of-place: `output` is written on the root only; other ranks may pass an empty
// one. No rank's input is modified.
template <algorithm Algorithm = automatic, transport Tr, buffer In, writable_buffer Out, class Op>
  requires std::same_as<element_of<In>, element_of<Out>>
void reduce(communicator<Tr>& comm, const In& input, Out&& output, Op op, int root) {
  using T = element_of<Out>;
  static_assert(implements<Algorithm, kind::reduce>, "collectives: this algorithm does not implement reduce");
  const char* call = "reduce";
  detail::check_root(call, root, comm.size());
  if (comm.rank() == root) detail::check_size(call, "output", std::ranges::size(output), std::ranges::size(input));
  detail::check_bytes<T>(call, std::ranges::size(input));
  if constexpr (detail::reduces_through_accumulator<Op>) {
    static_assert(detail::check_accumulation<Algorithm, Op, T, memory_space_of<Out>>());
    detail::reduce_through<Algorithm, memory_space_of<Out>>(comm, detail::span_of(input), detail::span_of(output), op,
                                                            root);
  } else {
    static_assert(detail::check_reduction<Algorithm, Op, T>());
    detail::run<Algorithm, memory_space_of<Out>>(comm, call, kind::reduce{},
                                                 {.count = std::ranges::size(input), .root = root},
                                                 std::ranges::data(input), std::ranges::data(output), op);
  }
}

// In-place: the root's `data` receives the result; other ranks' data is unchanged.
template <algorithm Algorithm = automatic, transport Tr, writable_buffer Data, class Op>
void reduce(communicator<Tr>& comm, Data&& data, Op op, int root) {
  reduce<Algorithm>(comm, data, data, op, root);
}

}  // namespace collectives
