// A progress thread: advances a communicator's calls in flight while its owner
// computes, so that communication moves without the owner calling test() or
// progress(). The owner's thread and this one take turns on the transport: each
// holds `exclusive` while it works on it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <stop_token>
#include <thread>
#include <utility>

#include "../config.hpp"
#include "handover.hpp"

namespace collectives {

class progress_thread {
 public:
  // What one round of advancing found.
  enum class round { moved, waiting, nothing_in_flight };

  // `advance` advances every call in flight once; it runs on the thread, under the
  // lock, and ends early once the request it is given is raised: the owner waits.
  COLLECTIVES_DECL explicit progress_thread(std::function<round(handover_request)> advance);
  // One whose rounds never end early (as before the hand-over).
  explicit progress_thread(std::function<round()> advance)
      : progress_thread([advance = std::move(advance)](handover_request) { return advance(); }) {}
  progress_thread(const progress_thread&) = delete;
  progress_thread& operator=(const progress_thread&) = delete;
  COLLECTIVES_DECL ~progress_thread();

  // Held by the owner's thread while it works on the transport or the calls in
  // flight. Recursive, since a non-blocking start runs a blocking front end. The
  // thread steps aside as soon as an owner waits for it (its round ends at the next
  // pass), and sleeps until the owner has the lock: a mutex is not fair, and a thread
  // that relocked at once, or spun beside it, could keep the owner from the lock or
  // from a core (with more threads than cores, for a scheduler's time slice).
  class exclusive {
   public:
    explicit exclusive(progress_thread* t) : t_(t) {
      if (!t_) return;
      t_->owner_waiting_.fetch_add(1, std::memory_order_relaxed);
      t_->lock_.lock();
      if (t_->owner_waiting_.fetch_sub(1, std::memory_order_relaxed) == 1) t_->owner_waiting_.notify_all();
    }
    exclusive(const exclusive&) = delete;
    exclusive& operator=(const exclusive&) = delete;
    ~exclusive() {
      if (t_) t_->lock_.unlock();
    }

   private:
    progress_thread* t_;
  };

  // Sleeps until a round has moved a call, or `done()`, or `until`: for a thread
  // waiting on a call that this one advances. While anyone waits the thread does
  // not sleep between rounds, so that the call ends as soon as its messages allow.
  // A wake-up could slip between done() and the sleep: no sleep exceeds 1 ms.
  template <class Clock, class Duration, class Done>
  void await_round(std::chrono::time_point<Clock, Duration> until, Done&& done) {
    waiters_.fetch_add(1);
    {
      std::unique_lock lk(round_mutex_);
      const auto seen = rounds_moved_;
      round_cv_.wait_until(lk, std::min(until, Clock::now() + std::chrono::milliseconds(1)),
                           [&] { return rounds_moved_ != seen || done(); });
    }
    waiters_.fetch_sub(1);
  }

  // A call has started: the thread, idle for lack of calls, looks again.
  COLLECTIVES_DECL void wake();

 private:
  COLLECTIVES_DECL void loop(std::stop_token stop);
  COLLECTIVES_DECL void tell_waiters();

  // While calls wait on their peers: a few quick looks (a message often arrives
  // within microseconds), then sleeps growing to 100 µs, which bounds both the
  // delay the thread adds to a call and the core it takes from the computation.
  COLLECTIVES_DECL static void back_off(int idle_rounds);

  std::function<round(handover_request)> advance_;
  std::recursive_mutex lock_;
  std::atomic<int> owner_waiting_{0};
  std::mutex wake_mutex_;
  std::condition_variable_any woken_cv_;
  bool woken_ = false;
  std::atomic<int> waiters_{0};
  std::mutex round_mutex_;
  std::condition_variable round_cv_;
  unsigned long rounds_moved_ = 0;
  std::jthread thread_;  // last: it starts once everything above exists
};

}  // namespace collectives

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "progress_thread.ipp"
#endif
