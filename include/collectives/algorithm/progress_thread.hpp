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

namespace collectives {

class progress_thread {
 public:
  // What one round of advancing found.
  enum class round { moved, waiting, nothing_in_flight };

  // `advance` advances every call in flight once; it runs on the thread, under the lock.
  explicit progress_thread(std::function<round()> advance)
      : advance_(std::move(advance)), thread_([this](std::stop_token stop) { loop(stop); }) {}
  progress_thread(const progress_thread&) = delete;
  progress_thread& operator=(const progress_thread&) = delete;
  ~progress_thread() {
    thread_.request_stop();
    wake();
    thread_.join();
  }

  // Held by the owner's thread while it works on the transport or the calls in
  // flight. Recursive, since a non-blocking start runs a blocking front end. The
  // thread steps aside as soon as an owner waits for it: a mutex is not fair, and a
  // thread that relocks at once could keep the owner out for as long as calls move.
  class exclusive {
   public:
    explicit exclusive(progress_thread* t) : t_(t) {
      if (!t_) return;
      t_->owner_waiting_.fetch_add(1, std::memory_order_relaxed);
      t_->lock_.lock();
      t_->owner_waiting_.fetch_sub(1, std::memory_order_relaxed);
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
  void wake() {
    {
      std::lock_guard g(wake_mutex_);
      woken_ = true;
    }
    woken_cv_.notify_one();
  }

 private:
  void loop(std::stop_token stop) {
    int idle_rounds = 0;
    while (!stop.stop_requested()) {
      round r;
      {
        std::lock_guard g(lock_);
        r = advance_();
      }
      while (owner_waiting_.load(std::memory_order_relaxed) > 0) std::this_thread::yield();
      switch (r) {
        case round::moved:
          idle_rounds = 0;
          if (waiters_.load() > 0) tell_waiters();
          break;
        case round::waiting:
          if (waiters_.load() > 0)
            std::this_thread::yield();
          else
            back_off(idle_rounds++);
          break;
        case round::nothing_in_flight: {
          std::unique_lock lk(wake_mutex_);
          woken_cv_.wait(lk, stop, [&] { return std::exchange(woken_, false); });
          idle_rounds = 0;
          break;
        }
      }
    }
  }

  void tell_waiters() {
    {
      std::lock_guard g(round_mutex_);
      ++rounds_moved_;
    }
    round_cv_.notify_all();
  }

  // While calls wait on their peers: a few quick looks (a message often arrives
  // within microseconds), then sleeps growing to 100 µs, which bounds both the
  // delay the thread adds to a call and the core it takes from the computation.
  static void back_off(int idle_rounds) {
    if (idle_rounds < 16) return std::this_thread::yield();
    const int doublings = std::min(idle_rounds - 16, 4);
    std::this_thread::sleep_for(std::chrono::microseconds(100 >> (4 - doublings)));
  }

  std::function<round()> advance_;
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
