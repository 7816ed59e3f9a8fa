// Which ranks of an shm group go on after a loss, agreed by every survivor.
//
// Shared memory makes the agreement simple: one compare-and-swap decides it. Each
// survivor marks that it has come to this shrink attempt, then waits until every rank
// has come, died (its pidfd says so) or closed its communicator. The first to see that
// writes its proposal, those that came and live, into its own part of the segment,
// and then tries to make itself the attempt's decider in the header. One succeeds;
// every survivor reads the winner's proposal, which was complete before it won. A rank
// that dies after the decision is still in the new group, which then reports it lost
// (docs/fault-tolerance.md).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "../../concepts/transport.hpp"
#include "../../error.hpp"
#include "segment.hpp"
#include "waiting.hpp"

namespace collectives::shm_detail {

inline std::uint64_t decision_word(std::uint32_t attempt, int decider) {
  return std::uint64_t(attempt) << 32 | std::uint32_t(decider + 1);
}

// The ranks that go on, in rank order. Throws errc::timeout when a rank that lives
// has not come to the attempt by `until`.
inline std::vector<int> agree_on_survivors(const segment& seg, int rank, const process_watch& watch,
                                           std::uint32_t attempt, deadline until) {
  const int size = seg.shape().size;
  auto gone = [&](int r) {
    return shared(seg.rank(r).state).load(std::memory_order_acquire) == departed || watch.dead(r);
  };
  auto came = [&](int r) { return shared(seg.rank(r).shrink_attempt).load(std::memory_order_acquire) == attempt; };
  shared(seg.rank(rank).shrink_attempt).store(attempt, std::memory_order_release);
  auto& decision = seg.header().shrink_decision;

  for (auto pause = std::chrono::microseconds(20);;) {
    std::uint64_t seen = shared(decision).load(std::memory_order_acquire);
    if (seen >> 32 == attempt) break;
    const std::string missing = detail::ranks_missing(size, [&](int r) { return r != rank && !came(r) && !gone(r); });
    if (missing.empty()) {
      std::uint64_t* mine = seg.proposal(rank);
      for (std::size_t w = 0; w < seg.shape().proposal_words(); ++w) shared(mine[w]).store(0, std::memory_order_relaxed);
      for (int r = 0; r < size; ++r)
        if (r == rank || (came(r) && !gone(r)))
          shared(mine[std::size_t(r) / 64]).fetch_or(std::uint64_t(1) << (r % 64), std::memory_order_relaxed);
      while (seen >> 32 < attempt &&
             !shared(decision).compare_exchange_weak(seen, decision_word(attempt, rank), std::memory_order_acq_rel)) {
      }
      break;
    }
    if (clock::now() >= until)
      throw error(errc::timeout, "shm rank " + std::to_string(rank) + ": shrink timed out waiting for rank(s) " + missing +
                                     ", which live but did not call shrink");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }

  const std::uint64_t decided = shared(decision).load(std::memory_order_acquire);
  std::uint64_t* chosen = seg.proposal(int(decided & 0xFFFFFFFFu) - 1);
  std::vector<int> survivors;
  for (int r = 0; r < size; ++r)
    if (shared(chosen[std::size_t(r) / 64]).load(std::memory_order_relaxed) >> (r % 64) & 1)
      survivors.push_back(r);
  return survivors;
}

}  // namespace collectives::shm_detail
