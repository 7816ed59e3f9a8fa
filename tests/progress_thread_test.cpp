// The progress thread: calls move while the rank computes and never tests them, a
// blocking call and calls from other threads take turns with it, and errors,
// deadlines and aborts still reach their handles. CMake builds this test a second
// time under ThreadSanitizer (progress_thread_test_tsan).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <thread>
#include <vector>

#include <collectives/collectives.hpp>

#include "scoped_env.hpp"

namespace coll = collectives;
using comm = coll::communicator<coll::inproc>;
using handle = coll::call_handle<coll::inproc>;
using namespace std::chrono_literals;

namespace {

// A user op: the value of larger magnitude, the lower rank's on a tie.
struct larger_magnitude {
  std::int64_t operator()(std::int64_t a, std::int64_t b) const { return (b < 0 ? -b : b) > (a < 0 ? -a : a) ? b : a; }
};

std::int64_t value(int rank, std::size_t i) { return (static_cast<std::int64_t>(i % 97) - 48) * (rank + 1) + rank; }

// Work that touches no communicator, until every handle has finished or `limit` passes.
bool compute_until_finished(std::vector<handle>& handles, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  volatile double sink = 0;
  while (std::chrono::steady_clock::now() < until) {
    bool all = true;
    for (auto& h : handles) all = all && h.finished();
    if (all) return true;
    for (int i = 0; i < 1000; ++i) sink = sink + i * 0.5;
  }
  return false;
}

}  // namespace

TEST_CASE("with a progress thread, calls finish while the rank computes and never tests them") {
  for (int ranks : {1, 2, 3, 5}) {
    for (std::size_t count : {std::size_t{0}, std::size_t{7}, std::size_t{100'003}}) {
      CAPTURE(ranks);
      CAPTURE(count);
      coll::run_ranks(ranks, [&](comm& c) {
        c.start_progress_thread();
        REQUIRE(c.has_progress_thread());
        const int n = c.size();
        std::vector<std::int64_t> summed(count), largest(count), root_data(count);
        for (std::size_t i = 0; i < count; ++i) summed[i] = largest[i] = value(c.rank(), i);
        if (c.rank() == n - 1) std::iota(root_data.begin(), root_data.end(), 5);
        std::vector<std::int64_t> mine(count, c.rank()), gathered(count * static_cast<std::size_t>(n));

        std::vector<handle> h;
        h.push_back(coll::iall_reduce(c, summed, coll::sum{}));
        h.push_back(coll::iall_reduce(c, largest, larger_magnitude{}));
        h.push_back(coll::ibroadcast(c, root_data, n - 1));
        h.push_back(coll::iall_gather(c, mine, gathered));
        REQUIRE(compute_until_finished(h, 30s));
        coll::wait_all(std::span(h));

        for (std::size_t i = 0; i < count; ++i) {
          std::int64_t sum = 0, large = value(0, i);
          for (int r = 0; r < n; ++r) sum += value(r, i);
          for (int r = 1; r < n; ++r) large = larger_magnitude{}(large, value(r, i));
          REQUIRE(summed[i] == sum);
          REQUIRE(largest[i] == large);
          REQUIRE(root_data[i] == static_cast<std::int64_t>(i) + 5);
        }
        for (std::size_t j = 0; j < gathered.size(); ++j) REQUIRE(gathered[j] == static_cast<std::int64_t>(j / count));
      });
    }
  }
}

TEST_CASE("a blocking call takes its turn beside the progress thread, and calls start again after it") {
  coll::run_ranks(3, [](comm& c) {
    c.start_progress_thread();
    for (int round = 0; round < 20; ++round) {
      std::vector<float> big(50'000, float(c.rank() + round));
      std::vector<int> small(3, c.rank());
      auto h = coll::iall_reduce(c, big, coll::max{});
      coll::all_reduce(c, small, coll::sum{});  // blocking, while the thread advances h
      CHECK(small == std::vector<int>(3, 3));
      std::vector<int> gathered(3);
      auto g = coll::iall_gather(c, std::span(small.data(), 1), std::span(gathered));
      g.wait();
      h.wait();
      CHECK(big.front() == float(2 + round));
      CHECK(big.back() == float(2 + round));
      CHECK(gathered == std::vector<int>(3, 3));
    }
  });
}

TEST_CASE("with a progress thread, other threads may wait for handles while the rank computes") {
  coll::run_ranks(4, [](comm& c) {
    c.start_progress_thread();
    std::vector<std::vector<double>> data(4, std::vector<double>(20'011, 1.0 + c.rank()));
    std::vector<handle> h;
    for (auto& d : data) h.push_back(coll::iall_reduce(c, d, coll::sum{}));
    std::atomic<int> right{0};
    {
      std::vector<std::jthread> waiters;
      for (std::size_t i = 0; i < h.size(); ++i)
        waiters.emplace_back([&, i] {
          if (i % 2)
            h[i].wait();
          else
            while (!h[i].test()) std::this_thread::yield();
          if (data[i].front() == 10.0 && data[i].back() == 10.0) ++right;
        });
      std::vector<int> one{c.rank()};
      coll::all_reduce(c, one, coll::sum{});  // the owner goes on meanwhile
      CHECK(one[0] == 6);
    }
    CHECK(right == 4);
  });
}

TEST_CASE("with a progress thread, a call's deadline and an abort still reach its handle") {
  coll::run_ranks(2, [](comm& c) {
    c.start_progress_thread();
    std::vector<int> never_sent(4);
    handle late;
    {
      coll::scoped_timeout short_one(c, 100ms);
      late = coll::irecv(c, never_sent, 1 - c.rank(), 9);
    }
    std::vector<handle> h;
    h.push_back(std::move(late));
    CHECK(compute_until_finished(h, 10s));  // the thread gives up at the deadline by itself
    try {
      h[0].wait();
      FAIL("a receive nobody sends must time out");
    } catch (const coll::error& e) {
      CHECK(e.code() == coll::errc::timeout);
    }
  }, 20s);

  std::atomic<int> aborted{0};
  coll::run_ranks(2, [&](comm& c) {
    c.start_progress_thread();
    std::vector<int> never_sent(4);
    auto h = coll::irecv(c, never_sent, 1 - c.rank(), 3);
    std::jthread aborter;
    if (c.rank() == 0) aborter = std::jthread([&] {
      std::this_thread::sleep_for(50ms);
      c.abort();
    });
    try {
      h.wait();
    } catch (const coll::error& e) {
      if (e.code() == coll::errc::aborted) ++aborted;
    }
  }, 20s);
  CHECK(aborted == 2);
}

TEST_CASE("the owner gets the transport inside a round that never runs out of work") {
  // A large call's round moves for as long as its peers keep up. The owner who asks
  // for the transport meanwhile gets it at the round's next pass, not at its end.
  std::atomic<bool> last_round{false};
  std::atomic<int> rounds_handed_over{0};
  coll::progress_thread thread([&](coll::handover_request owner_waits) {
    const auto bound = std::chrono::steady_clock::now() + 10s;  // what a round that never looked would take
    while (!last_round && std::chrono::steady_clock::now() < bound) {
      if (owner_waits.raised()) {
        ++rounds_handed_over;
        return coll::progress_thread::round::moved;
      }
      std::this_thread::yield();  // a pass: more moved
    }
    return coll::progress_thread::round::nothing_in_flight;
  });
  std::this_thread::sleep_for(20ms);  // the round is under way
  for (int ask = 0; ask < 3; ++ask) {
    const auto asked = std::chrono::steady_clock::now();
    coll::progress_thread::exclusive turn(&thread);
    CHECK(std::chrono::steady_clock::now() - asked < 5s);
  }
  CHECK(rounds_handed_over.load() >= 1);  // the first ask came mid-round; a later one may come between rounds
  last_round = true;
}

TEST_CASE("a wait past the call's deadline ends even while the progress thread cannot take its turn") {
  coll::run_ranks(2, [](comm& c) {
    c.start_progress_thread();
    std::vector<int> never_sent(4);
    handle h;
    {
      coll::scoped_timeout short_one(c, 100ms);
      h = coll::irecv(c, never_sent, 1 - c.rank(), 11);
    }
    auto turn = c.exclusive();  // keeps the progress thread out
    const auto t0 = coll::clock::now();
    CHECK_THROWS_AS(h.wait(), coll::error);
    CHECK(coll::clock::now() - t0 < 5s);
  }, 20s);
}

TEST_CASE("the progress thread stops and starts again, moves with its communicator, and comes from the environment") {
  coll::inproc_group group(2);
  std::vector<int> results(2);
  {
    std::vector<std::jthread> ranks;
    for (int r = 0; r < 2; ++r)
      ranks.emplace_back([&, r] {
        comm first(group.transport(r), 10s);
        first.start_progress_thread();
        first.stop_progress_thread();
        CHECK_FALSE(first.has_progress_thread());
        first.start_progress_thread();
        comm c = std::move(first);  // no calls in flight: allowed
        CHECK(c.has_progress_thread());
        std::vector<int> x{r + 1};
        std::vector<handle> h;
        h.push_back(coll::iall_reduce(c, x, coll::sum{}));
        CHECK(compute_until_finished(h, 10s));
        results[static_cast<std::size_t>(r)] = x[0];
      });
  }
  CHECK(results == std::vector<int>{3, 3});

  scoped_env on("COLLECTIVES_PROGRESS_THREAD", "1");
  coll::run_ranks(1, [](comm& c) { CHECK(c.has_progress_thread()); });
}

TEST_CASE("a communicator with a progress thread, destroyed with calls in flight, leaves their handles an error") {
  coll::inproc_group group(2);
  std::vector<int> data(16, 1);
  handle orphan;
  {
    comm c(group.transport(0), 200ms);
    c.start_progress_thread();
    orphan = coll::iall_reduce(c, data, coll::sum{});  // rank 1 never joins
  }
  CHECK(orphan.finished());
  CHECK_THROWS_AS(orphan.wait(), coll::error);
}
