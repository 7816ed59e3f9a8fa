// Every documented error is raised with its code, and a failing call leaves nothing
// half-done: bad arguments touch no buffer and no call number, and a failure at run
// time (timeout, abort, a size disagreement, a throwing op) reaches every rank as an
// error instead of a hang.
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <collectives/collectives.hpp>
#include <doctest/doctest.h>

namespace coll = collectives;
using comm = coll::communicator<coll::inproc>;
using namespace std::chrono_literals;
using ms = std::chrono::milliseconds;
using counts_t = std::vector<std::size_t>;

namespace {

constexpr std::size_t size_max = std::numeric_limits<std::size_t>::max();

// Long enough never to fire in a passing test, short enough that a hang fails the test
// instead of blocking it.
constexpr ms generous = 10s;

ms since(coll::clock::time_point start) {
  return std::chrono::duration_cast<ms>(coll::clock::now() - start);
}

// The code of the collectives::error that f throws; a default (0) code if it throws
// nothing. Other exceptions pass through and fail the test case.
template <class F>
std::error_code code_of(F&& f) {
  try {
    f();
  } catch (const coll::error& e) {
    return e.code();
  }
  return {};
}

// Distinct values, so that a write anywhere into a buffer shows.
std::vector<int> pattern(std::size_t n) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), 1000);
  return v;
}

// A valid all_reduce whose answer every rank can check: the communicator still works
// and its call numbers are still in step with the other ranks'.
std::string check_still_works(comm& c) {
  const int p = c.size();
  std::vector<int> v(100);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = c.rank() + int(i);
  coll::all_reduce(c, v, coll::sum{});
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i] != p * int(i) + p * (p - 1) / 2) return "a valid all_reduce afterwards gave a wrong result";
  return {};
}

// Runs `bad(c, buffer)` on every rank of P. Every rank must throw the code that
// `expected(rank)` names before moving any byte: `buffer` (which `bad` fills with
// pattern() just before the call) is untouched, and the communicator still works: a
// valid all_reduce afterwards gives the right answer on every rank.
template <class Expected, class Bad>
void rejected_by_all(int p, Expected expected, Bad bad) {
  std::vector<std::string> problems(static_cast<std::size_t>(p));
  coll::run_ranks(p, [&](comm& c) {
    std::string& problem = problems[std::size_t(c.rank())];
    std::vector<int> buffer;
    const auto code = code_of([&] { bad(c, buffer); });
    if (code != expected(c.rank())) problem = code ? "threw " + code.message() : "threw nothing";
    else if (buffer != pattern(buffer.size())) problem = "the buffer was written";
    else problem = check_still_works(c);
  }, generous);
  for (int r = 0; r < p; ++r) {
    INFO("P = ", p, ", rank ", r);
    CHECK_MESSAGE(problems[std::size_t(r)].empty(), problems[std::size_t(r)]);
  }
}

template <class Bad>
void rejected_by_all(int p, coll::errc code, Bad bad) {
  rejected_by_all(p, [code](int) { return coll::make_error_code(code); }, bad);
}

// For a check made on the root only: the root throws `code` with `buffer` untouched,
// while the other ranks have entered the call. run_ranks must abort them (they end
// with errc::aborted, long before their deadline) and rethrow the root's error, not
// their "aborted" echo. The root is the last rank so lower ranks' echoes come first.
template <class Bad>
void rejected_by_root(int p, coll::errc code, Bad bad) {
  const int root = p - 1;
  std::vector<std::error_code> codes(static_cast<std::size_t>(p));
  bool untouched = false;
  const auto start = coll::clock::now();
  const auto thrown = code_of([&] {
    coll::run_ranks(p, [&](comm& c) {
      std::vector<int> buffer;
      try {
        bad(c, buffer, root);
      } catch (const coll::error& e) {
        codes[std::size_t(c.rank())] = e.code();
        if (c.rank() == root) untouched = buffer == pattern(buffer.size());
        throw;
      }
    }, generous);
  });
  INFO("P = ", p);
  CHECK(thrown == code);
  CHECK(untouched);
  for (int r = 0; r < root; ++r) CHECK(codes[std::size_t(r)] == coll::errc::aborted);
  CHECK(since(start) < 3s);
}

const std::vector<int> rank_counts{1, 2, 3, 5};

}  // namespace

// ---- argument checks -----------------------------------------------------------

TEST_CASE("invalid_root: broadcast, reduce, gather(v) and scatter(v) reject a root outside [0, P)") {
  for (int p : rank_counts)
    for (int root : {-1, p}) {
      INFO("root ", root);
      const std::size_t n = 4, all = n * std::size_t(p);
      const counts_t counts(std::size_t(p), n);
      const auto input = pattern(all);
      rejected_by_all(p, coll::errc::invalid_root, [&](comm& c, std::vector<int>& out) {
        out = pattern(n);
        coll::broadcast(c, out, root);
      });
      rejected_by_all(p, coll::errc::invalid_root, [&](comm& c, std::vector<int>& out) {
        out = pattern(n);
        coll::broadcast(c, std::vector<int>(n), out, root);
      });
      rejected_by_all(p, coll::errc::invalid_root, [&](comm& c, std::vector<int>& out) {
        out = pattern(n);
        coll::reduce(c, std::vector<int>(n), out, coll::sum{}, root);
      });
      rejected_by_all(p, coll::errc::invalid_root, [&](comm& c, std::vector<int>& out) {
        out = pattern(all);
        coll::gather(c, std::vector<int>(n), out, root);
      });
      rejected_by_all(p, coll::errc::invalid_root, [&](comm& c, std::vector<int>& out) {
        out = pattern(n);
        coll::scatter(c, input, out, root);
      });
      rejected_by_all(p, coll::errc::invalid_root, [&](comm& c, std::vector<int>& out) {
        out = pattern(all);
        coll::gatherv(c, std::vector<int>(n), out, counts, root);
      });
      rejected_by_all(p, coll::errc::invalid_root, [&](comm& c, std::vector<int>& out) {
        out = pattern(n);
        coll::scatterv(c, input, out, counts, root);
      });
    }
}

TEST_CASE("invalid_peer: send and recv reject the caller itself and ranks outside [0, P)") {
  using peer_of = int (*)(const comm&);
  const peer_of peers[] = {[](const comm&) { return -1; }, [](const comm& c) { return c.rank(); },
                           [](const comm& c) { return c.size(); }};
  for (int p : rank_counts)
    for (peer_of peer : peers) {
      rejected_by_all(p, coll::errc::invalid_peer, [&](comm& c, std::vector<int>& out) {
        out = pattern(3);
        coll::recv(c, out, peer(c));
      });
      rejected_by_all(p, coll::errc::invalid_peer, [&](comm& c, std::vector<int>& out) {
        out = pattern(3);
        coll::send(c, out, peer(c));
      });
    }
}

TEST_CASE("invalid_group: a group needs at least one rank; invalid_peer: a transport's rank must be in it") {
  CHECK(code_of([] { coll::inproc_group group(0); }) == coll::errc::invalid_group);
  CHECK(code_of([] { coll::inproc_group group(-1); }) == coll::errc::invalid_group);
  CHECK(code_of([] { coll::inproc_group group(0); }) == std::errc::invalid_argument);  // its std::errc condition
  bool ran = false;
  CHECK(code_of([&] { coll::run_ranks(0, [&](comm&) { ran = true; }); }) == coll::errc::invalid_group);
  CHECK_FALSE(ran);

  coll::inproc_group group(3);
  CHECK(code_of([&] { coll::inproc t(group, 3); }) == coll::errc::invalid_peer);
  CHECK(code_of([&] { (void)group.transport(-1); }) == coll::errc::invalid_peer);
}

namespace {

// The sizes the checks below are made with: N = 3 elements per rank.
struct sizes {
  explicit sizes(int p) : P(std::size_t(p)), all(n * P), counts(P, n), too_many(P + 1, n), too_few(P - 1, n) {}
  const std::size_t n = 3, P, all;
  const counts_t counts, too_many, too_few;
};

}  // namespace

TEST_CASE("buffer_size_mismatch: all_reduce's output differs from its input") {
  for (int p : rank_counts)
    for (std::size_t out_size : {2, 4})
      rejected_by_all(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out) {
        out = pattern(out_size);
        coll::all_reduce(c, std::vector<int>(3, 1), out, coll::sum{});
      });
}

TEST_CASE("buffer_size_mismatch: all_gather's output or reduce_scatter's input is not P*N") {
  for (int p : rank_counts) {
    const sizes s(p);
    rejected_by_all(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out) {
      out = pattern(s.all + 1);
      coll::all_gather(c, std::vector<int>(s.n), out);
    });
    rejected_by_all(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out) {
      out = pattern(s.n);
      coll::reduce_scatter(c, std::vector<int>(s.all + 1), out, coll::sum{});
    });
    rejected_by_all(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out) {
      out = pattern(s.all + 1);
      coll::all_to_all(c, std::vector<int>(s.all), out);
    });
    rejected_by_all(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out) {
      out = pattern(s.all);
      coll::all_gatherv(c, std::vector<int>(s.n + 1), out, s.counts);  // input is not counts[rank]
    });
  }
}

TEST_CASE("buffer_size_mismatch: a v-form's counts does not have one entry per rank") {
  for (int p : rank_counts) {
    const sizes s(p);
    for (const counts_t* wrong : {&s.too_many, &s.too_few}) {
      INFO("P = ", p, ", counts of size ", wrong->size());
      rejected_by_all(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out) {
        out = pattern(s.all);
        coll::all_gatherv(c, std::vector<int>(s.n), out, *wrong);
      });
      rejected_by_all(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out) {
        out = pattern(s.all);
        coll::all_gatherv(c, out, *wrong);  // in place
      });
      rejected_by_all(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out) {
        out = pattern(s.n);
        coll::reduce_scatterv(c, std::vector<int>(s.all), out, *wrong, coll::sum{});
      });
      rejected_by_all(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out) {
        out = pattern(s.all);
        coll::gatherv(c, std::vector<int>(s.n), out, *wrong, 0);
      });
      rejected_by_all(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out) {
        out = pattern(s.n);
        coll::scatterv(c, std::vector<int>(s.all), out, *wrong, 0);
      });
      rejected_by_all(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out) {
        out = pattern(s.all);
        coll::all_to_allv(c, std::vector<int>(s.all), *wrong, out, s.counts);
      });
      rejected_by_all(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out) {
        out = pattern(s.all);
        coll::all_to_allv(c, std::vector<int>(s.all), s.counts, out, *wrong);
      });
    }
  }
}

TEST_CASE("buffer_size_mismatch: an in-place buffer that does not split into P equal parts") {
  for (int p : {2, 3, 5}) {  // at P = 1 every size splits
    const sizes s(p);
    rejected_by_all(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out) {
      out = pattern(s.all + 1);
      coll::all_gather(c, out);
    });
    rejected_by_all(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out) {
      out = pattern(s.all + 1);
      coll::reduce_scatter(c, out, coll::sum{});
    });
    rejected_by_all(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out) {
      out = pattern(s.all + 1);
      coll::all_to_all(c, out);
    });
    rejected_by_all(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out) {
      out = pattern(s.all + 1);
      coll::gather(c, out, 0);
    });
    rejected_by_all(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out) {
      out = pattern(s.all + 1);
      coll::scatter(c, out, 0);
    });
  }
}

TEST_CASE("buffer_size_mismatch: all_to_allv's recv_counts[rank] differs from send_counts[rank]") {
  for (int p : rank_counts) {
    const sizes s(p);
    rejected_by_all(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out) {
      counts_t recv_counts = s.counts;
      recv_counts[std::size_t(c.rank())] += 1;  // the part kept cannot grow on the way
      out = pattern(s.all + 1);
      coll::all_to_allv(c, std::vector<int>(s.all), s.counts, out, recv_counts);
    });
  }
  CHECK(coll::make_error_code(coll::errc::buffer_size_mismatch) == std::errc::invalid_argument);
}

TEST_CASE("buffer_size_mismatch checked on the root only: run_ranks rethrows it and aborts the others") {
  for (int p : rank_counts) {
    const std::size_t n = 3, all = n * std::size_t(p);
    const counts_t counts(std::size_t(p), n);
    // The root's buffer is one element too long; the other ranks' are right.
    rejected_by_root(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out, int root) {
      out = pattern(c.rank() == root ? all + 1 : all);
      coll::gather(c, std::vector<int>(n, 1), out, root);
    });
    rejected_by_root(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out, int root) {
      out = pattern(c.rank() == root ? all + 1 : all);
      coll::gatherv(c, std::vector<int>(n, 1), out, counts, root);
    });
    rejected_by_root(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out, int root) {
      out = pattern(n);
      coll::scatter(c, std::vector<int>(c.rank() == root ? all + 1 : 0), out, root);
    });
    rejected_by_root(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out, int root) {
      out = pattern(n);
      coll::broadcast(c, std::vector<int>(c.rank() == root ? n + 1 : 0), out, root);
    });
    rejected_by_root(p, coll::errc::buffer_size_mismatch, [&](comm& c, std::vector<int>& out, int root) {
      out = pattern(c.rank() == root ? n - 1 : 0);
      coll::reduce(c, std::vector<int>(n, 1), out, coll::sum{}, root);
    });
  }
}

TEST_CASE("a rank whose arguments are rejected takes no call number and posts nothing") {
  // Only rank 0 makes the bad calls; the others make none. If a rejected call had
  // taken a call number or posted a message, rank 0's next all_reduce would not pair
  // with the others' (a hang until the deadline, or a wrong result).
  for (int p : {2, 3, 5}) {
    std::vector<std::string> problems(static_cast<std::size_t>(p));
    coll::run_ranks(p, [&](comm& c) {
      std::string& problem = problems[std::size_t(c.rank())];
      if (c.rank() == 0) {
        std::vector<int> v(6, 1), wrong(5);
        const counts_t overflowing{size_max, 1, 0, 0, 0};
        if (code_of([&] { coll::broadcast(c, v, p); }) != coll::errc::invalid_root) problem = "broadcast";
        if (code_of([&] { coll::all_reduce(c, v, wrong, coll::sum{}); }) != coll::errc::buffer_size_mismatch)
          problem = "all_reduce";
        if (code_of([&] { coll::all_gatherv(c, v, wrong, std::span{overflowing}.first(std::size_t(p))); }) !=
            coll::errc::count_overflow)
          problem = "all_gatherv";
        if (code_of([&] { coll::send(c, v, 0); }) != coll::errc::invalid_peer) problem = "send";
      }
      if (problem.empty()) problem = check_still_works(c);
    }, generous);
    for (int r = 0; r < p; ++r) {
      INFO("P = ", p, ", rank ", r);
      CHECK_MESSAGE(problems[std::size_t(r)].empty(), problems[std::size_t(r)]);
    }
  }
}

TEST_CASE("count_overflow: v-form counts whose sum does not fit in size_t") {
  for (int p : {2, 3, 5}) {
    counts_t counts(std::size_t(p), 0);
    counts[0] = size_max;
    counts[1] = 1;  // the sum wraps to 0, which a careless check would accept
    rejected_by_all(p, coll::errc::count_overflow, [&](comm& c, std::vector<int>& out) {
      out = pattern(4);
      coll::all_gatherv(c, std::vector<int>(1), out, counts);
    });
    rejected_by_all(p, coll::errc::count_overflow, [&](comm& c, std::vector<int>& out) {
      out = pattern(4);
      coll::all_gatherv(c, out, counts);  // in place
    });
    rejected_by_all(p, coll::errc::count_overflow, [&](comm& c, std::vector<int>& out) {
      out = pattern(1);
      coll::reduce_scatterv(c, std::vector<int>(4), out, counts, coll::sum{});
    });
    rejected_by_all(p, coll::errc::count_overflow, [&](comm& c, std::vector<int>& out) {
      out = pattern(4);
      coll::gatherv(c, std::vector<int>(1), out, counts, 0);
    });
    rejected_by_all(p, coll::errc::count_overflow, [&](comm& c, std::vector<int>& out) {
      out = pattern(1);
      coll::scatterv(c, std::vector<int>(4), out, counts, 0);
    });
    rejected_by_all(p, coll::errc::count_overflow, [&](comm& c, std::vector<int>& out) {
      out = pattern(4);
      coll::all_to_allv(c, std::vector<int>(4), counts, out, counts);
    });
  }
}

TEST_CASE("count_overflow: elements that fit in size_t but whose bytes do not") {
  // counts = {0, SIZE_MAX/2}: the sum fits, its bytes (x4 for int) do not. Rank 0, a
  // non-root with nothing to give, passes every size check and must stop at the byte
  // check; the root's input cannot have SIZE_MAX/2 elements, so it is rejected for
  // its size. Neither takes a call number: the all_reduce afterwards still agrees.
  const counts_t counts{0, size_max / 2};
  auto expected = [](int rank) {
    return coll::make_error_code(rank == 0 ? coll::errc::count_overflow : coll::errc::buffer_size_mismatch);
  };
  rejected_by_all(2, expected, [&](comm& c, std::vector<int>& out) {
    out = pattern(c.rank() == 0 ? 0 : 4);
    coll::gatherv(c, std::vector<int>(c.rank() == 0 ? 0 : 4), out, counts, 1);
  });
  rejected_by_all(2, expected, [&](comm& c, std::vector<int>& out) {
    out = pattern(c.rank() == 0 ? 0 : 4);
    coll::scatterv(c, std::vector<int>(4), out, counts, 1);
  });
  CHECK(coll::make_error_code(coll::errc::count_overflow) == std::errc::value_too_large);
}

// ---- run-time errors -------------------------------------------------------------

TEST_CASE("a recv of another size than the message sent fails on both sides and writes nothing") {
  // Rank 0 sends 8 ints; rank 1 posts 4 (truncated) or 12 (short message). The
  // sender learns of it too (rendezvous: it would otherwise wait for its deadline).
  for (std::size_t posted : {4, 12}) {
    INFO("posted ", posted, " for 8 sent");
    std::error_code sender, receiver;
    bool untouched = false, then_ok = false;
    const auto start = coll::clock::now();
    coll::run_ranks(2, [&](comm& c) {
      const std::vector<int> message(8, 7), next{1, 2, 3};
      if (c.rank() == 0) {
        sender = code_of([&] { coll::send(c, message, 1); });
        coll::send(c, next, 1);
      } else {
        auto into = pattern(posted);
        receiver = code_of([&] { coll::recv(c, into, 0); });
        untouched = into == pattern(posted);
        // The refused message was discarded: the next one with the same tag arrives.
        std::vector<int> got(3);
        coll::recv(c, got, 0);
        then_ok = got == next;
      }
    }, generous);
    CHECK(receiver == (posted < 8 ? coll::errc::message_truncated : coll::errc::buffer_size_mismatch));
    CHECK(sender == coll::errc::buffer_size_mismatch);
    CHECK(untouched);
    CHECK(then_ok);
    CHECK(since(start) < 3s);
  }
  CHECK(coll::make_error_code(coll::errc::message_truncated) == std::errc::message_size);
}

TEST_CASE("a send that timed out is withdrawn: its receiver never reads the old buffer") {
  // The executor cancels a failed call's messages before the error leaves it. With a
  // rendezvous transport the timed-out send would otherwise stay in the receiver's
  // mailbox, pointing at a buffer the sender has since freed.
  std::error_code sender;
  std::vector<int> got(3);
  coll::run_ranks(2, [&](comm& c) {
    if (c.rank() == 0) {
      {
        const auto stale = std::make_unique<std::vector<int>>(3, 666);
        coll::scoped_timeout guard{c, 50ms};
        sender = code_of([&] { coll::send(c, *stale, 1); });  // rank 1 is not receiving yet
      }
      coll::barrier(c);
      coll::send(c, std::vector<int>{1, 2, 3}, 1);
    } else {
      coll::barrier(c);  // after rank 0's send has timed out
      coll::recv(c, got, 0);
    }
  }, generous);
  CHECK(sender == coll::errc::timeout);
  CHECK(got == std::vector<int>{1, 2, 3});
}

TEST_CASE("ranks that disagree on an all_reduce's element count get a size error, not a wrong answer or a hang") {
  auto check = [&]<class A>() {
    for (int p : {2, 3, 5}) {
      INFO(A::name, " P = ", p);
      const auto start = coll::clock::now();
      const auto code = code_of([&] {
        coll::run_ranks(p, [&](comm& c) {
          std::vector<int> v(100 + std::size_t(c.rank()), 1);
          coll::all_reduce<A>(c, v, coll::sum{});
        }, generous);
      });
      CHECK((code == coll::errc::buffer_size_mismatch || code == coll::errc::message_truncated));
      CHECK(since(start) < 3s);
    }
  };
  check.template operator()<coll::ring>();
  check.template operator()<coll::double_binary_tree>();
  check.template operator()<coll::direct>();
  check.template operator()<coll::halving_doubling>();
  check.template operator()<coll::hierarchical<>>();
  check.template operator()<coll::automatic>();
}

TEST_CASE("timeout: a recv nobody sends to fails after the communicator's timeout, not long after") {
  std::error_code code;
  std::string what;
  ms took{};
  coll::run_ranks(2, [&](comm& c) {
    if (c.rank() == 0) return;  // never sends
    c.set_timeout(100ms);
    std::vector<int> into(4);
    const auto start = coll::clock::now();
    try {
      coll::recv(c, into, 0);
    } catch (const coll::error& e) {
      code = e.code();
      what = e.what();
    }
    took = since(start);
  }, generous);
  CHECK(code == coll::errc::timeout);
  CHECK(code == std::errc::timed_out);  // the portable condition
  CHECK(what.find("recv") != std::string::npos);
  CHECK(took >= 100ms);
  CHECK(took < 500ms);
}

TEST_CASE("timeout: a collective that one rank never enters times out on the others, naming call and rank") {
  constexpr int p = 3;
  std::vector<std::string> what(p);
  std::vector<ms> took(p);
  coll::run_ranks(p, [&](comm& c) {
    if (c.rank() == 1) return;  // skips the call
    coll::scoped_timeout guard{c, 200ms};
    std::vector<int> v(1000, 1);
    const auto start = coll::clock::now();
    const auto code = code_of([&] {
      try {
        coll::all_reduce(c, v, coll::sum{});
      } catch (const coll::error& e) {
        what[std::size_t(c.rank())] = e.what();
        throw;
      }
    });
    took[std::size_t(c.rank())] = since(start);
    if (code != coll::errc::timeout) what[std::size_t(c.rank())] = "no timeout: " + code.message();
  }, generous);
  for (int r : {0, 2}) {
    const std::string& m = what[std::size_t(r)];
    INFO("rank ", r, ": ", m);
    CHECK(m.find("all_reduce") != std::string::npos);
    CHECK(m.find("timed out") != std::string::npos);
    CHECK(m.find("rank " + std::to_string(r)) != std::string::npos);
    CHECK(took[std::size_t(r)] >= 200ms);
    CHECK(took[std::size_t(r)] < 1000ms);
  }
}

TEST_CASE("scoped_timeout applies while it lives and restores the previous timeout") {
  ms inside{}, after{}, failed_after{};
  std::error_code scoped_code, later_code;
  coll::run_ranks(2, [&](comm& c) {
    std::vector<int> data{1, 2, 3};
    if (c.rank() == 0) {
      // Sends only after a delay longer than the scoped timeout, so the receive
      // below succeeds only if the communicator's own timeout is back in force.
      std::this_thread::sleep_for(250ms);
      coll::send(c, data, 1);
      return;
    }
    {
      coll::scoped_timeout guard{c, 50ms};
      inside = c.timeout();
      const auto start = coll::clock::now();
      scoped_code = code_of([&] { coll::recv(c, data, 0); });
      failed_after = since(start);
    }
    after = c.timeout();
    later_code = code_of([&] { coll::recv(c, data, 0); });
  }, generous);
  CHECK(inside == 50ms);
  CHECK(scoped_code == coll::errc::timeout);
  CHECK(failed_after < 250ms);
  CHECK(after == generous);
  CHECK(later_code == std::error_code{});
}

TEST_CASE("aborted: comm.abort() wakes the ranks blocked in a collective at once, and the group stays aborted") {
  constexpr int p = 3;
  std::vector<std::error_code> codes(p), later(p);
  std::vector<ms> took(p);
  coll::run_ranks(p, [&](comm& c) {
    const auto r = std::size_t(c.rank());
    std::vector<int> v(1000, 1);
    if (c.rank() == 0) {
      std::this_thread::sleep_for(100ms);  // let the others block in all_reduce
      c.abort();
    } else {
      const auto start = coll::clock::now();
      codes[r] = code_of([&] { coll::all_reduce(c, v, coll::sum{}); });
      took[r] = since(start);
    }
    later[r] = code_of([&] { coll::barrier(c); });  // any later call that moves a message
  }, generous);
  for (int r = 1; r < p; ++r) {
    INFO("rank ", r);
    CHECK(codes[std::size_t(r)] == coll::errc::aborted);
    CHECK(codes[std::size_t(r)] == std::errc::operation_canceled);
    CHECK(took[std::size_t(r)] < 2s);  // far from the 10 s deadline
  }
  for (int r = 0; r < p; ++r) CHECK(later[std::size_t(r)] == coll::errc::aborted);
}

TEST_CASE("aborted: a rank that throws aborts the others, and run_ranks rethrows its error, not the echo") {
  constexpr int p = 4;
  std::vector<std::error_code> codes(p);
  const auto start = coll::clock::now();
  // Rank 2 fails; ranks 0 and 1 (lower, so first in order) fail with "aborted".
  CHECK_THROWS_WITH_AS(coll::run_ranks(p, [&](comm& c) {
    if (c.rank() == 2) {
      std::this_thread::sleep_for(100ms);
      throw std::runtime_error("rank 2 gave up");
    }
    std::vector<int> v(1000, 1);
    try {
      coll::all_reduce(c, v, coll::sum{});
    } catch (const coll::error& e) {
      codes[std::size_t(c.rank())] = e.code();
      throw;
    }
  }, generous), "rank 2 gave up", std::runtime_error);
  CHECK(since(start) < 3s);
  for (int r : {0, 1, 3}) CHECK(codes[std::size_t(r)] == coll::errc::aborted);
}

namespace {

struct op_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A user op that refuses to combine anything.
struct failing_sum {
  static constexpr bool commutative = true;  // so that ring accepts it too
  int operator()(int, int) const { throw op_failure("the op refused"); }
};

}  // namespace

TEST_CASE("an exception from a user op leaves run_ranks as that exception, and no rank hangs") {
  auto check = [&]<class A>() {
    for (int p : {2, 3, 5}) {
      INFO(A::name, " P = ", p);
      const auto start = coll::clock::now();
      // Out of place, so the input must come out unchanged (schedules never write it).
      std::vector<int> changed_inputs(static_cast<std::size_t>(p), 0);
      CHECK_THROWS_AS(coll::run_ranks(p, [&](comm& c) {
        const std::vector<int> before(1000, c.rank() + 1);
        std::vector<int> input = before, output(1000);
        try {
          coll::all_reduce<A>(c, input, output, failing_sum{});
        } catch (...) {
          changed_inputs[std::size_t(c.rank())] = input != before;
          throw;
        }
      }, generous), op_failure);
      CHECK(changed_inputs == std::vector<int>(changed_inputs.size(), 0));
      if constexpr (coll::implements<A, coll::kind::reduce>)
        CHECK_THROWS_AS(coll::run_ranks(p, [&](comm& c) {
          std::vector<int> v(1000, 1), out(c.rank() == 0 ? 1000 : 0);
          coll::reduce<A>(c, v, out, failing_sum{}, 0);
        }, generous), op_failure);
      CHECK(since(start) < 3s);
    }
  };
  check.template operator()<coll::ring>();
  check.template operator()<coll::double_binary_tree>();
  check.template operator()<coll::direct>();
  check.template operator()<coll::halving_doubling>();
  check.template operator()<coll::hierarchical<>>();
  check.template operator()<coll::automatic>();
}
