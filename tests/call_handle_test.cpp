// What a non-blocking call's handle promises beyond its result (the results are
// checked in collectives/nonblocking_test.cpp): bad arguments throw before anything
// starts, an abort from another thread reaches every handle, a handle destroyed or
// moved over early waits for its call, and a communicator destroyed with calls in
// flight leaves their handles with an error instead of a dangling call.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include <collectives/collectives.hpp>

namespace coll = collectives;
using comm = coll::communicator<coll::inproc>;
using handle = coll::call_handle<coll::inproc>;
using namespace std::chrono_literals;

TEST_CASE("bad arguments throw from the i-form before any call starts, and the next call works") {
  coll::run_ranks(3, [](comm& c) {
    std::vector<int> data(4, 1), wrong(3);
    CHECK_THROWS_AS(auto h = coll::ibroadcast(c, data, 3), coll::error);
    CHECK_THROWS_AS(auto h = coll::iall_reduce(c, data, wrong, coll::sum{}), coll::error);
    CHECK_THROWS_AS(auto h = coll::isend(c, data, c.rank()), coll::error);
    auto h = coll::iall_reduce(c, data, coll::sum{});
    h.wait();
    CHECK(data[3] == 3);
  });
}

TEST_CASE("an empty handle, and the handle of a call with nothing to move, are done at once") {
  handle none;
  CHECK(none.test());
  CHECK(none.wait_for(0s));
  none.wait();
  std::vector<handle> no_handles;
  CHECK(coll::wait_any(std::span(no_handles)) == 0);
  coll::run_ranks(1, [](comm& c) {
    std::vector<double> x(5, 2.0);
    auto h = coll::iall_reduce(c, x, coll::prod{});  // one rank: nothing to send
    CHECK(h.test());
    CHECK(x[4] == 2.0);
  });
}

TEST_CASE("an abort from another thread wakes every waiting handle with errc::aborted") {
  std::atomic<int> aborted{0};
  coll::run_ranks(2, [&](comm& c) {
    std::vector<float> never_sent(8);
    std::vector<handle> h;
    h.push_back(coll::irecv(c, never_sent, 1 - c.rank(), 3));  // neither rank sends
    h.push_back(coll::irecv(c, never_sent, 1 - c.rank(), 4));
    std::jthread aborter;
    if (c.rank() == 0) aborter = std::jthread([&] {
      std::this_thread::sleep_for(50ms);
      c.abort();
    });
    for (auto& one : h) {
      try {
        one.wait();
      } catch (const coll::error& e) {
        if (e.code() == coll::errc::aborted) ++aborted;
      }
    }
  }, 10s);
  CHECK(aborted == 4);
}

TEST_CASE("a handle destroyed before its call ends waits for it, so the buffer is whole when it goes") {
  coll::run_ranks(3, [](comm& c) {
    std::vector<std::int64_t> data(100'000, c.rank() + 1);
    {
      auto h = coll::iall_reduce(c, data, coll::sum{});
    }  // waits here
    CHECK(data.front() == 6);
    CHECK(data.back() == 6);
    std::vector<std::int64_t> more(1000, 1);
    auto h = coll::iall_reduce(c, more, coll::sum{});
    h = coll::iall_reduce(c, data, coll::max{});  // moving over an unfinished handle waits for its call too
    CHECK(more[999] == 3);
    h.wait();
    CHECK(data[0] == 6);
  });
}

TEST_CASE("a communicator destroyed with calls in flight finishes them first, or fails them; their handles never dangle") {
  std::atomic<int> finished{0}, failed{0};
  coll::inproc_group group(2);
  std::vector<std::jthread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      std::vector<int> data(1000, r + 1), alone(4);
      std::optional<handle> together, orphan;
      {
        comm c(group.transport(r), 300ms);
        together = coll::iall_reduce(c, data, coll::sum{});
        if (r == 0) orphan = coll::irecv(c, alone, 1, 6);  // rank 1 never sends it
      }
      // The communicator is gone: the handles only report what became of their calls.
      try {
        together->wait();
        finished += data[999] == 3;
      } catch (const coll::error&) {
        ++failed;
      }
      if (r == 0) {
        try {
          orphan->wait();
        } catch (const coll::error& e) {
          failed += e.code() == coll::errc::timeout || e.code() == coll::errc::aborted;
        }
      }
    });
  ranks.clear();
  CHECK(finished == 2);
  CHECK(failed == 1);
}
