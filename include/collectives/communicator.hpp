// A communicator: one rank's handle on a group, owning that rank's transport.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>
#include <utility>

#include "algorithm/in_flight.hpp"
#include "algorithm/plan_cache.hpp"
#include "algorithm/progress_thread.hpp"
#include "algorithm/workspace.hpp"
#include "concepts/transport.hpp"
#include "concepts/transport_selection.hpp"
#include "error.hpp"
#include "settings.hpp"

namespace collectives {

inline constexpr std::chrono::milliseconds default_timeout{std::chrono::seconds{60}};

template <class Transport>
class communicator {
  static_assert(check_transport<Transport>());

 public:
  using transport_type = Transport;

  // COLLECTIVES_PROGRESS_THREAD (a flag) starts a progress thread.
  explicit communicator(Transport transport, std::chrono::milliseconds timeout = default_timeout)
      : transport_(std::move(transport)), timeout_(timeout) {
    if (settings::flag("COLLECTIVES_PROGRESS_THREAD").value_or(false)) start_progress_thread();
  }
  // Not while calls are in flight: they refer to the transport. A progress thread
  // moves along: it holds the calls in flight, which live on the heap.
  communicator(communicator&&) = default;
  communicator& operator=(communicator&&) = default;  // progress_ before in_flight_: the old thread stops before its list goes

  // Non-blocking calls still in flight are waited for, each until its deadline, so
  // that no message lands in a buffer after this; one that does not finish by then
  // is cancelled, and its handle reports why.
  ~communicator() {
    if (!in_flight_) return;  // moved from
    stop_progress_thread();
    while (!in_flight_->empty()) {
      try {
        if (in_flight_->progress()) continue;
        transport_.wait_for_activity(clock::now() + std::chrono::milliseconds(10));
      } catch (...) {
        break;
      }
    }
    in_flight_->abandon_all(error(errc::aborted, "the communicator was destroyed while this call was in flight"));
  }

  // A communicator for the job the environment describes, for transports that can
  // join one that way (shm, tcp, automatic_transport). The timeout comes from
  // COLLECTIVES_TIMEOUT (seconds). A transport fixed in code wins over
  // COLLECTIVES_TRANSPORT, with a warning when that asks for another.
  static communicator from_env()
    requires requires { Transport::from_env(); }
  {
    if constexpr (!selectable_name<Transport>.empty()) warn_if_other_transport_selected(selectable_name<Transport>);
    return communicator(Transport::from_env(), timeout_from_env());
  }

  // COLLECTIVES_TIMEOUT in seconds (fractions allowed), or the default.
  static std::chrono::milliseconds timeout_from_env() {
    return settings::seconds("COLLECTIVES_TIMEOUT").value_or(default_timeout);
  }

  int rank() const { return transport_.rank(); }
  int size() const { return transport_.size(); }

  Transport& transport() noexcept { return transport_; }
  const Transport& transport() const noexcept { return transport_; }

  // Every blocking call fails with errc::timeout once this much time has passed.
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) noexcept { timeout_ = t; }

  // With call checking on, every collective first confirms that all ranks made the
  // same call (collective, counts, element size, op, root, algorithm) and otherwise
  // throws errc::call_mismatch naming a rank that differs, instead of timing out or
  // computing garbage. It costs one small exchange per call and must be on for every
  // rank or for none. The default comes from the environment variable
  // COLLECTIVES_CHECK_CALLS (a flag: 1, on, true or yes turn it on).
  bool checks_calls() const noexcept { return check_calls_; }
  void check_calls(bool on) noexcept { check_calls_ = on; }

  // A failure as the library's error, for the handles of the calls it ends.
  static error failure_of(std::exception_ptr failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const error& e) {
      return e;
    } catch (const std::exception& e) {
      return error(errc::aborted, std::string("the progress thread failed: ") + e.what());
    } catch (...) {
      return error(errc::aborted, "the progress thread failed");
    }
  }

  // Wakes every pending and future operation of the whole group with errc::aborted.
  void abort() { transport_.abort(); }

  // Each collective call takes the next number, so messages of consecutive calls
  // never match each other. Every rank must make the same calls in the same order.
  std::uint64_t next_call() noexcept { return ++calls_; }

  // The plans of recent calls, reused when a call repeats.
  plan_cache& plans() noexcept { return plans_; }

  // The non-blocking calls started and not yet finished (nonblocking.hpp).
  in_flight_calls& in_flight() noexcept { return *in_flight_; }

  // Advances every call in flight without waiting; true when any of them moved.
  // Testing or waiting for any handle does this too.
  bool progress() {
    auto turn = exclusive();
    return in_flight_->poll();
  }

  // A thread that advances the calls in flight while this rank computes, so that
  // they move without test() or progress() (docs/nonblocking.md#the-progress-thread).
  // Calls are still started from one thread at a time; handles may then be tested and
  // waited for from any thread.
  void start_progress_thread() {
    if (progress_) return;
    progress_ = std::make_unique<progress_thread>([calls = in_flight_.get()] {
      if (calls->empty()) return progress_thread::round::nothing_in_flight;
      try {
        return calls->poll() ? progress_thread::round::moved : progress_thread::round::waiting;
      } catch (...) {  // the transport failed outside any call: every call ends with it, none waits on
        calls->abandon_all(failure_of(std::current_exception()));
        return progress_thread::round::moved;
      }
    });
  }
  // Waits for the thread to end its round; the calls in flight stay, for the
  // caller to advance. Not while this thread holds exclusive().
  void stop_progress_thread() noexcept { progress_.reset(); }
  bool has_progress_thread() const noexcept { return progress_ != nullptr; }

  // Held while this thread works on the transport or the calls in flight: it keeps
  // the progress thread out meanwhile. Does nothing when there is none.
  [[nodiscard]] progress_thread::exclusive exclusive() { return progress_thread::exclusive(progress_.get()); }

  // Sleeps until the progress thread has moved a call, or `call` has ended, or `until`.
  void await_progress(const in_flight_call& call, deadline until) {
    if (progress_) progress_->await_round(until, [&] { return !call.running(); });
  }

  // A call has started: a progress thread idle for lack of calls looks again.
  void wake_progress() {
    if (progress_) progress_->wake();
  }

  // The executor's bookkeeping, reused from call to call.
  executor_workspace<typename Transport::request>& workspace() noexcept { return workspace_; }

  // For the debug log: true when `call` now runs a different algorithm than it last did.
  bool note_algorithm(std::string_view call, const char* algorithm) {
    for (auto& [c, a] : algorithms_)
      if (c == call) return std::exchange(a, algorithm) != algorithm;
    algorithms_.emplace_back(std::string(call), algorithm);
    return true;
  }

 private:
  Transport transport_;
  std::chrono::milliseconds timeout_;
  std::uint64_t calls_ = 0;
  plan_cache plans_;
  executor_workspace<typename Transport::request> workspace_;
  std::unique_ptr<progress_thread> progress_;  // before in_flight_: see the move assignment
  std::unique_ptr<in_flight_calls> in_flight_ = std::make_unique<in_flight_calls>();
  std::vector<std::pair<std::string, const char*>> algorithms_;
  bool check_calls_ = settings::flag("COLLECTIVES_CHECK_CALLS").value_or(false);
};

// Overrides a communicator's timeout for the calls made while it lives.
template <class Communicator>
class scoped_timeout {
 public:
  scoped_timeout(Communicator& comm, std::chrono::milliseconds t) : comm_(comm), saved_(comm.timeout()) {
    comm_.set_timeout(t);
  }
  ~scoped_timeout() { comm_.set_timeout(saved_); }
  scoped_timeout(const scoped_timeout&) = delete;
  scoped_timeout& operator=(const scoped_timeout&) = delete;

 private:
  Communicator& comm_;
  std::chrono::milliseconds saved_;
};

}  // namespace collectives
