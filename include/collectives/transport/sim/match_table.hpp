// The (peer, tag) queues of one simulated rank (world.hpp): the receives it posted that
// no message has matched yet, or the messages that came before a receive for them.
// A key never has both: a receive takes an early message first, a message a posted
// receive. Open addressing in one array, probed in a line: a rank has a few keys at a
// time (a ring's four steps of receives), or many (all-to-all's one per peer), and a
// lookup of thousands of ranks' tables in turn should touch one cache line, not a
// bucket, a node and an allocation per key as a node-based map does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "../../concepts/vocabulary.hpp"
#include "../../runtime/prefetch.hpp"

namespace collectives::sim_detail {

inline constexpr std::uint32_t no_slot = UINT32_MAX;

// Messages match on (peer, tag), first in first out.
struct match_key {
  int peer;
  message_tag tag;
};

// A first-in first-out queue of slots (or messages), linked through their `next`: a
// key seldom has more than one.
struct match_queue {
  std::uint32_t first = no_slot, last = no_slot;
  bool early = false;  // messages waiting for a receive (else receives waiting for a message)
};

class match_table {
 public:
  // The queue of `key`, or null. Valid until the next make().
  match_queue* find(const match_key& key) noexcept {
    if (count_ == 0) return nullptr;
    for (std::size_t i = home(key);; i = next(i)) {
      entry& e = entries_[i];
      if (e.peer == empty) return nullptr;
      if (e.holds(key)) return &e.queue;
    }
  }

  // Asks for the line where a look-up of `key` starts, ahead of the look-up.
  void prefetch(const match_key& key) const noexcept {
    if (!entries_.empty()) detail::prefetch(&entries_[home(key)]);
  }

  // Asks for the whole table, where it is a few lines (a ring's few keys), ahead of
  // look-ups whose keys are not known yet.
  void prefetch_all() const noexcept {
    constexpr std::size_t per_line = 64 / sizeof(entry);
    if (entries_.size() <= 4 * per_line)
      for (std::size_t i = 0; i < entries_.size(); i += per_line) detail::prefetch(&entries_[i]);
  }

  // The queue of `key`, made (empty) if it had none.
  match_queue& make(const match_key& key) {
    if (4 * (count_ + 1) > 3 * entries_.size()) grow();
    std::size_t i = home(key);
    for (; entries_[i].peer != empty; i = next(i))
      if (entries_[i].holds(key)) return entries_[i].queue;
    entries_[i] = {key.tag.call, key.tag.step, key.peer, {}};
    ++count_;
    return entries_[i].queue;
  }

  // Drops queue `q` (from find or make), now empty: the entries after it that probed
  // past its place move back, so that a lookup still stops at the first empty entry.
  void erase(match_queue* q) noexcept {
    std::size_t hole = static_cast<std::size_t>(reinterpret_cast<entry*>(reinterpret_cast<char*>(q) - offsetof(entry, queue)) -
                                                entries_.data());
    for (std::size_t j = next(hole); entries_[j].peer != empty; j = next(j)) {
      const std::size_t mask = entries_.size() - 1;
      const std::size_t from_home = (j - home(entries_[j].key())) & mask;
      if (from_home >= ((j - hole) & mask)) {
        entries_[hole] = entries_[j];
        hole = j;
      }
    }
    entries_[hole].peer = empty;
    --count_;
  }

 private:
  static constexpr int empty = -1;  // no rank is -1
  struct entry {  // 32 bytes: the key's fields side by side, not a message_tag with its padding
    std::uint64_t call = 0;
    std::uint32_t step = 0;
    int peer = empty;
    match_queue queue;
    bool holds(const match_key& k) const noexcept { return peer == k.peer && step == k.tag.step && call == k.tag.call; }
    match_key key() const noexcept { return {peer, {call, step}}; }
  };

  std::size_t next(std::size_t i) const noexcept { return (i + 1) & (entries_.size() - 1); }
  std::size_t home(const match_key& k) const noexcept {  // splitmix64's finalizer over the three
    std::uint64_t h = k.tag.call * 0x9E3779B97F4A7C15ull + (std::uint64_t(k.tag.step) << 32 | std::uint32_t(k.peer));
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    return static_cast<std::size_t>(h ^ (h >> 31)) & (entries_.size() - 1);
  }

  // Twice the entries (8 at first), at most three quarters of them used: a ring's
  // four keys and an early message fit in 8 (four lines, prefetch_all's reach).
  void grow() {
    std::vector<entry> old(entries_.empty() ? 8 : 2 * entries_.size());
    std::swap(old, entries_);
    count_ = 0;
    for (const entry& e : old)
      if (e.peer != empty) make(e.key()) = e.queue;
  }

  std::vector<entry> entries_;  // a power of two of them
  std::size_t count_ = 0;
};

}  // namespace collectives::sim_detail
