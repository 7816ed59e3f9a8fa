// The schedule IR: what one rank does for one collective call, as plain data.
//
// A schedule is a list of operations with explicit dependencies (a DAG). An
// operation may start once every operation it depends on has finished; everything
// else may run concurrently, which is how slicing a buffer pipelines a ring or a
// tree. Regions are counted in elements, so one schedule serves any element type.
// Schedules are built by the algorithms (algorithm/ring.hpp, tree.hpp, direct.hpp)
// and run by runtime/executor.hpp on any transport; tests check them without a
// transport at all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "../memory_space.hpp"
#include "vocabulary.hpp"

namespace collectives {

enum class buffer_id : std::uint8_t {
  input,    // the caller's input
  output,   // the caller's output (may be the same memory as input: in-place calls)
  scratch,  // working memory the schedule asks for (schedule::scratch_count elements)
  staging,  // landing area of recv_reduce, needed only where the transport cannot
            // reduce straight from the wire (schedule::staging_count elements)
};

struct region {
  buffer_id buffer = buffer_id::output;
  std::size_t offset = 0;  // in elements
  std::size_t count = 0;   // in elements
};

enum class op_kind : std::uint8_t {
  send,         // send `src` to `peer`
  recv,         // receive from `peer` into `dst`
  recv_reduce,  // receive from `peer` and combine into `dst` (`src` is its staging area),
                // or with `base` into `dst` where `base` has elements
  reduce,       // combine local `src` into `dst`
  copy,         // copy local `src` to `dst`
  finalize,     // finish the reduction of `dst` (e.g. avg divides by the rank count)
};

constexpr bool is_message(op_kind k) noexcept {
  return k == op_kind::send || k == op_kind::recv || k == op_kind::recv_reduce;
}

using op_id = std::uint32_t;
inline constexpr op_id no_dependency = UINT32_MAX;  // ignored in dependency lists
[[deprecated("use no_dependency")]] inline constexpr op_id no_op = no_dependency;

struct operation {
  op_kind kind = op_kind::copy;
  int peer = -1;           // send, recv, recv_reduce
  std::uint32_t tag = 0;   // matches the peer's operation for the same message
  region dst{};            // what the operation writes
  region src{};            // what it reads
  region base{};           // recv_reduce: the other operand, when it is not `dst` itself (none: no elements)
  operand_order order = operand_order::received_last;  // recv_reduce, reduce
  std::uint32_t first_dep = 0;
  std::uint32_t dep_count = 0;
};

class schedule {
 public:
  std::vector<operation> ops;
  std::vector<op_id> deps;          // dependency lists of all ops, back to back
  std::size_t scratch_count = 0;    // elements of scratch this schedule uses
  std::size_t staging_count = 0;    // elements of staging its recv_reduce ops use
  const char* algorithm = nullptr;  // the name of the algorithm that planned it (plan_of), for the trace
  // The dependency lists reversed, which the executor follows: each op's successors,
  // back to back (op i's are successors[successor_begin[i]] up to successor_begin[i + 1]).
  // index_successors() fills them once per plan (the plan cache does, so that a
  // repeated call does not); add() drops them.
  std::vector<op_id> successor_begin;
  std::vector<op_id> successors;

  std::span<const op_id> deps_of(const operation& op) const {
    return {deps.data() + op.first_dep, op.dep_count};
  }

  op_id add(operation op, std::initializer_list<op_id> after = {}) { return add(op, std::span{after.begin(), after.size()}); }

  op_id add(operation op, std::span<const op_id> after) {
    successor_begin.clear();
    op.first_dep = static_cast<std::uint32_t>(deps.size());
    for (op_id d : after)
      if (d != no_dependency) deps.push_back(d);
    op.dep_count = static_cast<std::uint32_t>(deps.size() - op.first_dep);
    ops.push_back(op);
    return static_cast<op_id>(ops.size() - 1);
  }

  bool indexed() const noexcept { return successor_begin.size() == ops.size() + 1; }
  void index_successors() { index_into(successor_begin, successors); }

  // The same lists, into the caller's vectors (the executor's, for a plan not indexed).
  void index_into(std::vector<op_id>& begin, std::vector<op_id>& list) const {
    const std::size_t n = ops.size();
    begin.assign(n + 1, 0);
    for (const operation& o : ops)
      for (op_id d : deps_of(o)) ++begin[d];
    // begin[d] counts d's successors; running sums make it the end of d's list, and
    // filling each list backwards (later ops first, so lists stay in op order) leaves it
    // at the list's beginning, where the next list ends.
    for (std::size_t i = 1; i <= n; ++i) begin[i] += begin[i - 1];
    list.resize(deps.size());
    for (std::size_t i = n; i-- > 0;)
      for (op_id d : deps_of(ops[i])) list[--begin[d]] = static_cast<op_id>(i);
  }

  // Reserves `count` elements of scratch and returns their region.
  region reserve_scratch(std::size_t count) {
    region r{buffer_id::scratch, scratch_count, count};
    scratch_count += count;
    return r;
  }

  op_id send(int peer, std::uint32_t tag, region src, std::initializer_list<op_id> after = {}) {
    return add({.kind = op_kind::send, .peer = peer, .tag = tag, .src = src}, after);
  }
  op_id recv(int peer, std::uint32_t tag, region dst, std::initializer_list<op_id> after = {}) {
    return add({.kind = op_kind::recv, .peer = peer, .tag = tag, .dst = dst}, after);
  }
  op_id recv_reduce(int peer, std::uint32_t tag, region dst, operand_order order,
                    std::initializer_list<op_id> after = {}) {
    region landing{buffer_id::staging, staging_count, dst.count};
    staging_count += dst.count;
    return add({.kind = op_kind::recv_reduce, .peer = peer, .tag = tag, .dst = dst, .src = landing, .order = order},
               after);
  }
  // dst = base combined with what arrives: a first reduction into `dst` needs no copy
  // of `base` there before it (base and dst may be the same memory).
  op_id recv_reduce_onto(int peer, std::uint32_t tag, region dst, region base, operand_order order,
                         std::initializer_list<op_id> after = {}) {
    const op_id id = recv_reduce(peer, tag, dst, order, after);
    ops[id].base = base;
    return id;
  }
  op_id reduce(region dst, region src, operand_order order, std::initializer_list<op_id> after = {}) {
    return add({.kind = op_kind::reduce, .dst = dst, .src = src, .order = order}, after);
  }
  op_id copy(region dst, region src, std::initializer_list<op_id> after = {}) {
    return add({.kind = op_kind::copy, .dst = dst, .src = src}, after);
  }
  op_id finalize(region dst, std::initializer_list<op_id> after = {}) {
    return add({.kind = op_kind::finalize, .dst = dst}, after);
  }
};

// What a schedule is built for. Counts are in elements; which count means what is
// given per collective in docs/concepts/algorithm.md.
struct plan_request {
  int rank = 0;
  int size = 1;
  std::size_t count = 0;                    // elements per rank (or per chunk, for P*N collectives)
  int root = 0;
  std::span<const std::size_t> counts{};    // v-forms: elements per rank (all_to_allv: sent to each peer)
  std::span<const std::size_t> recv_counts{};  // all_to_allv: elements received from each peer
  std::size_t element_size = 1;             // bytes per element, to size pipeline slices
  bool finalize = false;                    // the op has a finalize step (avg)
  bool commutative = true;                  // the op may be applied out of rank order
  link_costs costs{};                       // the slowest link the call crosses, for automatic selection
  link_costs on_host_costs{};               // between two ranks of one host (hierarchical's host parts)
  std::size_t slice_bytes = 512 * 1024;     // pipeline granularity of ring and tree
  std::span<const int> hosts{};             // each rank's host (0, 1, ...), for algorithms with needs_hosts
};

}  // namespace collectives
