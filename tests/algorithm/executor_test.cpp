// The executor against transports that behave as the concept allows but no better.
#include <chrono>
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
