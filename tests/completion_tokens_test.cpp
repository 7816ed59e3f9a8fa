// Non-blocking calls through Asio's completion tokens (collectives/completion_tokens.hpp):
// every token (a callback, use_future, use_awaitable, collectives::deferred) completes a
// real iall_reduce on ranks on threads, each rank polling on an io_context of its own;
// a failing call reaches the token with the blocking call's error and message; several
// calls in flight complete through one io_context; a handler runs on its own executor;
// an io_context destroyed unrun leaves the handle to wait for its call.
#include <doctest/doctest.h>

#include <collectives/completion_tokens.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <future>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/version.hpp>
#if defined(BOOST_ASIO_HAS_CO_AWAIT)
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#endif
#if BOOST_ASIO_VERSION >= 102400
#include <boost/asio/deferred.hpp>
#endif

#include <collectives/collectives.hpp>

namespace coll = collectives;
namespace asio = boost::asio;
using comm = coll::communicator<coll::inproc>;
using handle = coll::call_handle<coll::inproc>;
using namespace std::chrono_literals;

namespace {

enum class token { callback, future, coroutine, deferred };

std::vector<token> every_token() {
  std::vector<token> all{token::callback, token::future, token::deferred};
#if defined(BOOST_ASIO_HAS_CO_AWAIT)
  all.push_back(token::coroutine);
#endif
  return all;
}

const char* name(token how) {
  switch (how) {
    case token::callback: return "callback";
    case token::future: return "use_future";
    case token::coroutine: return "use_awaitable";
    case token::deferred: return "collectives::deferred";
  }
  return "?";
}

// Waits for `h` through the token `how`, on an io_context of this rank's thread, and
// returns what the token delivered: null, or the call's failure.
std::exception_ptr wait_through(token how, handle h) {
  asio::io_context io;
  std::exception_ptr failure;
  int completions = 0;
  auto callback = [&](std::exception_ptr e) {
    failure = e;
    ++completions;
  };
  switch (how) {
    case token::callback:
      coll::async_wait(io, std::move(h), callback);
      io.run();
      break;
    case token::future: {
      std::future<void> f = coll::async_wait(io, std::move(h), asio::use_future);
      io.run();
      try {
        f.get();
      } catch (...) {
        failure = std::current_exception();
      }
      ++completions;
      break;
    }
    case token::coroutine:
#if defined(BOOST_ASIO_HAS_CO_AWAIT)
      // The failure is thrown from co_await and leaves the coroutine, for co_spawn's handler.
      asio::co_spawn(
          io,
          [&]() -> asio::awaitable<void> {
            co_await coll::async_wait(co_await asio::this_coro::executor, std::move(h), asio::use_awaitable);
          },
          callback);
      io.run();
#endif
      break;
    case token::deferred: {
      auto op = coll::async_wait(io.get_executor(), std::move(h), coll::deferred);
      io.run();  // nothing to do: the wait has not started
      if (completions != 0) throw std::logic_error("a deferred wait completed before it was started");
      std::move(op)(callback);
      io.restart();
      io.run();
      break;
    }
  }
  if (completions != 1) throw std::logic_error(std::string(name(how)) + " completed " + std::to_string(completions) + " times");
  return failure;
}

std::string message_of(const std::exception_ptr& e) {
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const coll::error& x) {
    return x.what();
  } catch (const std::exception& x) {
    return std::string("not a collectives::error: ") + x.what();
  }
}

std::int64_t value(int rank, std::size_t i) { return std::int64_t(rank + 1) * std::int64_t(i % 1009) - std::int64_t(3 * rank); }

// Runs fn(comm&) -> std::string (empty when all is well) on p ranks on threads.
template <class Fn>
void on_ranks(int p, Fn fn) {
  std::vector<std::string> problems(static_cast<std::size_t>(p));
  coll::run_ranks(p, [&](comm& c) { problems[std::size_t(c.rank())] = fn(c); }, 30s);
  for (int r = 0; r < p; ++r) {
    INFO("rank ", r);
    CHECK_MESSAGE(problems[std::size_t(r)].empty(), problems[std::size_t(r)]);
  }
}

}  // namespace

TEST_CASE("every token completes an iall_reduce with a null exception_ptr, and the sums are the serial ones") {
  for (token how : every_token())
    for (int p : {1, 2, 3})
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{40'003}}) {
        INFO(name(how), " P=", p, " N=", n);
        on_ranks(p, [&](comm& c) -> std::string {
          std::vector<std::int64_t> data(n);
          for (std::size_t i = 0; i < n; ++i) data[i] = value(c.rank(), i);
          if (auto e = wait_through(how, coll::iall_reduce(c, data, coll::sum{}))) return "failed: " + message_of(e);
          for (std::size_t i = 0; i < n; ++i) {
            std::int64_t expected = 0;
            for (int r = 0; r < p; ++r) expected += value(r, i);
            if (data[i] != expected) return "element " + std::to_string(i) + " differs from the serial sum";
          }
          return "";
        });
      }
}

TEST_CASE("a receive too small for its message reaches every token as the blocking call's error") {
  for (token how : every_token()) {
    INFO(name(how));
    on_ranks(2, [&](comm& c) -> std::string {
      std::vector<int> sent(10, 1), too_small(5);
      auto blocking = [&]() -> std::string {
        try {
          if (c.rank() == 0) coll::send(c, sent, 1, 9);
          else coll::recv(c, too_small, 0, 9);
        } catch (const coll::error& e) {
          return e.what();
        }
        return "";
      }();
      coll::barrier(c);
      auto started = c.rank() == 0 ? coll::isend(c, sent, 1, 9) : coll::irecv(c, too_small, 0, 9);
      const std::string through_token = message_of(wait_through(how, std::move(started)));
      coll::barrier(c);
      if (c.rank() == 1 && through_token.empty()) return "the receive of 5 elements took a message of 10";
      if (through_token != blocking) return "token: \"" + through_token + "\", blocking call: \"" + blocking + "\"";
      return "";
    });
  }
}

TEST_CASE("a receive nobody sends reaches every token as errc::timeout at its deadline, the blocking call's message") {
  for (token how : every_token()) {
    INFO(name(how));
    on_ranks(2, [&](comm& c) -> std::string {
      if (c.rank() == 0) {
        std::vector<float> never(4);
        coll::scoped_timeout short_calls(c, 150ms);
        std::string blocking;
        try {
          coll::recv(c, never, 1, 77);
        } catch (const coll::error& e) {
          blocking = e.what();
        }
        const auto t0 = coll::clock::now();
        std::exception_ptr failure = wait_through(how, coll::irecv(c, never, 1, 77));
        if (coll::clock::now() - t0 > 5s) return "the deadline came late";
        if (!failure) return "a receive with no sender succeeded";
        try {
          std::rethrow_exception(failure);
        } catch (const coll::error& e) {
          if (e.code() != coll::errc::timeout) return std::string("not a timeout: ") + e.what();
          if (e.what() != blocking) return "token: \"" + std::string(e.what()) + "\", blocking call: \"" + blocking + "\"";
        }
      }
      coll::barrier(c);
      return "";
    });
  }
}

TEST_CASE("several calls in flight complete through one io_context, whatever their tokens") {
  for (int p : {2, 3}) {
    INFO("P=", p);
    on_ranks(p, [&](comm& c) -> std::string {
      const int r = c.rank();
      std::vector<std::int64_t> summed(10'007), largest(333, r), from_root(4096, r == 1 ? 42 : -1);
      for (std::size_t i = 0; i < summed.size(); ++i) summed[i] = value(r, i);
      asio::io_context io;
      int callbacks = 0;
      std::exception_ptr failure;
      auto callback = [&](std::exception_ptr e) {
        if (e) failure = e;
        ++callbacks;
      };
      coll::async_wait(io, coll::iall_reduce(c, summed, coll::sum{}), callback);
      std::future<void> max_done = coll::async_wait(io, coll::iall_reduce(c, largest, coll::max{}), asio::use_future);
      auto later = coll::async_wait(io.get_executor(), coll::ibroadcast(c, from_root, 1), coll::deferred);
      coll::async_wait(io, coll::ibarrier(c), callback);
      std::move(later)(callback);
#if defined(BOOST_ASIO_HAS_CO_AWAIT)
      std::vector<int> ones(77, 1);
      asio::co_spawn(
          io,
          [&]() -> asio::awaitable<void> {
            auto ex = co_await asio::this_coro::executor;
            co_await coll::async_wait(ex, coll::iall_reduce(c, ones, coll::sum{}), asio::use_awaitable);
          },
          callback);
      const int expected_callbacks = 4;
#else
      const int expected_callbacks = 3;
#endif
      io.run();
      max_done.get();
      if (failure) return "failed: " + message_of(failure);
      if (callbacks != expected_callbacks) return std::to_string(callbacks) + " callbacks";
      for (std::size_t i = 0; i < summed.size(); ++i) {
        std::int64_t expected = 0;
        for (int q = 0; q < p; ++q) expected += value(q, i);
        if (summed[i] != expected) return "the sum differs at " + std::to_string(i);
      }
      if (largest[332] != p - 1 || from_root[4095] != 42) return "max or broadcast wrong";
#if defined(BOOST_ASIO_HAS_CO_AWAIT)
      if (ones[76] != p) return "the coroutine's sum is wrong";
#endif
      return "";
    });
  }
}

TEST_CASE("collectives::deferred passes the wait on to any token when invoked") {
  on_ranks(3, [&](comm& c) -> std::string {
    std::vector<double> x(501, 0.5);
    asio::io_context io;
    auto op = coll::async_wait(io, coll::iall_reduce(c, x, coll::sum{}), coll::deferred);
    std::future<void> f = std::move(op)(asio::use_future);
    io.run();
    f.get();
    if (x[500] != 1.5) return "deferred into use_future: wrong sum";
#if defined(BOOST_ASIO_HAS_CO_AWAIT)
    io.restart();
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          auto later = coll::async_wait(co_await asio::this_coro::executor, coll::iall_reduce(c, x, coll::sum{}),
                                        coll::deferred);
          co_await std::move(later)(asio::use_awaitable);
        },
        asio::detached);
    io.run();
    if (x[500] != 4.5) return "deferred into use_awaitable: wrong sum";
#endif
#if BOOST_ASIO_VERSION >= 102400
    io.restart();
    bool done = false;
    auto asio_later = coll::async_wait(io, coll::iall_reduce(c, x, coll::sum{}), asio::deferred);
    std::move(asio_later)([&](std::exception_ptr e) { done = !e; });
    io.run();
    if (!done) return "asio::deferred did not complete";
#endif
    return "";
  });
}

TEST_CASE("the handler runs on its own executor when it has one; the polls on the given one") {
  on_ranks(2, [&](comm& c) -> std::string {
    std::vector<int> x(1000, 1);
    asio::io_context polls, handlers;
    bool called = false;
    coll::async_wait(polls, coll::iall_reduce(c, x, coll::sum{}),
                     asio::bind_executor(handlers, [&](std::exception_ptr e) { called = !e; }));
    polls.run();
    if (called) return "the handler ran on the io_context of the polls";
    if (handlers.run() != 1 || !called) return "the handler did not run on its own executor";
    if (x[999] != 2) return "wrong sum";
    return "";
  });
}

TEST_CASE("an operation destroyed with its io_context before the call ends waits for the call") {
  on_ranks(3, [&](comm& c) -> std::string {
    std::vector<std::int64_t> data(100'000, c.rank() + 1);
    bool called = false;
    {
      asio::io_context io;
      coll::async_wait(io, coll::iall_reduce(c, data, coll::sum{}), [&](std::exception_ptr) { called = true; });
    }  // never run: the operation goes with the io_context, and its handle waits here
    if (called) return "the handler ran without the io_context running";
    if (data.front() != 6 || data.back() != 6) return "the buffer was left before the call ended";
    return "";
  });
}
