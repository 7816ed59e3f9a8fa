// The reducing calls whose op reduces through a wider type (ops/accumulate.hpp) reduce
// at owners: each rank sends each owner its part of the input in the element type (one
// all_to_allv), each owner reduces every rank's part of its elements in rank order
// through the op's accumulator and rounds each result once (owner_reduction.hpp), and
// the results go where the call puts them: to every rank (all_gatherv), to the root
// (gatherv) or to each rank's part (reduce_scatter). The links carry the element type
// only, as many bytes as a plain all_reduce's; no partial sum travels, so no result
// depends on the algorithm or the rank count's split of the work, and reproducible_sum
// needs no exchange of scales: an owner sees every value of its blocks.
//
// These are blocking calls made of two or three calls of the algorithms, each with its
// own trace event and timeout, all under the name of the user's call, which the call
// check sees once, as the user made it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../algorithm/automatic.hpp"
#include "../ops/accumulate.hpp"
#include "../ops/host_reduce.hpp"
#include "agreed_scales.hpp"
#include "call.hpp"
#include "call_check.hpp"
#include "owner_reduction.hpp"

namespace collectives::detail {

// The room of a reduction at owners in Space: `count` elements, then a byte per rank.
// Host memory: the communicator's workspace, its own until its next such call (kept
// between calls whatever their size: a training step repeats the same large call).
// Other spaces: their own allocation (the device's is stream-ordered), held by this.
template <class Space, class T>
class owner_room {
 public:
  template <transport Tr>
  owner_room(communicator<Tr>& comm, const memory_ops<Space>& ops, std::size_t count, int ranks)
      : count_(count) {
    static_assert(alignof(T) <= reusable_host_memory::alignment);
    const std::size_t bytes = count * sizeof(T) + static_cast<std::size_t>(ranks);
    if constexpr (std::is_same_v<Space, host_memory>) start_ = comm.workspace().accumulators.get(bytes);
    else start_ = (owned_ = ops.template allocate<std::byte>(bytes)).get();
  }
  T* elements() const { return reinterpret_cast<T*>(start_); }
  unsigned char* flags() const { return reinterpret_cast<unsigned char*>(start_ + count_ * sizeof(T)); }

 private:
  using owned = decltype(std::declval<const memory_ops<Space>&>().template allocate<std::byte>(0));
  std::size_t count_;
  std::byte* start_ = nullptr;
  [[no_unique_address]] std::conditional_t<std::is_same_v<Space, host_memory>, std::nullptr_t, owned> owned_{};
};

// Whether Space's local steps are the host's (host memory, and a stand-in for a
// device that the tests use): the host loops reduce there, with no device to wait for.
template <class Space>
inline constexpr bool host_steps = std::is_base_of_v<memory_ops<host_memory>, memory_ops<Space>>;

// Reduces at the owner, in Space (owner_reduction.hpp on the host, the device's
// kernels through its memory_ops), and waits for the device where there is one.
template <class Space, class T, class Op>
void reduce_parts_in(const memory_ops<Space>& ops, const Op& op, const T* parts, std::size_t n, int ranks, T* out,
                     unsigned char* not_finite, deadline until) {
  if constexpr (host_steps<Space>) {
    (void)ops;
    (void)until;
    if constexpr (std::same_as<Op, reproducible_sum>) reduce_parts(op, parts, n, ranks, out, not_finite);
    else reduce_parts(op, parts, n, ranks, out);
  } else {
    ops.reduce_parts(op, parts, n, ranks, out, not_finite);
    ops.synchronize(until);
  }
}

// Copies n elements (a device's: to, from or within it) and returns once they are there.
template <class Space, class T>
void copy_and_wait(const memory_ops<Space>& ops, T* to, const T* from, std::size_t n, deadline until) {
  ops.copy(to, from, n);
  if constexpr (requires { ops.synchronize(until); }) ops.synchronize(until);
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
  if constexpr (std::same_as<Op, reproducible_sum>)
    static_assert(std::is_floating_point_v<T> || std::is_constructible_v<T, float>,
                  "collectives: reproducible_sum adds float, double and the narrow types (element_types.hpp)");
  else
    static_assert(check_reduce_op<Op, typename Op::accumulator>());
  return true;
}

// A buffer as a span of its elements (its memory space goes along as a template argument).
template <class R>
auto span_of(R&& r) {
  return std::span(std::ranges::data(r), std::ranges::size(r));
}

// The input of a call whose element type the output gives (a non-const span converts).
template <class T>
using input_span = std::type_identity_t<std::span<const T>>;

// The algorithm that runs a part of the call: the user's where it plans that kind,
// else automatic (a tree has no all_gatherv, hierarchical only all_reduce).
template <class Algorithm, class Kind>
using part_algorithm = std::conditional_t<implements<Algorithm, Kind>, Algorithm, automatic>;

// Where the rank count or the op's bound on terms makes the sum unsafe, before any byte moves.
template <transport Tr, class Op>
void check_terms(communicator<Tr>& comm, const char* call, const Op& op) {
  if constexpr (std::same_as<Op, reproducible_sum>)
    if (static_cast<std::uint64_t>(comm.size()) > op.max_terms)
      throw error(errc::count_overflow, std::string(call) + ": reproducible_sum adds " + std::to_string(comm.size()) +
                                            " ranks' values, more than its max_terms of " + std::to_string(op.max_terms));
}

// Whether n elements at `a` and m at `b` share any.
template <class T>
bool overlap(const T* a, std::size_t n, const T* b, std::size_t m) {
  const auto first = reinterpret_cast<std::uintptr_t>(a), other = reinterpret_cast<std::uintptr_t>(b);
  return n != 0 && m != 0 && first < other + m * sizeof(T) && other < first + n * sizeof(T);
}

// This rank's results: `input` holds the call's elements, owned[q] of them owned by
// rank q back to back; one all_to_allv brings this rank every rank's part of its own,
// which it reduces. The results (owned[rank] elements) go to `own_out` where that is
// safe (null: nowhere), else to `room`. Infinity or NaN under reproducible_sum is an
// error on every rank, naming the ranks whose values hold it, with the input as it was.
template <class Space, transport Tr, class T, class Op>
const T* reduce_at_owners(communicator<Tr>& comm, const char* call, const T* input, std::span<const std::size_t> owned,
                          const Op& op, std::optional<owner_room<Space, T>>& room, T* own_out = nullptr) {
  const auto ranks = static_cast<std::size_t>(comm.size()), r = static_cast<std::size_t>(comm.rank());
  const std::size_t own = owned[r], total = plan::displacements(owned).back();
  const auto ops = memory_ops_of<Space>(comm.transport());
  const deadline until = clock::now() + comm.timeout();
  // Straight to the output, since the input is not read after the all_to_allv; but
  // not over the input where an error may follow.
  const bool straight =
      own_out != nullptr && (!std::same_as<Op, reproducible_sum> || !overlap(own_out, own, input, total));
  room.emplace(comm, ops, (ranks + (straight ? 0 : 1)) * own, comm.size());
  T* const parts = room->elements();
  T* const results = straight ? own_out : parts + ranks * own;
  const std::vector<std::size_t> from_each(ranks, own);
  no_reduce keep;  // (this rank's own part is copied too: the parts sent lie back to back)
  run<automatic, Space>(comm, call, kind::all_to_allv{}, {.counts = owned, .recv_counts = from_each}, input, parts,
                        keep);
  if constexpr (std::same_as<Op, reproducible_sum>) {
    unsigned char* const not_finite = room->flags();
    copy_and_wait(ops, not_finite, std::vector<unsigned char>(ranks).data(), ranks, until);  // zeros
    reduce_parts_in(ops, op, parts, own, comm.size(), results, not_finite, until);
    max any;
    run<automatic, Space>(comm, call, kind::all_reduce{}, {.count = ranks}, not_finite, not_finite, any);
    std::vector<unsigned char> seen(ranks);
    copy_and_wait(ops, seen.data(), not_finite, ranks, until);
    if (std::find(seen.begin(), seen.end(), 1) != seen.end())
      throw not_finite_values(call, comm.size(), std::span(reinterpret_cast<const char*>(seen.data()), ranks));
  } else {
    reduce_parts_in(ops, op, parts, own, comm.size(), results, nullptr, until);
  }
  return results;
}

template <class Algorithm, class Space, transport Tr, class T, class Op>
void all_reduce_through(communicator<Tr>& comm, input_span<T> input, std::span<T> output, const Op& op) {
  const char* call = "all_reduce";
  checked_once<Algorithm, Op, T, Tr> checked(comm, call, {.count = input.size()});
  check_terms(comm, call, op);
  const auto owned = owned_counts<Op>(input.size(), comm.size());
  T* const own_out = output.data() + plan::displacements(owned)[static_cast<std::size_t>(comm.rank())];
  std::optional<owner_room<Space, T>> room;
  const T* results = reduce_at_owners(comm, call, input.data(), owned, op, room, own_out);
  no_reduce keep;
  run<part_algorithm<Algorithm, kind::all_gatherv>, Space>(comm, call, kind::all_gatherv{}, {.counts = owned}, results,
                                                    output.data(), keep);
}

template <class Algorithm, class Space, transport Tr, class T, class Op>
void reduce_through(communicator<Tr>& comm, input_span<T> input, std::span<T> output, const Op& op,
                    int root) {
  const char* call = "reduce";
  checked_once<Algorithm, Op, T, Tr> checked(comm, call, {.count = input.size(), .root = root});
  check_terms(comm, call, op);
  const auto owned = owned_counts<Op>(input.size(), comm.size());
  std::optional<owner_room<Space, T>> room;
  const T* results = reduce_at_owners(comm, call, input.data(), owned, op, room);
  no_reduce keep;
  run<part_algorithm<Algorithm, kind::gatherv>, Space>(comm, call, kind::gatherv{}, {.root = root, .counts = owned}, results,
                                                output.data(), keep);
}

// How many of `from`'s elements (owned by rank q: from[q] back to back) go to each rank
// under `to`'s split of the same elements, and how many this rank gets from each.
struct moved_counts {
  std::vector<std::size_t> sent, received;
};
inline moved_counts shared_with(std::span<const std::size_t> from, std::span<const std::size_t> to, int rank) {
  const auto from_at = plan::displacements(from), to_at = plan::displacements(to);
  const auto overlap = [&](std::size_t a, std::size_t b) {  // from's part a with to's part b
    const std::size_t first = std::max(from_at[a], to_at[b]), last = std::min(from_at[a] + from[a], to_at[b] + to[b]);
    return last > first ? last - first : 0;
  };
  moved_counts m{std::vector<std::size_t>(from.size()), std::vector<std::size_t>(from.size())};
  const auto r = static_cast<std::size_t>(rank);
  for (std::size_t q = 0; q < from.size(); ++q) {
    m.sent[q] = overlap(r, q);
    m.received[q] = overlap(q, r);
  }
  return m;
}

// reduce_scatter or reduce_scatterv (`req` as the front end makes it), whose parts hold
// `counts` elements. The owners are the parts' ranks, except where reproducible_sum's
// blocks would be split between two: then whole blocks are reduced and the results
// moved to the parts (one more all_to_allv, of N/P elements per rank).
template <class Algorithm, class Space, transport Tr, class T, class Op>
void reduce_scatter_through(communicator<Tr>& comm, const char* call, const plan_request& req,
                            std::span<const std::size_t> counts, input_span<T> input,
                            std::span<T> output, const Op& op) {
  checked_once<Algorithm, Op, T, Tr> checked(comm, call, req);
  check_terms(comm, call, op);
  std::vector<std::size_t> owned(counts.begin(), counts.end());
  bool split_blocks = false;
  if constexpr (std::same_as<Op, reproducible_sum>) {
    const auto at = plan::displacements(counts);
    for (std::size_t q = 1; q < counts.size(); ++q)
      split_blocks = split_blocks || (at[q] % reproducible_sum::block != 0 && at[q] != input.size());
    if (split_blocks) owned = owned_counts<Op>(input.size(), comm.size());
  }
  std::optional<owner_room<Space, T>> room;
  const T* results =
      reduce_at_owners(comm, call, input.data(), owned, op, room, split_blocks ? nullptr : output.data());
  if (!split_blocks) {
    if (results != output.data())
      copy_and_wait(memory_ops_of<Space>(comm.transport()), output.data(), results, output.size(),
                    clock::now() + comm.timeout());
    return;
  }
  const moved_counts moved = shared_with(owned, counts, comm.rank());
  no_reduce keep;
  run<automatic, Space>(comm, call, kind::all_to_allv{}, {.counts = moved.sent, .recv_counts = moved.received}, results,
                 output.data(), keep);
}

}  // namespace collectives::detail
