// The reducing calls whose op works on an accumulator type wider than the elements
// (ops/accumulate.hpp): each rank widens its input, the ranks reduce the accumulators,
// and each result is rounded to the element type once. An all_reduce reduce-scatters
// the accumulators, rounds its own part and all-gathers the element type, so that
// only the reduce phase carries the wider type; with an algorithm that does not plan
// those two, it all-reduces the accumulators and rounds every element.
//
// These are blocking calls made of two or three calls of the algorithm, each with its
// own trace event and timeout, all under the name of the user's call, which the call
// check sees once, as the user made it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../ops/accumulate.hpp"
#include "../ops/host_reduce.hpp"
#include "agreed_scales.hpp"
#include "call.hpp"
#include "call_check.hpp"

namespace collectives::detail {

// The op, the accumulator and the conversions of a call: accumulate_as widens with a
// conversion; reproducible_sum first agrees on a fixed_point scale per block of
// elements. widen() converts a rank's whole input; narrow() `n` accumulators that hold
// the input's elements from `first` on.
template <class Op, class T>
struct accumulation;

template <class A, class Op, class T>
struct accumulation<accumulating_op<A, Op>, T> {
  using accumulator = A;
  accumulating_op<A, Op> op;

  template <class Comm>
  accumulation(Comm&, const char*, accumulating_op<A, Op> o, std::span<const T>) : op(o) {}
  void widen(std::span<const T> in, A* out) const { convert(in.data(), out, in.size()); }
  void narrow(const A* in, T* out, std::size_t, std::size_t n) const { convert(in, out, n); }
};

template <class T>
struct accumulation<reproducible_sum, T> {
  static_assert(std::is_floating_point_v<T> || std::is_constructible_v<T, float>,
                "collectives: reproducible_sum adds float, double and the narrow types (element_types.hpp)");
  using accumulator = std::int64_t;
  static constexpr std::size_t block = reproducible_sum::block;
  reproducible_sum op;
  std::vector<fixed_point> scales;  // by block

  template <class Comm>
  accumulation(Comm& comm, const char* call, reproducible_sum o, std::span<const T> input) : op(o) {
    if (static_cast<std::uint64_t>(comm.size()) > op.max_terms)
      throw error(errc::count_overflow, std::string(call) + ": reproducible_sum adds " + std::to_string(comm.size()) +
                                            " ranks' values, more than its max_terms of " + std::to_string(op.max_terms));
    std::vector<int> largest((input.size() + block - 1) / block);
    for (std::size_t b = 0; b < largest.size(); ++b)
      largest[b] = largest_exponent(input.subspan(b * block, std::min(block, input.size() - b * block)));
    scales = agree_fixed_points(comm, call, largest, op.max_terms);
  }
  void widen(std::span<const T> in, std::int64_t* out) const {
    for (std::size_t b = 0; b * block < in.size(); ++b)
      scales[b].units_of(in.subspan(b * block, std::min(block, in.size() - b * block)), out + b * block);
  }
  void narrow(const std::int64_t* in, T* out, std::size_t first, std::size_t n) const {
    for (std::size_t i = 0; i < n;) {  // a block's part at a time
      const std::size_t b = (first + i) / block, k = std::min(n - i, (b + 1) * block - (first + i));
      scales[b].values_of(std::span(in + i, k), out + i);
      i += k;
    }
  }
};

// Room for `count` accumulators (uninitialized until widened), the communicator's own
// until its next call through an accumulator.
template <class A, transport Tr>
A* accumulators(communicator<Tr>& comm, std::size_t count) {
  static_assert(alignof(A) <= reusable_host_memory::alignment);
  return reinterpret_cast<A*>(comm.workspace().accumulators.get(count * sizeof(A)));
}

// With call checking on, the user's call is checked once, as made (its count, element
// size, op and algorithm), and its parts not at all: their counts and element types are
// not a plain call's, so a rank that calls plain `sum` where the others call
// accumulate_as would read of a count that differs, not of the op.
template <class Algorithm, class Op, class T, transport Tr>
class checked_once {
 public:
  checked_once(communicator<Tr>& comm, const char* call, plan_request req) : comm_(comm), checking_(comm.checks_calls()) {
    if (!checking_) return;
    req.element_size = sizeof(T);
    check_same_call(comm, call, signature_of(call, req, type_fingerprint<Op>(), type_fingerprint<Algorithm>(), true));
    comm.check_calls(false);
  }
  ~checked_once() { comm_.check_calls(checking_); }
  checked_once(const checked_once&) = delete;
  checked_once& operator=(const checked_once&) = delete;

 private:
  communicator<Tr>& comm_;
  const bool checking_;
};

template <class Algorithm, class Op, class T, class Space>
constexpr bool check_accumulation() {
  static_assert(check_reduction<Algorithm, Op, typename accumulation<Op, T>::accumulator>());
  static_assert(std::is_same_v<Space, host_memory>,
                "collectives: accumulate_as and reproducible_sum work on host memory (device buffers: not yet)");
  return true;
}

// A host buffer as a span of its elements.
template <class R>
auto host_span(R&& r) {
  return std::span(std::ranges::data(r), std::ranges::size(r));
}

template <class Algorithm, transport Tr, class T, class Op>
void all_reduce_through(communicator<Tr>& comm, std::span<const T> input, std::span<T> output, const Op& user_op) {
  using A = typename accumulation<Op, T>::accumulator;
  const char* call = "all_reduce";
  const std::size_t count = input.size();
  checked_once<Algorithm, Op, T, Tr> checked(comm, call, {.count = count});
  accumulation<Op, T> acc(comm, call, user_op, input);
  A* const wide = accumulators<A>(comm, count);
  acc.widen(input, wide);
  if constexpr (implements<Algorithm, kind::reduce_scatterv> && implements<Algorithm, kind::all_gatherv>) {
    const auto counts = plan::even_chunk_counts(count, comm.size());
    const std::size_t own = plan::displacements(counts)[static_cast<std::size_t>(comm.rank())];
    const std::size_t own_count = counts[static_cast<std::size_t>(comm.rank())];
    run<Algorithm>(comm, call, kind::reduce_scatterv{}, {.counts = counts}, wide, wide + own, acc.op);
    acc.narrow(wide + own, output.data() + own, own, own_count);
    no_reduce keep;
    run<Algorithm>(comm, call, kind::all_gatherv{}, {.counts = counts}, output.data() + own, output.data(), keep);
  } else {
    run<Algorithm>(comm, call, kind::all_reduce{}, {.count = count}, wide, wide, acc.op);
    acc.narrow(wide, output.data(), 0, count);
  }
}

template <class Algorithm, transport Tr, class T, class Op>
void reduce_through(communicator<Tr>& comm, std::span<const T> input, std::span<T> output, const Op& user_op, int root) {
  using A = typename accumulation<Op, T>::accumulator;
  const char* call = "reduce";
  const std::size_t count = input.size();
  checked_once<Algorithm, Op, T, Tr> checked(comm, call, {.count = count, .root = root});
  accumulation<Op, T> acc(comm, call, user_op, input);
  A* const wide = accumulators<A>(comm, count);
  acc.widen(input, wide);
  run<Algorithm>(comm, call, kind::reduce{}, {.count = count, .root = root}, wide, wide, acc.op);
  if (comm.rank() == root) acc.narrow(wide, output.data(), 0, count);
}

// reduce_scatter (Kind and its request as the front end makes them) or reduce_scatterv;
// this rank's part starts at element `own_first` of the input.
template <class Algorithm, transport Tr, class Kind, class T, class Op>
void reduce_scatter_through(communicator<Tr>& comm, const char* call, Kind kind, const plan_request& req,
                            std::span<const T> input, std::span<T> output, std::size_t own_first, const Op& user_op) {
  using A = typename accumulation<Op, T>::accumulator;
  checked_once<Algorithm, Op, T, Tr> checked(comm, call, req);
  accumulation<Op, T> acc(comm, call, user_op, input);
  A* const wide = accumulators<A>(comm, input.size() + output.size());
  acc.widen(input, wide);
  A* const own = wide + input.size();
  run<Algorithm>(comm, call, kind, req, wide, own, acc.op);
  acc.narrow(own, output.data(), own_first, output.size());
}

}  // namespace collectives::detail
