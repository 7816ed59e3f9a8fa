// Call checking (communicator::check_calls, COLLECTIVES_CHECK_CALLS): ranks that make
// different calls are told which rank differs and how, at once, instead of timing out.
#include <cstdlib>
#include <string>
#include <vector>

#include <collectives/collectives.hpp>
#include <doctest/doctest.h>

namespace coll = collectives;
using comm = coll::communicator<coll::inproc>;
using namespace std::chrono_literals;

namespace {

// Runs `call(comm)` on P ranks with checking on and returns each rank's error message
// ("" where the call succeeded). Must finish long before the 10 s timeout.
template <class Call>
std::vector<std::string> outcome(int p, Call call) {
  std::vector<std::string> messages(static_cast<std::size_t>(p));
  const auto start = coll::clock::now();
  coll::run_ranks(p, [&](comm& c) {
    c.check_calls(true);
    try {
      call(c);
    } catch (const coll::error& e) {
      messages[std::size_t(c.rank())] = e.code() == coll::errc::call_mismatch ? e.what() : "unexpected: " + std::string(e.what());
    }
  }, 10s);
  CHECK(coll::clock::now() - start < 2s);
  return messages;
}

bool mentions(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("with checking on, matching calls of every kind go through and give the right results") {
  for (int p : {1, 2, 3, 5}) {
    const auto messages = outcome(p, [p](comm& c) {
      std::vector<int> v(10, c.rank() + 1), all(10 * std::size_t(p));
      coll::all_reduce(c, v, coll::sum{});
      coll::broadcast(c, v, p - 1);
      coll::all_gather(c, std::span{v}.first(10), all);
      std::vector<std::size_t> counts(std::size_t(p), 2);
      std::vector<int> part(2), gathered(2 * std::size_t(p));
      coll::all_gatherv(c, part, gathered, counts);
      coll::barrier(c);
      if (v != std::vector<int>(10, p * (p + 1) / 2)) throw coll::error(coll::errc::call_mismatch, "wrong sum");
      std::vector<float> f(10, float(c.rank() + 1));  // sums through an accumulator: checked once, then unchecked parts
      coll::all_reduce(c, f, coll::reproducible_sum{});
      coll::all_reduce(c, f, coll::accumulate_as<double>(coll::sum{}));
      if (!c.checks_calls()) throw coll::error(coll::errc::call_mismatch, "checking was left off");
      if (f != std::vector<float>(10, float(p * p * (p + 1) / 2))) throw coll::error(coll::errc::call_mismatch, "wrong sum");
    });
    for (const auto& m : messages) CHECK(m == "");
  }
}

TEST_CASE("a rank calling another collective is named on every rank") {
  const auto messages = outcome(3, [](comm& c) {
    std::vector<float> v(10, 1.0f);
    if (c.rank() == 1) coll::broadcast(c, v, 0);
    else coll::all_reduce(c, v, coll::sum{});
  });
  CHECK(mentions(messages[0], "rank 1 called broadcast where this rank called all_reduce"));
  CHECK(mentions(messages[1], "rank 0 called all_reduce where this rank called broadcast"));
  CHECK(mentions(messages[2], "rank 1 called broadcast"));
}

TEST_CASE("a rank that makes no call: the timeout names the caller's call and the silent rank, not the check's exchange") {
  std::vector<std::string> messages(3);
  coll::run_ranks(3, [&](comm& c) {
    c.check_calls(true);
    if (c.rank() == 2) return;  // makes no call
    c.set_timeout(300ms);
    try {
      std::vector<double> v(1000, 1.0);
      coll::all_reduce(c, v, coll::sum{});
    } catch (const coll::error& e) {
      messages[std::size_t(c.rank())] = (e.code() == coll::errc::timeout ? "" : "unexpected: ") + std::string(e.what());
    }
  }, 10s);
  for (int r : {0, 1}) {
    INFO(messages[std::size_t(r)]);
    CHECK(messages[std::size_t(r)].starts_with("all_reduce: timed out after 300 ms on rank " + std::to_string(r) +
                                               " in the call check (COLLECTIVES_CHECK_CALLS): rank(s) 2 had not made the call "
                                               "within the timeout"));
  }
}

TEST_CASE("a split that meets another call is named as a split") {
  // split is an exchange of its own, checked like a collective: the rank that makes
  // another call is named in the words of the call each rank made.
  const auto messages = outcome(2, [](comm& c) {
    if (c.rank() == 0) c.split(0, 0);
    else coll::barrier(c);
  });
  CHECK(messages[0] == "split on rank 0: rank 1 called barrier where this rank called split: call mismatch");
  CHECK(messages[1] == "barrier on rank 1: rank 0 called split where this rank called barrier: call mismatch");
}

TEST_CASE("each kind of difference is reported in words") {
  auto first_message = [](auto call) { return outcome(2, call)[0]; };
  CHECK(mentions(first_message([](comm& c) {
          std::vector<int> v(c.rank() == 0 ? 10 : 12);
          coll::all_reduce(c, v, coll::sum{});
        }),
        "rank 1 passes 12 elements where this rank passes 10"));
  CHECK(mentions(first_message([](comm& c) {
          if (c.rank() == 0) {
            std::vector<float> v(10);
            coll::all_reduce(c, v, coll::sum{});
          } else {
            std::vector<double> v(10);
            coll::all_reduce(c, v, coll::sum{});
          }
        }),
        "rank 1 uses 8-byte elements where this rank uses 4-byte ones"));
  CHECK(mentions(first_message([](comm& c) {
          std::vector<int> v(10);
          if (c.rank() == 0) coll::all_reduce(c, v, coll::sum{});
          else coll::all_reduce(c, v, coll::max{});
        }),
        "rank 1 uses another reduce op"));
  // A sum through an accumulator is several calls, checked once as the call made.
  CHECK(mentions(first_message([](comm& c) {
          std::vector<coll::bf16> v(10);
          if (c.rank() == 0) coll::all_reduce(c, v, coll::accumulate_as<float>(coll::sum{}));
          else coll::all_reduce(c, v, coll::sum{});
        }),
        "rank 1 uses another reduce op"));
  CHECK(mentions(first_message([](comm& c) {
          std::vector<float> v(10);
          if (c.rank() == 0) coll::all_reduce(c, v, coll::reproducible_sum{});
          else coll::all_reduce(c, v, coll::sum{});
        }),
        "rank 1 uses another reduce op"));
  CHECK(mentions(first_message([](comm& c) {
          std::vector<int> v(10);
          coll::broadcast(c, v, c.rank());  // each rank names itself
        }),
        "rank 1 names root 1 where this rank names root 0"));
  CHECK(mentions(first_message([](comm& c) {
          std::vector<int> v(10);
          if (c.rank() == 0) coll::all_reduce<coll::ring>(c, v, coll::sum{});
          else coll::all_reduce<coll::direct>(c, v, coll::sum{});
        }),
        "rank 1 asks for another algorithm"));
  CHECK(mentions(first_message([](comm& c) {
          const std::vector<std::size_t> counts = c.rank() == 0 ? std::vector<std::size_t>{1, 3}
                                                                : std::vector<std::size_t>{2, 2};
          std::vector<int> part(counts[std::size_t(c.rank())]), all(4);
          coll::all_gatherv(c, part, all, counts);
        }),
        "rank 1 passes other per-rank counts"));
}

TEST_CASE("all_to_allv's per-rank counts may differ without a complaint") {
  const auto messages = outcome(2, [](comm& c) {
    // Rank 0 sends 1 element to each rank, rank 1 sends 2.
    const std::size_t mine = c.rank() == 0 ? 1 : 2;
    const std::vector<std::size_t> send{mine, mine}, recv{1, 2};
    std::vector<int> in(2 * mine, c.rank()), out(3);
    coll::all_to_allv(c, in, send, out, recv);
  });
  CHECK(messages[0] == "");
  CHECK(messages[1] == "");
}

TEST_CASE("COLLECTIVES_CHECK_CALLS sets the default") {
  coll::inproc_group group(1);
  ::unsetenv("COLLECTIVES_CHECK_CALLS");
  CHECK_FALSE(comm(group.transport(0)).checks_calls());
  ::setenv("COLLECTIVES_CHECK_CALLS", "1", 1);
  CHECK(comm(group.transport(0)).checks_calls());
  ::setenv("COLLECTIVES_CHECK_CALLS", "0", 1);
  CHECK_FALSE(comm(group.transport(0)).checks_calls());
  ::unsetenv("COLLECTIVES_CHECK_CALLS");
}
