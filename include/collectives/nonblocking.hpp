// Non-blocking calls: iall_reduce, ibroadcast, ... start a collective and return at
// once with a handle; the call moves on while the caller computes, whenever any
// handle of its communicator is tested or waited for (or comm.progress() is called,
// or a blocking call waits).
//
//   auto h = coll::iall_reduce(comm, grad, coll::sum{});   // the same arguments as all_reduce
//   compute_next_layer();
//   h.wait();                                              // grad holds the sum
//
// Several calls may be in flight on one communicator; every rank must start them in
// the same order (as for blocking calls). The buffers stay the caller's, untouched
// by it, until the call is done. A call fails, as a blocking one would, with the same
// errors, and past the communicator's timeout counted from its start.
//
// Thread safety: a communicator, its calls and their handles belong to one thread at
// a time, as a blocking call does; comm.abort() may come from any thread. With a
// progress thread (comm.start_progress_thread()) calls move on their own, and handles
// may be tested and waited for from any thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <memory>
#include <ranges>
#include <span>
#include <string>
#include <utility>

#include "algorithm/automatic.hpp"
#include "algorithm/direct.hpp"
#include "all_gather.hpp"
#include "all_reduce.hpp"
#include "all_to_all.hpp"
#include "barrier.hpp"
#include "broadcast.hpp"
#include "communicator.hpp"
#include "error.hpp"
#include "gather.hpp"
#include "log.hpp"
#include "point_to_point.hpp"
#include "reduce.hpp"
#include "reduce_scatter.hpp"
#include "runtime/in_flight.hpp"
#include "scatter.hpp"

namespace collectives {

// A non-blocking call of a communicator<Transport>. Move-only. A default-made handle,
// and the handle of a call that had nothing to do, is done from the start.
//
// Destroying the handle of a call that has not finished waits for it (until its
// deadline), as std::jthread joins: the buffers are the caller's, so no message may
// land in them afterwards. A failure found then is logged, since a destructor cannot
// throw it; wait() first to see it as an exception.
template <class Transport>
class call_handle {
 public:
  call_handle() = default;
  call_handle(communicator<Transport>& comm, std::shared_ptr<in_flight_call> call) : comm_(&comm), call_(std::move(call)) {}
  call_handle(call_handle&& o) noexcept : comm_(o.comm_), call_(std::move(o.call_)) {}
  call_handle& operator=(call_handle&& o) noexcept {
    if (this != &o) {
      finish_quietly();
      comm_ = o.comm_;
      call_ = std::move(o.call_);
    }
    return *this;
  }
  call_handle(const call_handle&) = delete;
  call_handle& operator=(const call_handle&) = delete;
  ~call_handle() { finish_quietly(); }

  // Advances every call of the communicator without waiting (a progress thread does
  // that instead, when there is one); true once this one is done. Throws the call's
  // failure (every time it is asked, until the handle goes).
  bool test() {
    if (!call_) return true;
    // A progress thread moves the call; past its deadline this thread advances it too,
    // so that it ends even when the progress thread cannot take its turn.
    if (call_->running() && (!comm_->has_progress_thread() || call_->now() >= call_->context().until))
      comm_->progress();
    switch (call_->current()) {
      case in_flight_call::state::running: return false;
      case in_flight_call::state::done: return true;
      case in_flight_call::state::failed: break;
    }
    std::rethrow_exception(call_->failure());
  }

  // True once the call has ended, done or failed, without advancing anything and
  // without taking the communicator from a progress thread.
  bool finished() const noexcept { return !call_ || !call_->running(); }

  // Until the call is done; throws its failure, errc::timeout at its deadline.
  void wait() {
    if (!call_) return;  // said here too, or g++ 12 -O2 -Warray-bounds sees a null call
    while (!test()) sleep_until(call_->context().until);
  }

  // Until the call is done (true) or `until` passes (false, and the call goes on);
  // throws the call's failure.
  bool wait_until(deadline until) {
    if (!call_) return true;
    while (!test()) {
      if (call_->now() >= until) return false;
      sleep_until(std::min(until, call_->context().until));
    }
    return true;
  }
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> d) {
    return wait_until((call_ ? call_->now() : clock::now()) + std::chrono::duration_cast<clock::duration>(d));
  }

  // The call's deadline: its start plus the communicator's timeout then.
  deadline until() const noexcept { return call_ ? call_->context().until : deadline{}; }

  // For wait_any: sleeps until something happens or `until` passes: in the
  // transport, or until the progress thread has moved a call.
  void sleep_until(deadline until) {
    if (!call_ || !call_->running()) return;
    if (comm_->has_progress_thread())
      comm_->await_progress(*call_, until);
    else
      comm_->transport().wait_for_activity(until);
  }

 private:
  void finish_quietly() noexcept {
    if (!call_ || !call_->running()) return;
    try {
      wait();
    } catch (const std::exception& e) {
      log::warn(std::string("a call's handle was destroyed before the call ended, which then failed: ") + e.what());
    }
  }

  communicator<Transport>* comm_ = nullptr;
  std::shared_ptr<in_flight_call> call_;
};

namespace detail {

// Starts the one call that `front_end` makes, without running it: its checks run
// (and throw) as for a blocking call, then it returns with the call in flight.
template <transport Tr, class FrontEnd>
call_handle<Tr> start(communicator<Tr>& comm, FrontEnd&& front_end) {
  call_handle<Tr> started;
  {
    auto turn = comm.exclusive();
    in_flight_calls& flight = comm.in_flight();
    flight.begin_starting();
    try {
      front_end();
    } catch (...) {
      flight.take_started();  // ends starting; nothing was launched
      throw;
    }
    started = call_handle<Tr>(comm, flight.take_started());
  }
  comm.wake_progress();
  return started;
}

// accumulate_as and reproducible_sum run as several calls (detail/accumulated_call.hpp),
// which a handle does not hold yet.
template <class... Args>
constexpr bool starts_as_one_call() {
  static_assert(!(reduces_through_accumulator<std::remove_cvref_t<Args>> || ...),
                "collectives: accumulate_as and reproducible_sum have blocking calls only, for now");
  return true;
}

}  // namespace detail

// Each i-form takes exactly the arguments of its blocking form, and the same
// algorithm as its first template argument.

template <algorithm Algorithm = automatic, transport Tr, std::ranges::range First, class... Rest>  // not the one-value form
[[nodiscard]] call_handle<Tr> iall_reduce(communicator<Tr>& comm, First&& first, Rest&&... rest) {
  static_assert(detail::starts_as_one_call<First, Rest...>());
  return detail::start(comm, [&] { all_reduce<Algorithm>(comm, std::forward<First>(first), std::forward<Rest>(rest)...); });
}
template <algorithm Algorithm = automatic, transport Tr, class... Args>
[[nodiscard]] call_handle<Tr> ireduce(communicator<Tr>& comm, Args&&... args) {
  static_assert(detail::starts_as_one_call<Args...>());
  return detail::start(comm, [&] { reduce<Algorithm>(comm, std::forward<Args>(args)...); });
}
template <algorithm Algorithm = automatic, transport Tr, class... Args>
[[nodiscard]] call_handle<Tr> ibroadcast(communicator<Tr>& comm, Args&&... args) {
  return detail::start(comm, [&] { broadcast<Algorithm>(comm, std::forward<Args>(args)...); });
}
template <algorithm Algorithm = automatic, transport Tr, class... Args>
[[nodiscard]] call_handle<Tr> iall_gather(communicator<Tr>& comm, Args&&... args) {
  return detail::start(comm, [&] { all_gather<Algorithm>(comm, std::forward<Args>(args)...); });
}
template <algorithm Algorithm = automatic, transport Tr, class... Args>
[[nodiscard]] call_handle<Tr> iall_gatherv(communicator<Tr>& comm, Args&&... args) {
  return detail::start(comm, [&] { all_gatherv<Algorithm>(comm, std::forward<Args>(args)...); });
}
template <algorithm Algorithm = automatic, transport Tr, class... Args>
[[nodiscard]] call_handle<Tr> ireduce_scatter(communicator<Tr>& comm, Args&&... args) {
  static_assert(detail::starts_as_one_call<Args...>());
  return detail::start(comm, [&] { reduce_scatter<Algorithm>(comm, std::forward<Args>(args)...); });
}
template <algorithm Algorithm = automatic, transport Tr, class... Args>
[[nodiscard]] call_handle<Tr> ireduce_scatterv(communicator<Tr>& comm, Args&&... args) {
  static_assert(detail::starts_as_one_call<Args...>());
  return detail::start(comm, [&] { reduce_scatterv<Algorithm>(comm, std::forward<Args>(args)...); });
}
template <algorithm Algorithm = automatic, transport Tr, class... Args>
[[nodiscard]] call_handle<Tr> igather(communicator<Tr>& comm, Args&&... args) {
  return detail::start(comm, [&] { gather<Algorithm>(comm, std::forward<Args>(args)...); });
}
template <algorithm Algorithm = automatic, transport Tr, class... Args>
[[nodiscard]] call_handle<Tr> igatherv(communicator<Tr>& comm, Args&&... args) {
  return detail::start(comm, [&] { gatherv<Algorithm>(comm, std::forward<Args>(args)...); });
}
template <algorithm Algorithm = automatic, transport Tr, class... Args>
[[nodiscard]] call_handle<Tr> iscatter(communicator<Tr>& comm, Args&&... args) {
  return detail::start(comm, [&] { scatter<Algorithm>(comm, std::forward<Args>(args)...); });
}
template <algorithm Algorithm = automatic, transport Tr, class... Args>
[[nodiscard]] call_handle<Tr> iscatterv(communicator<Tr>& comm, Args&&... args) {
  return detail::start(comm, [&] { scatterv<Algorithm>(comm, std::forward<Args>(args)...); });
}
template <algorithm Algorithm = automatic, transport Tr, class... Args>
[[nodiscard]] call_handle<Tr> iall_to_all(communicator<Tr>& comm, Args&&... args) {
  return detail::start(comm, [&] { all_to_all<Algorithm>(comm, std::forward<Args>(args)...); });
}
template <algorithm Algorithm = automatic, transport Tr, class... Args>
[[nodiscard]] call_handle<Tr> iall_to_allv(communicator<Tr>& comm, Args&&... args) {
  return detail::start(comm, [&] { all_to_allv<Algorithm>(comm, std::forward<Args>(args)...); });
}
template <transport Tr>
[[nodiscard]] call_handle<Tr> ibarrier(communicator<Tr>& comm) {
  return detail::start(comm, [&] { barrier(comm); });
}
// Done once `peer` has taken the message.
template <transport Tr, class... Args>
[[nodiscard]] call_handle<Tr> isend(communicator<Tr>& comm, Args&&... args) {
  return detail::start(comm, [&] { send(comm, std::forward<Args>(args)...); });
}
template <transport Tr, class... Args>
[[nodiscard]] call_handle<Tr> irecv(communicator<Tr>& comm, Args&&... args) {
  return detail::start(comm, [&] { recv(comm, std::forward<Args>(args)...); });
}

// Waits for every handle, in turn; throws the first failure found (the others are
// then still pending, and their handles wait for them when destroyed).
template <class Transport>
void wait_all(std::span<call_handle<Transport>> handles) {
  for (auto& h : handles) h.wait();
}
template <class... Handles>
void wait_all(Handles&... handles) {
  (handles.wait(), ...);
}

// Waits until one of the handles is done and returns its index, the lowest if several
// are; throws the failure of one that failed first (a timeout at its deadline
// included). An empty list returns 0 at once.
template <class Transport>
std::size_t wait_any(std::span<call_handle<Transport>> handles) {
  if (handles.empty()) return 0;
  while (true) {
    deadline first_deadline = deadline::max();
    for (std::size_t i = 0; i < handles.size(); ++i) {
      if (handles[i].test()) return i;
      first_deadline = std::min(first_deadline, handles[i].until());
    }
    handles.front().sleep_until(first_deadline);
  }
}

}  // namespace collectives
