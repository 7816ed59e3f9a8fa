// A schedule as the runtime keeps it: 20 bytes an operation, its successor lists made
// once, and nothing in it that names the rank it was planned for.
//
// A ring's plan is 2(P - 1) operations on every rank, and rank r's is rank 0's turned
// by r: its peers are r + 1 and r - 1, its chunks start at r. Written relative to the
// rank (a peer as its distance from the rank; a region of a buffer that holds a block
// per rank as a block counted from the rank's own), the plans of all ranks are the same
// data, so the ranks of one process hold one copy (shared_plan). Any schedule compacts
// exactly, whether or not it turns with the rank: the encoding is undone for the rank
// that runs it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "../concepts/schedule.hpp"
#include "../config.hpp"

namespace collectives {

// The caller's buffers that a collective splits into one block per rank (all_gather's
// output, reduce_scatter's input, both of all_reduce and all_to_all): a region in one
// of them is written as a block counted from the rank's own.
struct blocks_per_rank {
  bool input = false, output = false;
};

class compact_plan {
 public:
  compact_plan() = default;
  // `plan`, planned for rank `rank` of `size`, written relative to that rank. With
  // `merge_regions`, equal regions are stored once (a plan that is kept); a plan made
  // for one call skips the search.
  COLLECTIVES_DECL compact_plan(const schedule& plan, int rank, int size, blocks_per_rank turned = {},
                                bool merge_regions = false);

  std::size_t size() const noexcept { return ops_.size(); }
  // The algorithm that planned it (schedule::algorithm): a static name, or null.
  const char* algorithm() const noexcept { return algorithm_; }
  op_kind kind(op_id i) const noexcept { return static_cast<op_kind>(ops_[i].head & 7u); }

  // Operation i as rank `rank` runs it. Its dependencies are left out: the runtime
  // follows the successor lists.
  operation op(op_id i, int rank) const noexcept {
    const packed_op& p = ops_[i];
    operation o;
    o.kind = static_cast<op_kind>(p.head & 7u);
    o.order = static_cast<operand_order>((p.head >> 3) & 1u);
    const std::uint32_t distance = p.head >> 4;  // the peer's distance + 1; 0: no peer
    if (distance != 0) o.peer = static_cast<int>(turn(distance - 1, rank));
    o.tag = p.tag;
    o.dst = region_at(p.dst, rank);
    o.src = region_at(p.src, rank);
    if (p.base != no_region) o.base = region_at(p.base, rank);
    return o;
  }

  // Op i's successors are successors()[successor_begin()[i]] up to successor_begin()[i + 1].
  const op_id* successor_begin() const noexcept { return successor_begin_.data(); }
  const op_id* successors() const noexcept { return successors_.data(); }
  std::size_t edges() const noexcept { return successors_.size(); }

  std::size_t scratch_count() const noexcept { return scratch_count_; }
  std::size_t staging_count() const noexcept { return staging_count_; }

  // Bytes it holds, for tests and the docs' figures.
  COLLECTIVES_DECL std::size_t bytes() const noexcept;

  COLLECTIVES_DECL friend bool operator==(const compact_plan&, const compact_plan&) noexcept;
  COLLECTIVES_DECL std::uint64_t fingerprint() const noexcept;

 private:
  static constexpr std::uint32_t no_region = UINT32_MAX;
  struct packed_op {  // 20 bytes
    std::uint32_t head = 0;  // kind (3 bits), operand order (1), the peer's distance + 1 (28)
    std::uint32_t tag = 0;
    std::uint32_t dst = 0, src = 0, base = no_region;  // into regions_
    friend bool operator==(const packed_op&, const packed_op&) = default;
  };
  enum class placement : std::uint8_t {
    absolute,     // offset and count as planned
    whole_block,  // all of the buffer's block `block` counted from the rank's own
    in_block,     // offset and count within that block
  };
  struct packed_region {
    buffer_id buffer = buffer_id::output;
    placement where = placement::absolute;
    std::uint32_t block = 0;
    std::size_t offset = 0, count = 0;
    friend bool operator==(const packed_region&, const packed_region&) = default;
  };
  // A buffer as `size` blocks: the first `remainder` of quotient + 1 elements, the
  // rest of `quotient` (how the algorithms split a buffer into chunks).
  struct blocks {
    std::size_t quotient = 0, remainder = 0;
    std::size_t begin(std::size_t b) const noexcept { return b * quotient + (b < remainder ? b : remainder); }
    std::size_t count(std::size_t b) const noexcept { return quotient + (b < remainder); }
    friend bool operator==(const blocks&, const blocks&) = default;
  };

  // The rank `distance` after `rank`, around the group.
  std::uint32_t turn(std::uint32_t distance, int rank) const noexcept {
    const std::uint32_t r = distance + static_cast<std::uint32_t>(rank);
    return r >= group_size_ ? r - group_size_ : r;
  }

  region region_at(std::uint32_t index, int rank) const noexcept {
    const packed_region& p = regions_[index];
    if (p.where == placement::absolute) return {p.buffer, p.offset, p.count};
    const blocks& of = blocks_[static_cast<std::size_t>(p.buffer)];
    const std::size_t b = turn(p.block, rank);
    if (p.where == placement::whole_block) return {p.buffer, of.begin(b), of.count(b)};
    return {p.buffer, of.begin(b) + p.offset, p.count};
  }

  packed_region pack(region r, int rank, blocks_per_rank turned) const noexcept;

  std::vector<packed_op> ops_;
  std::vector<packed_region> regions_;
  std::vector<op_id> successor_begin_, successors_;
  blocks blocks_[4]{};  // by buffer_id
  std::uint32_t group_size_ = 1;
  std::size_t scratch_count_ = 0, staging_count_ = 0;
  const char* algorithm_ = nullptr;
};

// The plans the communicators of this process keep, each distinct one held once: the
// ranks of one process (threads over inproc, a simulated group) that plan the same
// collective share the one copy, as long as one of them keeps it.
COLLECTIVES_DECL std::shared_ptr<const compact_plan> shared_plan(compact_plan&& plan);

}  // namespace collectives

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "compact_plan.ipp"
#endif
