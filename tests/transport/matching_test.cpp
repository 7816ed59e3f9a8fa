// The matching engine on its own, with no wire: messages handed over as a wire would,
// checked against the bytes that were sent.
#include <doctest/doctest.h>

#include <collectives/transport/detail/matching.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

namespace coll = collectives;
using namespace coll::transport_detail;

namespace {

std::vector<std::byte> bytes_from(int first, std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte(std::uint8_t(first + int(i) * 7));
  return v;
}

// A whole message from `peer`, in pieces of `piece` bytes, as a wire would hand it over.
template <class Engine>
landing arrive(Engine& m, int peer, coll::message_tag tag, std::span<const std::byte> message, std::size_t piece = 1 << 30) {
  const landing l = m.begin_message(peer, tag, message.size());
  if (l == landing::held) return l;
  for (std::size_t at = 0; at < message.size(); at += piece)
    m.deliver(peer, message.subspan(at, std::min(piece, message.size() - at)));
  CHECK_FALSE(m.in_message(peer));
  return l;
}

template <class Engine>
bool done(Engine& m, std::uint32_t& slot) { return m.finish(slot); }

}  // namespace

TEST_CASE("a message lands in the receive posted for it, or early, or is held") {
  matching_engine<> m(0, 3, early_limits{.message_bytes = 64, .bytes_per_peer = 100});
  const auto small = bytes_from(1, 40), large = bytes_from(2, 65);
  std::vector<std::byte> a(40), b(65), c(40);

  auto ra = m.post_recv(1, {5, 1}, a);
  CHECK(arrive(m, 1, {5, 1}, small, 7) == landing::receive);
  CHECK(done(m, ra));
  CHECK(a == small);

  CHECK(arrive(m, 2, {5, 2}, small) == landing::early);      // came first, small: kept
  CHECK(m.begin_message(2, {5, 3}, large.size()) == landing::held);  // too large to keep
  CHECK(arrive(m, 2, {5, 4}, bytes_from(3, 61)) == landing::held);   // over the peer's budget (40 + 61 > 100)
  auto rc = m.post_recv(2, {5, 2}, c);                         // takes the early one at once
  CHECK(done(m, rc));
  CHECK(c == small);
  auto rb = m.post_recv(2, {5, 3}, b);
  CHECK(arrive(m, 2, {5, 3}, large, 16) == landing::receive);  // offered again: now it lands
  CHECK(done(m, rb));
  CHECK(b == large);
}

TEST_CASE("equal tags match first in, first out, early or posted, even while the first is arriving") {
  matching_engine<> m(1, 2, early_limits{});
  const auto first = bytes_from(10, 30), second = bytes_from(20, 30), third = bytes_from(30, 30);
  // The first begins arriving early; its receive is posted halfway; a second message
  // with the same tag must not overtake it.
  REQUIRE(m.begin_message(0, {1, 9}, first.size()) == landing::early);
  m.deliver(0, std::span(first).first(10));
  std::vector<std::byte> r1(30), r2(30), r3(30);
  auto q1 = m.post_recv(0, {1, 9}, r1);
  auto q2 = m.post_recv(0, {1, 9}, r2);
  CHECK_FALSE(done(m, q1));
  m.deliver(0, std::span(first).subspan(10));
  CHECK(arrive(m, 0, {1, 9}, second, 4) == landing::receive);
  CHECK(done(m, q1));
  CHECK(done(m, q2));
  CHECK(r1 == first);
  CHECK(r2 == second);
  CHECK(arrive(m, 0, {1, 9}, third) == landing::early);
  auto q3 = m.post_recv(0, {1, 9}, r3);
  CHECK(done(m, q3));
  CHECK(r3 == third);
}

TEST_CASE("a message of another size fails its receive only, and the next message still lands") {
  matching_engine<> m(0, 2, early_limits{});
  std::vector<std::byte> small(8), exact(12);
  auto r = m.post_recv(1, {2, 0}, small);
  CHECK(arrive(m, 1, {2, 0}, bytes_from(0, 12), 5) == landing::discard);
  CHECK_THROWS_WITH_AS(m.finish(r), doctest::Contains("rank 1 sent 12 bytes where 8 were expected"), coll::error);
  m.cancel(r);  // the executor cancels a request whose test threw
  // Early, then a receive of a larger size: buffer_size_mismatch.
  CHECK(arrive(m, 1, {2, 1}, bytes_from(0, 4)) == landing::early);
  std::vector<std::byte> larger(16);
  auto r2 = m.post_recv(1, {2, 1}, larger);
  try {
    m.finish(r2);
    FAIL("no error");
  } catch (const coll::error& e) {
    CHECK(e.code() == coll::errc::buffer_size_mismatch);
  }
  auto r3 = m.post_recv(1, {2, 2}, exact);
  CHECK(arrive(m, 1, {2, 2}, bytes_from(5, 12), 5) == landing::receive);
  CHECK(done(m, r3));
  CHECK(exact == bytes_from(5, 12));
}

TEST_CASE("a fused receive gets whole elements only, whatever the pieces") {
  for (std::size_t granule : {1u, 3u, 8u, 12u, 24u}) {
    for (std::size_t piece : {1u, 5u, 7u, 64u, 1000u}) {
      CAPTURE(granule);
      CAPTURE(piece);
      matching_engine<> m(0, 2, early_limits{});
      const std::size_t n = granule * 37;
      const auto message = bytes_from(int(granule), n);
      struct seen {
        std::vector<std::byte> got;
        std::size_t granule, next = 0;
        bool whole = true;
      } s{std::vector<std::byte>(n), granule};
      coll::chunk_sink sink{&s, [](void* c, std::size_t offset, std::span<const std::byte> p) {
                              auto& s = *static_cast<seen*>(c);
                              s.whole = s.whole && offset % s.granule == 0 && p.size() % s.granule == 0 && offset == s.next;
                              std::memcpy(s.got.data() + offset, p.data(), p.size());
                              s.next = offset + p.size();
                            }};
      auto r = m.post_recv_reduce(1, {3, 0}, n, granule, sink);
      arrive(m, 1, {3, 0}, message, piece);
      CHECK(done(m, r));
      CHECK(s.whole);
      CHECK(s.next == n);
      CHECK(s.got == message);
    }
  }
}

TEST_CASE("cancel: a cancelled receive's message goes to the next receive with its tag; mid-message it is discarded") {
  matching_engine<> m(0, 2, early_limits{});
  std::vector<std::byte> a(10), b(10);
  auto ra = m.post_recv(1, {4, 0}, a);
  m.cancel(ra);
  CHECK(ra == no_slot);
  CHECK(arrive(m, 1, {4, 0}, bytes_from(1, 10)) == landing::early);
  auto rb = m.post_recv(1, {4, 0}, b);
  CHECK(done(m, rb));
  CHECK(b == bytes_from(1, 10));

  const auto message = bytes_from(2, 10);
  std::fill(a.begin(), a.end(), std::byte{0});
  auto rc = m.post_recv(1, {4, 1}, a);
  REQUIRE(m.begin_message(1, {4, 1}, 10) == landing::receive);
  m.deliver(1, std::span(message).first(4));
  const auto c = m.cancel(rc);
  CHECK(c.mid_message);
  m.deliver(1, std::span(message).subspan(4));  // the rest is dropped, not written
  CHECK_FALSE(m.in_message(1));
  CHECK(std::vector<std::byte>(a.begin() + 4, a.end()) == std::vector<std::byte>(6));
}

TEST_CASE("links and the group: departed, lost, broken and aborted, each with its error") {
  matching_engine<> m(2, 4, early_limits{});
  std::vector<std::byte> a(1);
  auto from1 = m.post_recv(1, {1, 0}, a);
  auto to3 = m.post_send(3, {1, 0}, a);
  m.depart(1, "rank 1 closed its communicator");
  CHECK_THROWS_WITH_AS(m.finish(from1), doctest::Contains("rank 2: rank 1 closed its communicator while this rank still had a message from it"),
                       coll::error);
  // What this rank tells the others first: rank 1, which left before it.
  REQUIRE(m.first_failure());
  CHECK(m.first_failure()->rank == 1);
  CHECK(m.first_failure()->gone);
  CHECK(m.first_failure()->why == "lost rank 1: it closed its communicator while rank 2 still had a message from it");
  m.break_link(3, "rank 3 sent a malformed fragment");
  try {
    m.finish(to3);
    FAIL("no error");
  } catch (const coll::error& e) {
    CHECK(e.code() == coll::errc::protocol_error);
  }
  CHECK(m.lose(0, "lost rank 0: it died"));
  CHECK_FALSE(m.lose(0, "again"));
  CHECK_THROWS_WITH_AS(m.finish(to3), doctest::Contains("rank 2: lost rank 1: it closed its communicator while rank 2 still had a message from it; "
                                                        "then lost rank 0: it died"), coll::error);  // rank 1's leaving came first
  m.note_abort(3);
  m.note_abort(1);  // the first one is named
  CHECK_THROWS_WITH_AS(m.finish(to3), doctest::Contains("rank 2: the group was aborted by rank 3"), coll::error);
  CHECK_THROWS_AS(m.post_send(2, {}, a), coll::error);  // itself
  CHECK_THROWS_AS(m.post_recv(4, {}, a), coll::error);  // out of range
}

TEST_CASE("a rank told of a peer that left names it first, even when its own link to it had ended") {
  // Rank 1 left normally; rank 0 still expected a message from it, fails, and says so
  // before it leaves too. Rank 3 names rank 1 first, not rank 0.
  matching_engine<> zero(0, 4, early_limits{}), three(3, 4, early_limits{});
  std::vector<std::byte> a(1);
  auto from1 = zero.post_recv(1, {1, 0}, a);
  zero.depart(1, "rank 1 closed its communicator");
  CHECK_THROWS_AS(zero.finish(from1), coll::error);
  three.depart(1, "rank 1 closed its communicator");  // it said goodbye here too
  three.hear(0, *zero.reason_to_leave());  // what rank 0 tells as it leaves
  auto from0 = three.post_recv(0, {1, 0}, a);
  three.depart(0, "rank 0 closed its communicator");
  CHECK_THROWS_WITH_AS(three.finish(from0),
                       doctest::Contains("rank 3: lost rank 1: it closed its communicator while rank 0 still had a message from it "
                                         "(reported by rank 0); then rank 0 closed its communicator"),
                       coll::error);
}

TEST_CASE("a failure relayed twice names its first reporter once") {
  // Rank 1 saw rank 0 die and told rank 2, which told rank 3: rank 3 says who saw it.
  matching_engine<> two(2, 4, early_limits{}), three(3, 4, early_limits{});
  two.hear(1, {0, true, "lost rank 0: it died"});
  REQUIRE(two.first_failure());
  CHECK(two.first_failure()->why == "lost rank 0: it died (reported by rank 1)");
  three.hear(2, *two.first_failure());
  REQUIRE(three.first_failure());
  CHECK(three.first_failure()->why == "lost rank 0: it died (reported by rank 1)");
}

TEST_CASE("an empty message completes at once; a receive posted after it takes it") {
  matching_engine<> m(0, 2, early_limits{});
  auto r = m.post_recv(1, {6, 0}, {});
  CHECK(m.begin_message(1, {6, 0}, 0) == landing::receive);
  CHECK_FALSE(m.in_message(1));
  CHECK(done(m, r));
  CHECK(m.begin_message(1, {6, 1}, 0) == landing::early);
  auto r2 = m.post_recv(1, {6, 1}, {});
  CHECK(done(m, r2));
  // A wire that keeps no early data holds even an empty message until its receive.
  matching_engine<> rendezvous(0, 2, early_limits{0, 0});
  CHECK(rendezvous.begin_message(1, {6, 0}, 0) == landing::held);
}

namespace {

// A bytes policy that keeps its early buffers apart from the messages' memory and
// records what the engine does with it: every byte of a message must go through its
// copy, every early buffer taken must be given back. device_ipc relies on both.
struct ledger_bytes {
  struct buffer {
    std::vector<std::byte>* block = nullptr;
  };
  struct books {
    std::size_t copied = 0, taken = 0, given_back = 0;
    std::vector<std::unique_ptr<std::vector<std::byte>>> blocks;
  };
  books* b;
  static std::byte* data(buffer& x) { return x.block ? x.block->data() : nullptr; }
  void copy(std::byte* to, const std::byte* from, std::size_t n) {
    if (n != 0) std::memcpy(to, from, n);
    b->copied += n;
  }
  buffer take(std::size_t bytes) {
    ++b->taken;
    b->blocks.push_back(std::make_unique<std::vector<std::byte>>(bytes));
    return {b->blocks.back().get()};
  }
  void give_back(buffer&& x) {
    ++b->given_back;
    std::fill(x.block->begin(), x.block->end(), std::byte{0xdd});  // reading it after this shows as wrong bytes
  }
};

}  // namespace

TEST_CASE("every byte moves through the engine's bytes policy, and every early buffer goes back to it") {
  ledger_bytes::books books;
  matching_engine<no_wire_state, ledger_bytes> m(0, 2, early_limits{.message_bytes = 64, .bytes_per_peer = 256}, ledger_bytes{&books});
  const auto posted = bytes_from(1, 40), early = bytes_from(2, 50), claimed = bytes_from(3, 30);
  std::vector<std::byte> a(40), b(50), c(30);

  auto ra = m.post_recv(1, {8, 0}, a);
  CHECK(arrive(m, 1, {8, 0}, posted, 7) == landing::receive);  // straight into the receive: one copy
  CHECK(arrive(m, 1, {8, 1}, early, 9) == landing::early);     // into an early buffer, then out of it
  REQUIRE(m.begin_message(1, {8, 2}, claimed.size()) == landing::early);
  m.deliver(1, std::span(claimed).first(10));
  auto rc = m.post_recv(1, {8, 2}, c);  // claims the message while it arrives
  m.deliver(1, std::span(claimed).subspan(10));
  auto rb = m.post_recv(1, {8, 1}, b);
  CHECK(done(m, ra));
  CHECK(done(m, rb));
  CHECK(done(m, rc));
  CHECK(a == posted);
  CHECK(b == early);
  CHECK(c == claimed);
  CHECK(books.copied == posted.size() + 2 * early.size() + 2 * claimed.size());
  CHECK(books.taken == 2);
  CHECK(books.given_back == 2);
}
