// The events of a simulated group (transport/sim.hpp) in virtual time: what happens
// when, and the queue of those still to come, kept by time.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

namespace collectives::sim_detail {

// Virtual time in picoseconds: events order exactly, and a run of days still fits.
using picoseconds = std::int64_t;
inline picoseconds to_picoseconds(double seconds) { return std::llround(seconds * 1e12); }

enum class event_kind : std::uint8_t {
  sent,     // a send's bytes have left its port: the send is done
  arrived,  // a message's last byte is in: it matches a receive, or waits as early
  reduced,  // the rank's core has done a step: a fused receive's reduction, or a local step
  flow_starts,  // shared bandwidth: a message's bytes begin to flow (id: its flow record)
  departs,      // a message that waited for its sender's port leaves it (rank: the receiver)
};

struct event {
  event_kind kind;
  int rank;
  std::uint32_t id;  // the op's slot, or the message
  std::uint32_t generation;
};

// The events to come. Events at one time happen in the order they were made, and a
// run has few distinct times for many events (a ring of thousands of ranks in step
// makes a thousand or more for each): the events of a time are a bucket, read front to
// back, and only the times are a heap. A heap of the events themselves sifted each one
// through lines of a large array.
class event_queue {
 public:
  bool empty() const noexcept { return times_.empty(); }
  picoseconds first_time() const noexcept { return times_.front().at; }  // of a queue not empty

  void push(picoseconds at, const event& e) {
    if (last_bucket_ == none || at != last_time_) {
      last_time_ = at;
      last_bucket_ = bucket_of(at);
    }
    buckets_[last_bucket_].push_back(e);
  }

  // Takes the first time's bucket out of the queue, to be handled front to back: the
  // events made for that time meanwhile join it at its end. Then done().
  const std::vector<event>& open_first() {
    open_ = times_.front();
    std::pop_heap(times_.begin(), times_.end(), later);
    times_.pop_back();
    return buckets_[open_.bucket];
  }
  void done() {
    by_time_.erase(open_.at);
    buckets_[open_.bucket].clear();
    spare_.push_back(open_.bucket);
    if (last_bucket_ == open_.bucket) last_bucket_ = none;
    open_.bucket = none;
  }

 private:
  static constexpr std::uint32_t none = UINT32_MAX;
  struct time_entry {
    picoseconds at;
    std::uint32_t bucket;
  };
  static bool later(const time_entry& a, const time_entry& b) noexcept { return a.at > b.at; }

  std::uint32_t bucket_of(picoseconds at) {
    const auto [it, made] = by_time_.try_emplace(at, none);
    if (!made) return it->second;
    if (spare_.empty()) {
      it->second = static_cast<std::uint32_t>(buckets_.size());
      buckets_.emplace_back();
    } else {
      it->second = spare_.back();
      spare_.pop_back();
    }
    times_.push_back({at, it->second});
    std::push_heap(times_.begin(), times_.end(), later);
    return it->second;
  }

  std::vector<time_entry> times_;  // a heap, the first time on top
  std::unordered_map<picoseconds, std::uint32_t> by_time_;  // each pending time's bucket, and the open one's
  std::deque<std::vector<event>> buckets_;  // a bucket stays where it is while others are made
  std::vector<std::uint32_t> spare_;
  time_entry open_{0, none};
  picoseconds last_time_ = 0;
  std::uint32_t last_bucket_ = none;
};

}  // namespace collectives::sim_detail
