// The executor against transports that behave as the concept allows but no better,
// and as a simulator will drive it: on a transport's own clock, and one thread
// stepping every rank.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

#include <collectives/collectives.hpp>
#include <doctest/doctest.h>

namespace coll = collectives;
using namespace std::chrono_literals;

namespace {

// The in-process transport, except that wait_for_activity always reports a possible
// event at once: a spurious wake-up, which the Transport concept permits.
class always_awake {
 public:
  using request = coll::inproc::request;
  explicit always_awake(coll::inproc inner) : inner_(std::move(inner)) {}
  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  request post_send(int peer, coll::message_tag tag, std::span<const std::byte> b) { return inner_.post_send(peer, tag, b); }
  request post_recv(int peer, coll::message_tag tag, std::span<std::byte> b) { return inner_.post_recv(peer, tag, b); }
  bool test(request& r) { return inner_.test(r); }
  bool wait_for_activity(coll::deadline) { return true; }
  void cancel(request& r) noexcept { inner_.cancel(r); }
  void abort() { inner_.abort(); }

 private:
  coll::inproc inner_;
};
static_assert(coll::transport<always_awake>);

// The in-process transport on a test clock: time passes only when the executor would
// sleep with nothing to do, and then jumps to the deadline it would sleep until, as a
// simulator's clock jumps to its next event.
class on_test_clock {
 public:
  using request = coll::inproc::request;
  static constexpr coll::transport_traits traits = coll::traits_of<coll::inproc>();  // one host, so no call asks
  on_test_clock(coll::inproc inner, coll::deadline& clock) : inner_(std::move(inner)), now_(&clock) {}
  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  coll::deadline now() const { return *now_; }
  request post_send(int peer, coll::message_tag tag, std::span<const std::byte> b) { return inner_.post_send(peer, tag, b); }
  request post_recv(int peer, coll::message_tag tag, std::span<std::byte> b) { return inner_.post_recv(peer, tag, b); }
  bool test(request& r) { return inner_.test(r); }
  bool wait_for_activity(coll::deadline until) {
    if (coll::clock::now() - started_ > 10s) throw std::runtime_error("the test clock's deadline never fired");
    if (inner_.wait_for_activity(coll::clock::now())) return true;  // only looks: real time never waits here
    if (until > *now_) *now_ = until;
    return false;
  }
  void cancel(request& r) noexcept { inner_.cancel(r); }
  void abort() { inner_.abort(); }

 private:
  coll::inproc inner_;
  coll::deadline* now_;
  coll::clock::time_point started_ = coll::clock::now();
};
static_assert(coll::transport<on_test_clock>);

}  // namespace

TEST_CASE("the deadline holds even when the transport never stops waking the executor") {
  coll::inproc_group group(2);
  coll::communicator<always_awake> lonely(always_awake(group.transport(0)), 100ms);
  std::vector<int> never(4);
  const auto start = coll::clock::now();
  CHECK_THROWS_AS(coll::recv(lonely, never, 1, 0), coll::error);  // rank 1 never sends
  const auto waited = coll::clock::now() - start;
  CHECK(waited >= 100ms);
  CHECK(waited < 2s);
  // Started calls whose first stage is the hosts' exchange (the transport does not
  // say its hosts) end at its deadline too: both the call that began it and the one
  // that waits on it, each saying which call timed out and which rank was missing.
  std::vector<float> data(4, 1.0f), more(4, 2.0f);
  auto first = coll::iall_reduce(lonely, data, coll::sum{});
  auto second = coll::iall_reduce(lonely, more, coll::sum{});
  for (auto* handle : {&first, &second})
    CHECK_THROWS_WITH_AS(handle->wait(),
                         doctest::Contains("all_reduce: timed out after 100 ms on rank 0 learning every rank's host (the "
                                           "algorithm plans by them): rank(s) 1 had not made the call"),
                         coll::error);
  CHECK(data == std::vector<float>(4, 1.0f));
  CHECK(more == std::vector<float>(4, 2.0f));
}

TEST_CASE("collectives complete on a transport that wakes spuriously") {
  std::vector<int> results(3);
  coll::inproc_group group(3);
  std::vector<std::jthread> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.emplace_back([&, r] {
      coll::communicator<always_awake> comm(always_awake(group.transport(r)), 10s);
      results[std::size_t(r)] = coll::all_reduce(comm, r + 1, coll::sum{});
    });
  ranks.clear();  // joins
  CHECK(results == std::vector<int>{6, 6, 6});
}

TEST_CASE("a clock the transport supplies fires a call's deadline without real time passing") {
  // Rank 1 never calls: rank 0's calls end at their deadline, an hour by the
  // transport's clock, in well under a second of real time. A call that counted its
  // deadline by steady_clock would sleep on instead, until the transport gives up.
  coll::inproc_group group(2);
  coll::deadline clock{};
  coll::communicator<on_test_clock> comm(on_test_clock(group.transport(0), clock), 1h);
  std::vector<float> data(10, 1.0f);
  const auto started = coll::clock::now();
  try {
    coll::all_reduce(comm, data, coll::sum{});
    FAIL("the call ended without its peer");
  } catch (const coll::error& e) {
    CHECK(e.code() == coll::errc::timeout);
    CHECK(std::string(e.what()).find("timed out after 3600000 ms") != std::string::npos);
  }
  CHECK(clock == coll::deadline{} + 1h);  // the deadline was counted from the transport's time
  // The same for a non-blocking call, which its handle ends by that clock.
  auto handle = coll::iall_reduce(comm, data, coll::sum{});
  CHECK_THROWS_WITH_AS(handle.wait(), doctest::Contains("timed out"), coll::error);
  CHECK(clock == coll::deadline{} + 2h);
  CHECK(coll::clock::now() - started < 5s);
}

// Starts an all_reduce and an all_gather on each of 64 ranks, all in one thread,
// then tests the calls in turn until all are done, and checks their results.
template <class Transport>
void step_64_ranks(bool checked) {
  constexpr int p = 64;
  constexpr std::size_t n = 1001;
  coll::inproc_group group(p);
  std::vector<std::unique_ptr<coll::communicator<Transport>>> comms;
  for (int r = 0; r < p; ++r) {
    comms.push_back(std::make_unique<coll::communicator<Transport>>(Transport(group.transport(r)), 10s));
    comms.back()->check_calls(checked);
  }
  std::vector<std::vector<float>> sums(p);
  std::vector<std::vector<int>> mine(p), gathered(p, std::vector<int>(p * 3));
  std::vector<coll::call_handle<Transport>> calls;
  for (int r = 0; r < p; ++r) {
    sums[std::size_t(r)].resize(n);
    for (std::size_t i = 0; i < n; ++i) sums[std::size_t(r)][i] = float(r * 3 + int(i % 7));
    calls.push_back(coll::iall_reduce(*comms[std::size_t(r)], sums[std::size_t(r)], coll::sum{}));
    mine[std::size_t(r)] = {r, -r, r * r};  // a call's buffers stay the caller's until it is done
    calls.push_back(coll::iall_gather(*comms[std::size_t(r)], mine[std::size_t(r)], gathered[std::size_t(r)]));
  }
  int rounds = 0;
  for (bool all_done = false; !all_done && rounds < 100'000; ++rounds) {
    all_done = true;
    for (auto& call : calls) all_done &= call.test();
  }
  CHECK(rounds < 100'000);
  std::vector<float> expected(n);
  for (std::size_t i = 0; i < n; ++i)
    for (int r = 0; r < p; ++r) expected[i] += float(r * 3 + int(i % 7));
  std::vector<int> all(p * 3);
  for (int r = 0; r < p; ++r) all[std::size_t(r) * 3] = r, all[std::size_t(r) * 3 + 1] = -r, all[std::size_t(r) * 3 + 2] = r * r;
  for (int r = 0; r < p; ++r) {
    INFO("rank ", r);
    CHECK(sums[std::size_t(r)] == expected);
    CHECK(gathered[std::size_t(r)] == all);
  }
}

TEST_CASE("one thread steps the calls of 64 ranks to completion, with and without the call check") {
  // What a simulator does: no thread per rank; each rank's calls start without
  // waiting on the network (the call check, when on, is their first stage) and move
  // only when stepped. Over a transport that does not say its ranks' hosts, the
  // hosts' exchange that automatic's plans need is a stage too: the first call
  // begins it, the second waits on it, and both are planned once it is done.
  for (bool checked : {false, true}) {
    INFO(std::string(checked ? "with" : "without"), " the call check");
    step_64_ranks<coll::inproc>(checked);
    INFO("over a transport that does not say its hosts");
    step_64_ranks<always_awake>(checked);
  }
}

TEST_CASE("a blocking call waits for the hosts' exchange that a started call began") {
  // The started all_reduce begins the exchange as its first stage; the blocking
  // all_reduce after it, which plans by the hosts too, advances it to its end instead
  // of making one of its own, and every rank counts calls alike.
  coll::inproc_group group(3);
  std::vector<int> sums(3), maxima(3);
  std::vector<std::jthread> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.emplace_back([&, r] {
      coll::communicator<always_awake> comm(always_awake(group.transport(r)), 10s);
      std::vector<int> mine{r + 1};
      auto sum = coll::iall_reduce(comm, mine, coll::sum{});
      CHECK(comm.hosts().empty());  // not yet known: the exchange is the started call's stage
      maxima[std::size_t(r)] = coll::all_reduce(comm, r * 10, coll::max{});
      CHECK(comm.hosts() == std::vector<int>{0, 0, 0});
      sum.wait();
      sums[std::size_t(r)] = mine[0];
    });
  ranks.clear();  // joins
  CHECK(sums == std::vector<int>{6, 6, 6});
  CHECK(maxima == std::vector<int>{20, 20, 20});
}

TEST_CASE("a call started without waiting names a rank that made another call, from its call check") {
  // Rank 1 calls all_gather where rank 0 calls all_reduce: rank 0's started call fails
  // in its check, naming rank 1, before any of its own messages went out.
  coll::inproc_group group(2);
  std::vector<std::unique_ptr<coll::communicator<coll::inproc>>> comms;
  for (int r = 0; r < 2; ++r) {
    comms.push_back(std::make_unique<coll::communicator<coll::inproc>>(group.transport(r), 10s));
    comms.back()->check_calls(true);
  }
  std::vector<float> data(4, 1.0f);
  std::vector<float> gathered(8);
  auto sum = coll::iall_reduce(*comms[0], data, coll::sum{});
  auto gather = coll::iall_gather(*comms[1], data, gathered);
  std::string failures;
  for (int round = 0; round < 100'000 && failures.size() < 2; ++round)
    for (auto* call : {&sum, &gather}) try {
        call->test();
      } catch (const coll::error& e) {
        CHECK(e.code() == coll::errc::call_mismatch);
        failures += e.what();
        failures += '\n';
        *call = {};
      }
  CHECK(failures.find("all_reduce on rank 0: rank 1 called all_gather where this rank called all_reduce") != std::string::npos);
  CHECK(data == std::vector<float>(4, 1.0f));  // untouched: the call's own messages never went out
}

TEST_CASE("an executor asked to hand the transport over returns after each pass, and still finishes") {
  // A progress thread's round asks this of every call while its owner waits: one pass
  // over the operations, however many more could move. Two ranks stepped in turn by
  // one thread, a ring all_reduce in many slices; the same with and without the request.
  constexpr std::size_t n = 40'000;
  auto steps_to_finish = [&](coll::handover_request handover) {
    coll::inproc_group group(2);
    std::vector<coll::inproc> transports;
    for (int r = 0; r < 2; ++r) transports.push_back(group.transport(r));
    std::vector<std::vector<float>> data(2);
    std::vector<coll::schedule> plans;
    std::vector<coll::executor_workspace<coll::inproc::request>> rooms(2);
    coll::sum op;
    std::vector<std::unique_ptr<coll::executor<coll::inproc, float, coll::sum>>> calls;
    for (int r = 0; r < 2; ++r) {
      data[std::size_t(r)].assign(n, float(r + 1));
      plans.push_back(coll::plan_of<coll::ring>(
          coll::kind::all_reduce{}, {.rank = r, .size = 2, .count = n, .element_size = sizeof(float), .slice_bytes = 4096}));
    }
    for (int r = 0; r < 2; ++r) {
      float* d = data[std::size_t(r)].data();
      calls.push_back(std::make_unique<coll::executor<coll::inproc, float, coll::sum>>(
          plans[std::size_t(r)], transports[std::size_t(r)], coll::call_buffers<float>{d, d}, op, rooms[std::size_t(r)]));
      calls.back()->start();
    }
    const auto ctx = coll::call_context::starting_now("all_reduce", 1, 10s);
    int steps = 0;
    for (bool done[2] = {false, false}; !(done[0] && done[1]) && steps < 1'000'000;)
      for (int r = 0; r < 2; ++r)
        if (!done[r]) done[r] = calls[std::size_t(r)]->advance(ctx, handover), ++steps;
    for (auto& d : data) CHECK(d == std::vector<float>(n, 3.0f));
    return steps;
  };
  std::atomic<int> owner_waiting{1};
  const int asked = steps_to_finish({&owner_waiting}), unasked = steps_to_finish({});
  CAPTURE(asked);
  CAPTURE(unasked);
  CHECK(asked < 1'000'000);
  CHECK(asked > unasked);  // each step a single pass, where an unasked one runs on while it can
}

TEST_CASE("a large scratch buffer stays while calls need it, and goes back after calls that do not") {
  coll::reusable_host_memory memory;
  constexpr std::size_t large = 4 << 20, small = 4096;
  std::byte* first = memory.get(large);
  memory.trim();
  CHECK(memory.capacity() == large);
  for (int call = 0; call < 20; ++call) {  // a repeated large call takes no new memory
    CHECK(memory.get(large) == first);
    memory.trim();
  }
  for (int call = 1; call < coll::reusable_host_memory::kept_calls; ++call) {
    memory.get(small);
    memory.trim();
    CHECK(memory.capacity() == large);
  }
  memory.get(small);
  memory.trim();
  CHECK(memory.capacity() == 0);  // kept_calls small calls in a row: given back
  memory.get(small);
  memory.trim();
  CHECK(memory.capacity() == small);  // up to kept_bytes, kept whatever the calls need
}
