// The compact plan's functions that are not templates (compact_plan.hpp): inline in a
// header-only build, compiled once into the library with separate compilation.
#pragma once

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "../error.hpp"
#include "compact_plan.hpp"

namespace collectives {

namespace detail {

struct packed_region_hash {
  template <class R>
  std::size_t operator()(const R& r) const noexcept {
    std::size_t h = r.offset * 0x9e3779b97f4a7c15ull ^ r.count;
    return h ^ (std::size_t(r.block) << 8 | std::size_t(r.where) << 4 | std::size_t(r.buffer));
  }
};

// FNV-1a over plain values.
struct fnv {
  std::uint64_t h = 0xcbf29ce484222325ull;
  void add(std::uint64_t v) noexcept {
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xffu)) * 0x100000001b3ull;
  }
};

}  // namespace detail

COLLECTIVES_DECL compact_plan::compact_plan(const schedule& plan, int rank, int size, blocks_per_rank turned,
                                            bool merge_regions)
    : group_size_(static_cast<std::uint32_t>(size)), scratch_count_(plan.scratch_count),
      staging_count_(plan.staging_count), algorithm_(plan.algorithm) {
  if (size < 1 || size >= (1 << 28) || rank < 0 || rank >= size)
    throw error(errc::invalid_config, "a plan for rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                          " ranks (at most 2^28 - 1 ranks)");
  // How far the plan reaches into each buffer, split into `size` blocks as the
  // algorithms split buffers into chunks.
  std::size_t extent[4] = {};
  for (const operation& o : plan.ops)
    for (const region& r : {o.dst, o.src, o.base}) {
      std::size_t& e = extent[static_cast<std::size_t>(r.buffer)];
      e = std::max(e, r.offset + r.count);
    }
  for (std::size_t b = 0; b < 4; ++b) blocks_[b] = {extent[b] / group_size_, extent[b] % group_size_};

  std::unordered_map<packed_region, std::uint32_t, detail::packed_region_hash> seen;
  const auto index_of = [&](const region& r) {
    const packed_region p = pack(r, rank, turned);
    if (merge_regions) {
      const auto [at, added] = seen.try_emplace(p, static_cast<std::uint32_t>(regions_.size()));
      if (!added) return at->second;
    }
    regions_.push_back(p);
    return static_cast<std::uint32_t>(regions_.size() - 1);
  };
  ops_.reserve(plan.ops.size());
  for (const operation& o : plan.ops) {
    std::uint32_t head = static_cast<std::uint32_t>(o.kind) | static_cast<std::uint32_t>(o.order) << 3;
    if (is_message(o.kind)) {
      if (o.peer < 0 || o.peer >= size)
        throw error(errc::invalid_peer, "a plan for rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                            " ranks has a message with rank " + std::to_string(o.peer));
      head |= (static_cast<std::uint32_t>((o.peer - rank + size) % size) + 1) << 4;
    }
    ops_.push_back({head, o.tag, index_of(o.dst), index_of(o.src), o.base.count ? index_of(o.base) : no_region});
  }
  if (plan.indexed()) {
    successor_begin_ = plan.successor_begin;
    successors_ = plan.successors;
  } else {
    plan.index_into(successor_begin_, successors_);
  }
}

COLLECTIVES_DECL auto compact_plan::pack(region r, int rank, blocks_per_rank turned) const noexcept -> packed_region {
  const packed_region as_planned{r.buffer, placement::absolute, 0, r.offset, r.count};
  // Scratch and staging are laid out in the order the plan asks for them, the same on
  // every rank whose plan is rank 0's turned: as planned, as is a buffer of one rank's data.
  const bool by_rank = (r.buffer == buffer_id::input && turned.input) || (r.buffer == buffer_id::output && turned.output);
  if (!by_rank || r.count == 0 || group_size_ == 1) return as_planned;
  const blocks& of = blocks_[static_cast<std::size_t>(r.buffer)];
  const std::size_t long_ones = of.remainder * (of.quotient + 1);  // where the longer blocks end
  std::size_t b;
  if (r.offset < long_ones) b = r.offset / (of.quotient + 1);
  else if (of.quotient > 0) b = of.remainder + (r.offset - long_ones) / of.quotient;
  else return as_planned;
  if (b >= group_size_ || r.offset + r.count > of.begin(b) + of.count(b)) return as_planned;  // spans blocks
  const auto block = static_cast<std::uint32_t>((b + group_size_ - static_cast<std::size_t>(rank)) % group_size_);
  if (r.offset == of.begin(b) && r.count == of.count(b)) return {r.buffer, placement::whole_block, block, 0, 0};
  return {r.buffer, placement::in_block, block, r.offset - of.begin(b), r.count};
}

COLLECTIVES_DECL std::size_t compact_plan::bytes() const noexcept {
  return sizeof(*this) + ops_.capacity() * sizeof(packed_op) + regions_.capacity() * sizeof(packed_region) +
         (successor_begin_.capacity() + successors_.capacity()) * sizeof(op_id);
}

COLLECTIVES_DECL bool operator==(const compact_plan& a, const compact_plan& b) noexcept {
  return a.group_size_ == b.group_size_ && a.scratch_count_ == b.scratch_count_ &&
         a.staging_count_ == b.staging_count_ && std::equal(a.blocks_, a.blocks_ + 4, b.blocks_) && a.ops_ == b.ops_ &&
         a.regions_ == b.regions_ && a.successor_begin_ == b.successor_begin_ && a.successors_ == b.successors_;
}

COLLECTIVES_DECL std::uint64_t compact_plan::fingerprint() const noexcept {
  detail::fnv f;
  f.add(group_size_);
  f.add(ops_.size());
  f.add(regions_.size());
  for (const packed_op& p : ops_)
    f.add(std::uint64_t(p.head) << 32 | p.tag), f.add(std::uint64_t(p.dst) << 32 | p.src), f.add(p.base);
  for (const packed_region& r : regions_)
    f.add(std::uint64_t(r.block) << 16 | std::uint64_t(r.where) << 8 | std::uint64_t(r.buffer)), f.add(r.offset),
        f.add(r.count);
  for (const blocks& b : blocks_) f.add(b.quotient), f.add(b.remainder);
  return f.h;
}

COLLECTIVES_DECL std::shared_ptr<const compact_plan> shared_plan(compact_plan&& plan) {
  // A tree map rather than a hash table: each entry is its own small allocation, made
  // by the rank that planned it, with no table that grows by the whole group at once.
  struct registry {
    std::mutex lock;
    std::multimap<std::uint64_t, std::weak_ptr<const compact_plan>> plans;
  };
  static registry& known = *new registry;  // never destroyed: a static communicator may outlive it
  const std::uint64_t key = plan.fingerprint();
  // Plans looked at and not taken are let go after the lock: letting go of the last
  // holder takes the lock.
  std::vector<std::shared_ptr<const compact_plan>> not_taken;
  std::lock_guard guard(known.lock);
  const auto [first, last] = known.plans.equal_range(key);
  for (auto it = first; it != last; ++it)
    if (auto held = it->second.lock()) {
      if (*held == plan) return held;
      not_taken.push_back(std::move(held));
    }
  // The last holder's release takes the entry out with it.
  std::shared_ptr<const compact_plan> made(new compact_plan(std::move(plan)), [key](const compact_plan* p) {
    {
      std::lock_guard g(known.lock);
      const auto [from, to] = known.plans.equal_range(key);
      for (auto it = from; it != to;) it = it->second.expired() ? known.plans.erase(it) : std::next(it);
    }
    delete p;
  });
  known.plans.emplace(key, made);
  return made;
}

}  // namespace collectives
