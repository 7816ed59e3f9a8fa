// Completion tokens over every transport: calls waited for only through an io_context
// (a callback, use_future, coll::deferred and, where the compiler has them, a
// coroutine) end with the results of their serial references. On threads over inproc,
// and as processes over shm and tcp, where a call moves only when the polls take in
// what the transport has received.
#include <future>
#include <numeric>
#include <utility>  // before Asio 1.18's awaitable.hpp, which uses std::exchange without it

#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#if defined(BOOST_ASIO_HAS_CO_AWAIT)
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#endif

#include <collectives/completion_tokens.hpp>

#include "harness.hpp"

using namespace testing;
namespace asio = boost::asio;

namespace {

std::string every_token(comm& c, std::size_t n) {
  const int p = c.size(), r = c.rank();
  auto sums = inputs<std::int64_t, coll::sum>(r, n);
  auto maxima = inputs<double, coll::max>(r, n);
  const auto mine = inputs<std::int32_t, coll::min>(r, n);
  std::vector<std::int32_t> gathered(n * std::size_t(p));
  auto shared = r == 0 ? inputs<float, coll::min>(0, n) : std::vector<float>(n);

  asio::io_context io;
  std::exception_ptr summed_failure = std::make_exception_ptr(std::runtime_error("the callback never ran"));
  coll::async_wait(io, coll::iall_reduce(c, sums, coll::sum{}), [&](std::exception_ptr e) { summed_failure = e; });
  std::future<void> gathered_done = coll::async_wait(io, coll::iall_gather(c, mine, gathered), asio::use_future);
  auto later = coll::async_wait(io, coll::ibroadcast(c, shared, 0), coll::deferred);
  std::exception_ptr broadcast_failure = std::make_exception_ptr(std::runtime_error("the deferred wait never ran"));
  std::move(later)([&](std::exception_ptr e) { broadcast_failure = e; });
  std::exception_ptr max_failure;
#if defined(BOOST_ASIO_HAS_CO_AWAIT)
  max_failure = std::make_exception_ptr(std::runtime_error("the coroutine never ended"));
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await coll::async_wait(co_await asio::this_coro::executor, coll::iall_reduce(c, maxima, coll::max{}),
                                  asio::use_awaitable);
      },
      [&](std::exception_ptr e) { max_failure = e; });
#else
  coll::all_reduce(c, maxima, coll::max{});
#endif
  io.run();

  try {
    for (auto* failure : {&summed_failure, &broadcast_failure, &max_failure})
      if (*failure) std::rethrow_exception(*failure);
    gathered_done.get();
  } catch (const std::exception& e) {
    return std::string("a wait through a token failed: ") + e.what();
  }
  std::vector<std::vector<std::int64_t>> all_sums;
  std::vector<std::vector<double>> all_maxima;
  std::vector<std::int32_t> want_gathered;
  for (int q = 0; q < p; ++q) {
    all_sums.push_back(inputs<std::int64_t, coll::sum>(q, n));
    all_maxima.push_back(inputs<double, coll::max>(q, n));
    const auto theirs = inputs<std::int32_t, coll::min>(q, n);
    want_gathered.insert(want_gathered.end(), theirs.begin(), theirs.end());
  }
  std::string problem = mismatch<std::int64_t>(sums, reduced<std::int64_t, coll::sum>(all_sums), "sum, by callback");
  if (problem.empty()) problem = mismatch<double>(maxima, reduced<double, coll::max>(all_maxima), "max, by coroutine");
  if (problem.empty()) problem = mismatch<std::int32_t>(gathered, want_gathered, "all_gather, by future");
  if (problem.empty()) problem = mismatch<float>(shared, inputs<float, coll::min>(0, n), "broadcast, deferred");
  return problem;
}

}  // namespace

TEST_CASE("calls waited for only through completion tokens end with their serial references") {
  for (int p : rank_counts)
    for (std::size_t n : {std::size_t{0}, std::size_t{7}, std::size_t(p + 1), std::size_t{40'003}}) {
      INFO("P=", p, " N=", n);
      on_ranks(p, [&](comm& c) { return every_token(c, n); });
    }
}
