// Which ranks of a tcp group go on after a loss, agreed by every survivor, and the
// connections the new group starts with.
//
// The old connections may be out of step (a transfer given up halfway), so a shrink
// opens new ones through each rank's door (door.hpp): each rank connects to the lower
// ranks and admits the higher ones, and knocks now and then at the door of a higher
// rank that has not come yet. A rank is taken to have failed when nobody opens its
// door or it ends its connection. That is a perfect failure detector as long as ranks
// fail by exiting: the kernel closes a dead process's sockets.
//
// Over these connections the survivors run flooding consensus (Cachin, Guerraoui and
// Rodrigues, "Reliable and Secure Distributed Programming", algorithm 5.1), proposing
// the ranks each knows to have failed. In each round every rank sends what it has
// gathered to all; a rank that has heard from every rank not failed, from the same
// ranks as in the round before, decides the union and tells everyone, and whoever
// hears a decision takes it. So every survivor decides the same set, however many
// ranks fail meanwhile. A rank that fails after the decision is still in the new
// group, which then reports it lost (docs/fault-tolerance.md).
//
// A decision is the last message a rank sends on a connection, and each rank reads
// a connection only up to its peer's decision, so the new group's frames follow on
// the same connections with nothing of the agreement left in between.
//
// The group's `Door` is what the agreement needs of the group it leaves: its io(), every
// rank's doors(), the job's token(), its epoch(), and its visitors (on_agreement,
// early_agreements). The tcp engine is one; rdma keeps a door of its own (rdma/door.hpp),
// with meanwhile(), which moves the old group's messages (the news of its abort) while
// the agreement runs.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "../../bootstrap/auth.hpp"
#include "../../error.hpp"
#include "../../log.hpp"
#include "door.hpp"
#include "frame.hpp"

namespace collectives::tcp_detail {

using rank_set = std::vector<bool>;

struct shrink_request {
  int rank = 0, size = 1;
  std::uint32_t attempt = 1;  // counted alike on every survivor
  deadline until{};
};

struct shrink_outcome {
  std::vector<int> survivors;                        // old ranks, in order
  std::vector<std::shared_ptr<tcp::socket>> sockets;  // by old rank: to each other survivor
};

namespace shrink_steps {

// An agreement message: magic, kind, round, words; then a bit per rank in 64-bit words.
enum class message_kind : std::uint32_t { proposal = 1, decided = 2 };
inline constexpr std::uint32_t message_magic = 0xC0115A4Eu;
inline constexpr std::size_t header_bytes = 16;

struct peer_link {
  std::shared_ptr<tcp::socket> socket;
  bool failed = false;   // refused, ended, or its old link ended first
  bool decided = false;  // its decision has arrived: nothing more is read from it
  bool knocking = false; // at its door, to see that it lives
  bool heard = false;    // something came from it on this connection
  unsigned connection = 0;  // which connection: handlers of one given up do nothing
  std::array<unsigned char, header_bytes> header{};
  std::vector<unsigned char> payload;
  std::deque<std::vector<unsigned char>> outbox;
  bool writing = false;
};

template <class Door>
struct agreement : std::enable_shared_from_this<agreement<Door>> {
  using std::enable_shared_from_this<agreement<Door>>::shared_from_this;
  asio::io_context& io;
  Door& old;
  shrink_request request;
  std::vector<peer_link> peers;
  asio::steady_timer timer;
  bool connecting = true;
  // Flooding consensus, by round; round 0 has heard from everyone.
  int round = 1;
  std::vector<rank_set> heard_from, proposals;
  std::optional<rank_set> decision;
  std::vector<std::vector<unsigned char>> sent;  // this rank's messages so far, for a peer that comes again
  std::string failure;
  bool done = false;  // the shrink has returned: handlers that still run do nothing

  agreement(Door& e, shrink_request r) : io(e.io()), old(e), request(r), peers(std::size_t(request.size)), timer(io) {
    heard_from.emplace_back(std::size_t(request.size), true);
    proposals.emplace_back(std::size_t(request.size), false);
  }

  std::string who() const { return "tcp rank " + std::to_string(request.rank) + ": shrink: "; }
  std::size_t words() const { return (std::size_t(request.size) + 63) / 64; }
  bool other(int p) const { return p != request.rank; }

  rank_set& at(std::vector<rank_set>& by_round, int r) {
    while (int(by_round.size()) <= r) by_round.emplace_back(std::size_t(request.size), false);
    return by_round[std::size_t(r)];
  }

  // ---- failures ---------------------------------------------------------------

  void fail_peer(int p, const std::string& why) {
    peer_link& l = peers[std::size_t(p)];
    if (l.failed || l.decided) return;
    log::debug(who() + "rank " + std::to_string(p) + " failed: " + why);
    l.failed = true;
    if (l.socket) {
      boost::system::error_code ignored;
      l.socket->close(ignored);
    }
    evaluate();
  }
  bool connected(int p) const { return peers[std::size_t(p)].socket != nullptr; }

  // ---- messages -----------------------------------------------------------------

  std::vector<unsigned char> encode(message_kind kind, int r, const rank_set& set) const {
    std::vector<unsigned char> m(header_bytes + words() * 8, 0);
    wire::put(m.data(), message_magic, 4);
    wire::put(m.data() + 4, std::uint32_t(kind), 4);
    wire::put(m.data() + 8, std::uint32_t(r), 4);
    wire::put(m.data() + 12, std::uint32_t(words()), 4);
    for (std::size_t q = 0; q < set.size(); ++q)
      if (set[q]) m[header_bytes + q / 8] |= static_cast<unsigned char>(1u << (q % 8));
    return m;
  }

  void send_to_all(message_kind kind, int r, const rank_set& set) {
    const auto m = encode(kind, r, set);
    sent.push_back(m);
    for (int p = 0; p < request.size; ++p) {
      peer_link& l = peers[std::size_t(p)];
      if (!other(p) || !l.socket || l.failed) continue;
      l.outbox.push_back(m);
      write_next(p);
    }
  }

  void write_next(int p) {
    peer_link& l = peers[std::size_t(p)];
    if (l.writing || l.outbox.empty() || l.failed) return;
    l.writing = true;
    asio::async_write(*l.socket, asio::buffer(l.outbox.front()), [this, self = shared_from_this(), p, c = l.connection](const boost::system::error_code& ec, std::size_t) {
      if (done || peers[std::size_t(p)].connection != c) return;
      peer_link& link = peers[std::size_t(p)];
      link.writing = false;
      if (ec) {
        link.outbox.clear();  // nothing more goes to it, even if it decided before it went
        return fail_peer(p, "writing to it: " + ec.message());
      }
      link.outbox.pop_front();
      write_next(p);
    });
  }

  void read_next(int p) {
    peer_link& l = peers[std::size_t(p)];
    asio::async_read(*l.socket, asio::buffer(l.header), [this, self = shared_from_this(), p, c = l.connection](const boost::system::error_code& ec, std::size_t) {
      if (done || peers[std::size_t(p)].connection != c) return;
      peer_link& link = peers[std::size_t(p)];
      if (ec) return ended(p, ec);
      link.heard = true;
      const auto kind = static_cast<message_kind>(wire::get(link.header.data() + 4, 4));
      if (wire::get(link.header.data(), 4) != message_magic || wire::get(link.header.data() + 12, 4) != words() ||
          (kind != message_kind::proposal && kind != message_kind::decided) ||
          wire::get(link.header.data() + 8, 4) > std::uint64_t(request.size) + 1) {
        log::warn(who() + "rank " + std::to_string(p) + " sent a malformed message");
        return fail_peer(p, "a malformed message");
      }
      link.payload.resize(words() * 8);
      asio::async_read(*link.socket, asio::buffer(link.payload), [this, self, p, c, kind](const boost::system::error_code& payload_ec, std::size_t) {
        if (done || peers[std::size_t(p)].connection != c) return;
        if (payload_ec) return fail_peer(p, "reading from it: " + payload_ec.message());
        peer_link& from = peers[std::size_t(p)];
        rank_set set(std::size_t(request.size), false);
        for (std::size_t q = 0; q < set.size(); ++q) set[q] = (from.payload[q / 8] >> (q % 8)) & 1;
        if (kind == message_kind::decided) {
          from.decided = true;  // its last message: what follows belongs to the new group
          if (!decision) decide(set);
          return evaluate();
        }
        const int r = int(wire::get(from.header.data() + 8, 4));
        at(heard_from, r)[std::size_t(p)] = true;
        unite(at(proposals, r), set);
        read_next(p);
        evaluate();
      });
    });
  }

  // A lower rank that let this one in, then closed before it said anything, was passing
  // from one group to the next and dropped the visit: come again, and say again what
  // was said (a refused door then means it died). Anything else ends the peer.
  void ended(int p, const boost::system::error_code& ec) {
    peer_link& l = peers[std::size_t(p)];
    if (p > request.rank || l.heard || l.failed || l.decided) return fail_peer(p, "reading from it: " + ec.message());
    log::debug(who() + "rank " + std::to_string(p) + " dropped this rank's visit (" + ec.message() + "); coming again");
    boost::system::error_code ignored;
    l.socket->close(ignored);
    l.socket.reset();
    l.outbox.clear();
    l.writing = false;
    ++l.connection;
    auto again = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(20));
    again->async_wait([this, self = shared_from_this(), p, again](const boost::system::error_code&) {
      if (!done && !peers[std::size_t(p)].failed && clock::now() < request.until) connect_to(p);
    });
  }

  static void unite(rank_set& into, const rank_set& from) {
    for (std::size_t q = 0; q < into.size(); ++q) into[q] = into[q] || from[q];
  }

  // ---- flooding consensus ------------------------------------------------------

  void propose(int r, rank_set set) {  // a copy: `at` may move what a reference points into
    at(heard_from, r)[std::size_t(request.rank)] = true;  // this rank hears itself
    unite(at(proposals, r), set);
    send_to_all(message_kind::proposal, r, set);
  }

  void decide(const rank_set& set) {
    decision = set;
    send_to_all(message_kind::decided, round, set);
  }

  // Once every peer is connected or failed, one without a connection is coming again.
  bool failed(int p) const { return other(p) && peers[std::size_t(p)].failed; }

  void evaluate() {
    if (decision) return;  // a decision is the last message a rank sends
    if (connecting) {
      for (int p = 0; p < request.size; ++p)
        if (other(p) && !connected(p) && !peers[std::size_t(p)].failed) return;
      connecting = false;
      rank_set known(std::size_t(request.size), false);
      for (int p = 0; p < request.size; ++p) known[std::size_t(p)] = failed(p);
      propose(1, known);
    }
    for (;;) {
      const rank_set& now = at(heard_from, round);
      for (int p = 0; p < request.size; ++p)
        if (!failed(p) && !peers[std::size_t(p)].decided && !now[std::size_t(p)]) return;
      if (now == at(heard_from, round - 1)) return decide(at(proposals, round));
      ++round;
      propose(round, at(proposals, round - 1));
    }
  }

  // True once every survivor's decision is in (or it failed) and this rank's messages
  // are all written.
  bool finished() const {
    if (!decision) return false;
    for (int p = 0; p < request.size; ++p) {
      if (!other(p)) continue;
      const peer_link& l = peers[std::size_t(p)];
      if (l.failed) continue;
      if (!l.outbox.empty() || (!(*decision)[std::size_t(p)] && !l.decided)) return false;
    }
    return true;
  }

  // ---- connections ----------------------------------------------------------------

  void joined(int p, std::shared_ptr<tcp::socket> socket) {
    boost::system::error_code ignored;
    socket->set_option(tcp::no_delay(true), ignored);
    socket->set_option(asio::socket_base::keep_alive(true), ignored);
    peer_link& l = peers[std::size_t(p)];
    l.socket = std::move(socket);
    l.heard = false;
    read_next(p);
    if (decision) {  // decided already, on what others said: this rank's decision is all it sends
      l.outbox.push_back(encode(message_kind::decided, round, *decision));
    } else {  // a rank that comes again: what it missed
      l.outbox.insert(l.outbox.end(), sent.begin(), sent.end());
    }
    write_next(p);
    evaluate();
  }

  std::chrono::milliseconds left() const {
    return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(request.until - clock::now()),
                    std::chrono::milliseconds(1));
  }

  // A lower rank: this rank comes to it. A door that opens lives, even if the
  // handshake fails (the rank was passing from one group to the next): come again.
  void connect_to(int p) {
    knock(io, old.doors()[std::size_t(p)], old.token(), {visit_kind::agree, request.rank, request.attempt}, left(),
          [this, self = shared_from_this(), p](std::shared_ptr<tcp::socket> socket, bool reached) {
            if (done || peers[std::size_t(p)].failed) return;
            if (!reached) return fail_peer(p, "nobody opened its door");
            if (socket) return joined(p, std::move(socket));
            auto again = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(20));
            again->async_wait([this, self, p, again](const boost::system::error_code&) {
              if (!done && clock::now() < request.until) connect_to(p);
            });
          });
  }

  // A higher rank came to this one; or a rank already at a later attempt (of the group
  // this one will make), whose visit waits for that attempt.
  void visited(visitor v) {
    if (v.attempt > request.attempt) return old.early_agreements.push_back(std::move(v));
    const bool fits = v.attempt == request.attempt && v.rank > request.rank && v.rank < request.size && !connected(v.rank) &&
                      !peers[std::size_t(v.rank)].failed;
    if (fits) return joined(v.rank, std::move(v.socket));
    log::debug(who() + "turned away rank " + std::to_string(v.rank) + " (attempt " + std::to_string(v.attempt) + ")");
    boost::system::error_code ignored;
    v.socket->close(ignored);
  }

  // A higher rank that has not come: is anyone home?
  void knock_at(int p) {
    if (std::exchange(peers[std::size_t(p)].knocking, true)) return;
    knock(io, old.doors()[std::size_t(p)], old.token(), {visit_kind::notice, request.rank, old.epoch()}, left(),
          [this, self = shared_from_this(), p](std::shared_ptr<tcp::socket> socket, bool reached) {
            if (socket) close_quietly(*socket);
            if (done) return;
            peers[std::size_t(p)].knocking = false;
            if (!reached) fail_peer(p, "nobody opened its door");
          });
  }

  // Now and then: knock at the doors of the higher ranks that have not come.
  void watch() {
    for (int p = request.rank + 1; p < request.size; ++p)
      if (!connected(p) && !peers[std::size_t(p)].failed) knock_at(p);
    if (finished()) return;
    if (clock::now() >= request.until) {
      const std::string missing = detail::ranks_missing(request.size, [&](int p) {
        return other(p) && !peers[std::size_t(p)].failed && (connecting ? !connected(p) : !peers[std::size_t(p)].decided);
      });
      failure = who() + "timed out waiting for rank(s) " + missing + ", which live but did not answer";
      return;
    }
    timer.expires_after(std::chrono::milliseconds(50));
    timer.async_wait([this, self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec && !done) watch();
    });
  }
};

}  // namespace shrink_steps

// Runs the agreement on the old engine's io_context, whose door admits the higher
// ranks. Throws errc::timeout when a live rank does not take part by the deadline.
template <class Door>
shrink_outcome agree_on_survivors(Door& old, shrink_request request) {
  using namespace shrink_steps;
  const auto a = std::make_shared<agreement<Door>>(old, request);
  for (int p = 0; p < request.rank; ++p) a->connect_to(p);
  old.on_agreement = [a](visitor v) { a->visited(std::move(v)); };
  for (auto& v : std::exchange(old.early_agreements, {})) a->visited(std::move(v));
  a->watch();
  a->evaluate();
  while (!a->finished() && a->failure.empty()) {
    if constexpr (requires { old.meanwhile(); }) {  // the group's messages move elsewhere (rdma's fabric): the abort's news too
      old.meanwhile();
      old.io().run_one_for(std::chrono::milliseconds(1));
    } else {
      old.io().run_one_until(request.until + std::chrono::milliseconds(50));
    }
  }

  shrink_outcome out;
  out.sockets.resize(std::size_t(request.size));
  if (a->failure.empty())
    for (int p = 0; p < request.size; ++p) {
      if ((*a->decision)[std::size_t(p)]) continue;
      out.survivors.push_back(p);
      if (p != request.rank) out.sockets[std::size_t(p)] = std::move(a->peers[std::size_t(p)].socket);
    }
  // Every other step of the agreement stops; its handlers run now and do nothing.
  a->done = true;
  old.on_agreement = nullptr;
  a->timer.cancel();
  boost::system::error_code ignored;
  for (auto& l : a->peers)
    if (l.socket) l.socket->close(ignored);
  old.io().poll();
  if (!a->failure.empty()) throw error(errc::timeout, a->failure);
  return out;
}

}  // namespace collectives::tcp_detail
