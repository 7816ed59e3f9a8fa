// Completion tokens for non-blocking calls: an engine built on Asio gets the end of a
// call the way it gets the end of a read, through a completion token.
//
//   auto h = coll::iall_reduce(comm, grad, coll::sum{});
//   coll::async_wait(io, std::move(h), [](std::exception_ptr e) { ... });      // a callback
//   std::future<void> f = coll::async_wait(io, coll::ibarrier(comm), asio::use_future);
//   co_await coll::async_wait(ex, std::move(h), asio::use_awaitable);          // in a coroutine
//   auto op = coll::async_wait(ex, std::move(h), coll::deferred);              // starts later:
//   std::move(op)(token);                                                      //   here
//
// The completion signature is void(std::exception_ptr): null when the call succeeded,
// else the failure its blocking form would throw, the same error and message. The
// operation owns the handle. It polls the handle on the given executor until the call
// ends, and so never waits forever: at the call's deadline (handle.until()) the poll
// throws errc::timeout, which reaches the handler. If the operation is destroyed
// before the call ends (its io_context destroyed), the handle waits for the call, as a
// handle does.
//
// Threads: the executor must run on the thread that owns the communicator (a
// single-threaded io_context that the engine runs, say), because each poll advances
// the communicator's calls; with a progress thread on (`comm.start_progress_thread()`),
// from any thread. The handler runs on its associated executor (by default the given one).
//
// This is the one header that brings Asio to non-blocking calls, so that the core
// headers stay free of it; it needs Boost.Asio's headers (Boost 1.74 or later).
#pragma once

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/execution/executor.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/is_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/error_code.hpp>

#include "nonblocking.hpp"

namespace collectives {

namespace detail {

// Polls one call on `Executor` until it ends, then hands the outcome to the handler.
// The operation is its own intermediate handler: each poll is posted, or waits on the
// timer, with the operation moved along.
template <class Transport, class Executor, class Handler>
class wait_operation {
 public:
  wait_operation(call_handle<Transport>&& call, const Executor& executor, Handler handler)
      : call_(std::move(call)), executor_(executor), handler_(std::move(handler)),
        work_(boost::asio::get_associated_executor(handler_, executor_)) {}

  void operator()(boost::system::error_code = {}) {  // a poll; the timer is never cancelled
    bool done = false;
    try {
      done = call_.test();
    } catch (...) {
      return complete(std::current_exception());
    }
    if (done) return complete(nullptr);
    // Without a progress thread the polls are what moves the call, and an executor
    // cannot sleep in the transport until a peer's message comes, as wait() does. So
    // for its first 50 µs the call is polled at once, again and again: a call of small
    // messages ends within that without paying for a timer. After that it is waiting
    // on peers (or moving much data), and a timer spaces the polls by an eighth of the
    // time waited so far (the kernel's timer slack lengthens the shortest): so they
    // add a small share to a long call's time, and they leave the core to the ranks
    // that are behind (on a machine with fewer cores than ranks they share it) and to
    // the io_context's other work. The cap bounds what a poll adds to a long call; a
    // poll every 500 µs costs about 3% of a core (each costs a timer's round through
    // epoll, some 15 µs, not the test).
    const deadline now = clock::now();
    if (now - started_ < polls_at_once_for) return boost::asio::post(executor_, std::move(*this));
    if (!timer_) timer_ = std::make_unique<boost::asio::steady_timer>(executor_);
    const auto pause = std::clamp<clock::duration>((now - started_) / 8, shortest_pause, longest_pause);
    timer_->expires_at(std::min(now + pause, call_.until()));  // a poll at the deadline reports it
    timer_->async_wait(std::move(*this));
  }

 private:
  static constexpr std::chrono::microseconds polls_at_once_for{50}, shortest_pause{4}, longest_pause{500};

  void complete(std::exception_ptr failure) {
    call_ = {};  // ended: the handle has nothing left to wait for
    timer_.reset();
    boost::asio::dispatch(work_.get_executor(), [handler = std::move(handler_), failure]() mutable {
      std::move(handler)(failure);
    });
    work_.reset();  // after: an io_context whose work ran out would stop before running the handler
  }

  call_handle<Transport> call_;
  Executor executor_;
  Handler handler_;
  // Keeps the handler's executor running until the handler has run (for a handler of
  // another executor than the polls').
  boost::asio::executor_work_guard<boost::asio::associated_executor_t<Handler, Executor>> work_;
  std::unique_ptr<boost::asio::steady_timer> timer_;  // on the heap: it stays put while the operation moves
  deadline started_ = clock::now();
};

struct initiate_wait {
  template <class Handler, class Executor, class Transport>
  void operator()(Handler&& handler, const Executor& executor, call_handle<Transport>&& call) const {
    // Posted, never run here: a handler must not run inside the initiating function.
    boost::asio::post(executor, wait_operation<Transport, Executor, std::decay_t<Handler>>(
                                    std::move(call), executor, std::forward<Handler>(handler)));
  }
};

template <class T>
concept asio_executor = boost::asio::execution::is_executor<T>::value || boost::asio::is_executor<T>::value;

}  // namespace detail

// Completes `token` with void(std::exception_ptr) once the call of `call` has ended,
// polling it on `executor`.
template <transport Transport, detail::asio_executor Executor, class CompletionToken>
auto async_wait(const Executor& executor, call_handle<Transport>&& call, CompletionToken&& token) {
  return boost::asio::async_initiate<CompletionToken, void(std::exception_ptr)>(detail::initiate_wait{}, token, executor,
                                                                               std::move(call));
}

// The same on an execution context's executor (an io_context, say).
template <transport Transport, class ExecutionContext, class CompletionToken>
  requires std::is_convertible_v<ExecutionContext&, boost::asio::execution_context&>
auto async_wait(ExecutionContext& context, call_handle<Transport>&& call, CompletionToken&& token) {
  return async_wait(context.get_executor(), std::move(call), std::forward<CompletionToken>(token));
}

// A completion token that makes the operation lazy, for Asio before 1.24 (Boost
// 1.80), which has no asio::deferred (with a later one, asio::deferred works as well):
// async_wait(ex, h, coll::deferred) returns a deferred_operation, which starts the
// wait when it is invoked, once, with another token: std::move(op)(token).
struct deferred_t {};
inline constexpr deferred_t deferred{};

template <class Signature, class Initiation, class... Args>
class deferred_operation {
 public:
  explicit deferred_operation(Initiation initiation, Args... args)
      : initiation_(std::move(initiation)), args_(std::move(args)...) {}

  template <class CompletionToken>
  auto operator()(CompletionToken&& token) && {
    return std::apply(
        [&](Args&... args) {
          return boost::asio::async_initiate<CompletionToken, Signature>(std::move(initiation_), token,
                                                                         std::move(args)...);
        },
        args_);
  }

 private:
  Initiation initiation_;
  std::tuple<Args...> args_;  // the handle among them: invoking the operation consumes it
};

}  // namespace collectives

// How Asio learns of collectives::deferred: through async_result's static initiate,
// which Asio calls in place of making a handler (Asio 1.18 and later).
namespace boost::asio {
template <class Signature>
class async_result<collectives::deferred_t, Signature> {
 public:
  template <class Initiation, class... Args>
  static auto initiate(Initiation&& initiation, collectives::deferred_t, Args&&... args) {
    return collectives::deferred_operation<Signature, std::decay_t<Initiation>, std::decay_t<Args>...>(
        std::forward<Initiation>(initiation), std::forward<Args>(args)...);
  }
};
}  // namespace boost::asio
