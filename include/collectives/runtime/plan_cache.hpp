// The schedules a communicator planned lately. A program repeats the same calls (a
// training step's all_reduce of the same buffers), and planning with its allocations
// is a visible part of a small call's latency, so a repeated call reuses its plan.
// Plans are kept compact (compact_plan.hpp), one copy for the ranks of a process.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "../concepts/schedule.hpp"
#include "compact_plan.hpp"

namespace collectives {

// Its address names one algorithm's planner for one kind of call.
template <class Algorithm, class Kind>
inline constexpr char planner_id = 0;

class plan_cache {
 public:
  // Everything a plan depends on besides the communicator's rank, size and costs.
  struct key {
    const void* planner = nullptr;
    std::size_t count = 0, element_size = 0, slice_bytes = 0;
    int root = 0;
    bool finalize = false, commutative = false;
    friend bool operator==(const key&, const key&) = default;
  };

  // v-forms plan from per-rank counts, which the key doesn't hold: those aren't kept.
  static bool keeps(const plan_request& r) { return r.counts.empty() && r.recv_counts.empty(); }

  template <class Algorithm, class Kind>
  static key key_of(const plan_request& r) {
    return {&planner_id<Algorithm, Kind>, r.count, r.element_size, r.slice_bytes, r.root, r.finalize, r.commutative};
  }

  // The plan for `k`, made by `make()` the first time (a schedule for rank `rank` of
  // `size`, kept compact and shared with the process's other ranks that made the same;
  // `turned`: the buffers the collective splits by rank).
  // The reference holds until the next call of find_or_make.
  template <class Make>
  const std::shared_ptr<const compact_plan>& find_or_make(const key& k, int rank, int size, blocks_per_rank turned,
                                                         Make&& make) {
    for (auto& e : entries_)
      if (e.k == k) return e.plan;
    entry made{k, shared_plan(compact_plan(make(), rank, size, turned, true))};
    if (entries_.size() < capacity) {
      entries_.reserve(capacity);
      return entries_.emplace_back(std::move(made)).plan;
    }
    entry& replaced = entries_[next_victim_++ % capacity];  // the oldest
    replaced = std::move(made);
    return replaced.plan;
  }

 private:
  static constexpr std::size_t capacity = 16;
  struct entry {
    key k;
    std::shared_ptr<const compact_plan> plan;
  };
  std::vector<entry> entries_;
  std::size_t next_victim_ = 0;
};

}  // namespace collectives
