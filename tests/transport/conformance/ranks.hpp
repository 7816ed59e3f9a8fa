// The conformance suite's ranks and its ways of waiting. Ranks are threads of the test
// process; every wait has a deadline of a few seconds, so a transport that fails
// fails the test instead of hanging it.
#pragma once

#include <atomic>
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <collectives/concepts/transport.hpp>
#include <collectives/error.hpp>

namespace conformance {

namespace coll = collectives;
using namespace std::chrono_literals;

// What the suite waits for a message that should come: far more than it needs, even on
// a loaded core (beside four busy loops on two cores, the device stand-in's 300 kB
// messages, in 4 KiB slots two at a time, took past 5 s in 1 of 10 runs).
inline constexpr auto patience = 20s;
// How long it watches for something that should not happen.
inline constexpr auto watch_time = 200ms;

// One rank tells another that it has reached a point; waiting for it has a limit.
class checkpoint {
 public:
  void raise() { raised_.store(true); }
  bool raised() const { return raised_.load(); }
  void await(std::chrono::milliseconds limit = patience) const {
    const auto until = coll::clock::now() + limit;
    while (!raised_.load()) {
      if (coll::clock::now() >= until) throw coll::error(coll::errc::timeout, "a peer never reached the point awaited");
      std::this_thread::sleep_for(1ms);
    }
  }

 private:
  std::atomic<bool> raised_{false};
};

// Runs fn(transport&) on `size` threads, rank r's transport joined on its own thread;
// rethrows the lowest rank's failure once all have ended.
template <class Factory, class Fn>
void run_ranks(int size, Fn fn) {
  typename Factory::group group(size);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  {
    std::vector<std::jthread> ranks;
    for (int r = 0; r < size; ++r)
      ranks.emplace_back([&, r] {
        try {
          auto t = group.join(r);
          fn(t);
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
        }
      });
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// How one request ended: completed (an empty code), failed (the error's code), or
// still pending at the limit (errc::timeout). The request is released either way: a
// failed or late one is cancelled, as the executor does.
template <class T>
std::error_code outcome(T& t, typename T::request& r, std::chrono::milliseconds limit = patience) {
  const auto until = coll::clock::now() + limit;
  try {
    for (;;) {
      if (t.test(r)) return {};
      if (coll::clock::now() >= until) break;
      t.wait_for_activity(until);
    }
  } catch (const coll::error& e) {
    t.cancel(r);
    return e.code();
  }
  t.cancel(r);
  return coll::errc::timeout;
}

// Whether a request completes within `limit`; if not, it stays posted.
template <class T>
bool completes_within(T& t, typename T::request& r, std::chrono::milliseconds limit) {
  const auto until = coll::clock::now() + limit;
  for (;;) {
    if (t.test(r)) return true;
    if (coll::clock::now() >= until) return false;
    t.wait_for_activity(until);
  }
}

// Tests `r` until it completes (true) or `flag` is raised (false: `r` stays posted).
template <class T>
bool test_until(T& t, typename T::request& r, const checkpoint& flag, std::chrono::milliseconds limit = patience) {
  const auto until = coll::clock::now() + limit;
  for (;;) {
    if (t.test(r)) return true;
    if (flag.raised()) return false;
    if (coll::clock::now() >= until) throw coll::error(coll::errc::timeout, "a peer never reached the point awaited");
    t.wait_for_activity(std::min(until, coll::clock::now() + 1ms));
  }
}

// Completes every request, or fails the test naming what did not.
template <class T>
void complete_all(T& t, std::vector<typename T::request> pending, std::chrono::milliseconds limit = patience) {
  const auto until = coll::clock::now() + limit;
  std::vector<bool> done(pending.size(), false);
  std::size_t left = pending.size();
  while (left > 0) {
    for (std::size_t i = 0; i < pending.size(); ++i)
      if (!done[i] && t.test(pending[i])) {
        done[i] = true;
        --left;
      }
    if (left == 0) break;
    if (coll::clock::now() >= until) {
      std::string which;  // by their place in `pending`, to tell which messages stuck
      for (std::size_t i = 0; i < pending.size(); ++i)
        if (!done[i]) {
          t.cancel(pending[i]);
          which += (which.empty() ? "" : ", ") + std::to_string(i);
        }
      throw coll::error(coll::errc::timeout, "rank " + std::to_string(t.rank()) + ": " + std::to_string(left) + " of " +
                                                 std::to_string(pending.size()) + " requests did not complete in time (" +
                                                 which + ")");
    }
    t.wait_for_activity(until);
  }
}

// Makes progress on this rank's transport for a while without waiting for anything.
template <class T>
void keep_busy(T& t, std::chrono::milliseconds time) {
  const auto until = coll::clock::now() + time;
  while (coll::clock::now() < until) t.wait_for_activity(until);
}

}  // namespace conformance
