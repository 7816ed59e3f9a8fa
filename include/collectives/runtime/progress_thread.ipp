// The progress thread's functions that are not templates (progress_thread.hpp): inline
// in a header-only build, compiled once into the library with separate compilation.
#pragma once

#include "progress_thread.hpp"

namespace collectives {

COLLECTIVES_DECL progress_thread::progress_thread(std::function<round(handover_request)> advance)
    : advance_(std::move(advance)), thread_([this](std::stop_token stop) { loop(stop); }) {}

COLLECTIVES_DECL progress_thread::~progress_thread() {
  thread_.request_stop();
  wake();
  thread_.join();
}

COLLECTIVES_DECL void progress_thread::wake() {
  {
    std::lock_guard g(wake_mutex_);
    woken_ = true;
  }
  woken_cv_.notify_one();
}

COLLECTIVES_DECL void progress_thread::loop(std::stop_token stop) {
  int idle_rounds = 0;
  while (!stop.stop_requested()) {
    round r;
    {
      std::lock_guard g(lock_);
      r = advance_({&owner_waiting_});
    }
    for (int waiting; (waiting = owner_waiting_.load(std::memory_order_relaxed)) > 0;) owner_waiting_.wait(waiting);
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

COLLECTIVES_DECL void progress_thread::tell_waiters() {
  {
    std::lock_guard g(round_mutex_);
    ++rounds_moved_;
  }
  round_cv_.notify_all();
}

COLLECTIVES_DECL void progress_thread::back_off(int idle_rounds) {
  if (idle_rounds < 16) return std::this_thread::yield();
  const int doublings = std::min(idle_rounds - 16, 4);
  std::this_thread::sleep_for(std::chrono::microseconds(100 >> (4 - doublings)));
}

}  // namespace collectives
