// Start-up of the TCP transport: every rank listens, publishes its address in the
// store, connects to each lower rank and accepts each higher one, so that every pair
// of ranks shares one authenticated connection. Strangers that connect meanwhile are
// refused and logged; the start-up goes on for the ranks that belong.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "../../bootstrap/auth.hpp"
#include "../../bootstrap/host_identity.hpp"
#include "../../bootstrap/limited_warnings.hpp"
#include "../../bootstrap/store.hpp"
#include "../../concepts/transport.hpp"
#include "../../error.hpp"
#include "../../log.hpp"
#include "address.hpp"

namespace collectives::tcp_detail {

struct mesh_options {
  std::chrono::milliseconds handshake_limit = auth::default_handshake_limit;
};

struct mesh {
  std::vector<std::shared_ptr<tcp::socket>> peers;  // by rank; null for this rank
  tcp::endpoint listened_on;
  std::vector<std::string> addresses;  // every rank's published record (address.hpp)
  // Still listening: the rank's door for the group's life (door.hpp).
  std::shared_ptr<tcp::acceptor> acceptor;
};

namespace mesh_steps {

// The 64-bit value a connecting rank vouches for in its handshake.
inline std::uint64_t hello_of(int rank, int size) { return std::uint64_t(std::uint32_t(rank)) | std::uint64_t(size) << 32; }

// What the start-up shares between its asynchronous steps.
struct state {
  int rank, size;
  auth::job_token token;
  mesh_options options;
  deadline until;
  tcp::acceptor acceptor;
  mesh result;
  int missing = 0;           // connections not yet made
  std::string failure;       // set when the start-up cannot succeed
  errc failure_code = errc::timeout;
  bool finished = false;
  bootstrap::limited_warnings refusals;  // a stranger may knock as often as it likes

  state(asio::io_context& io, int r, int s, auth::job_token t, mesh_options o, deadline u)
      : rank(r), size(s), token(std::move(t)), options(o), until(u), acceptor(io),
        refusals("rank " + std::to_string(r) + ": refused connections") {}

  void fail(errc code, std::string why) {
    if (!failure.empty()) return;
    failure_code = code;
    failure = std::move(why);
  }
  void joined(int peer, std::shared_ptr<tcp::socket> socket) {
    boost::system::error_code ignored;
    socket->set_option(tcp::no_delay(true), ignored);  // small messages go out at once
    socket->set_option(asio::socket_base::keep_alive(true), ignored);
    result.peers[static_cast<std::size_t>(peer)] = std::move(socket);
    --missing;
  }
};

inline void accept_next(std::shared_ptr<state> s) {
  auto socket = std::make_shared<tcp::socket>(s->acceptor.get_executor());
  s->acceptor.async_accept(*socket, [s, socket](const boost::system::error_code& ec) {
    if (s->finished || ec == asio::error::operation_aborted) return;
    if (!ec) {
      boost::system::error_code ignored;
      const auto from = socket->remote_endpoint(ignored);
      auth::async_admit(socket, s->token, auth::purpose::peer, [s, socket, from](auth::outcome o) {
        const auto peer = static_cast<int>(o.hello & 0xFFFFFFFFu);
        const auto size = static_cast<int>(o.hello >> 32);
        std::string why = o.why;
        if (o.accepted && size != s->size) why = "it belongs to a group of " + std::to_string(size);
        else if (o.accepted && (peer <= s->rank || peer >= s->size)) why = "it claims rank " + std::to_string(peer) + ", which does not connect to this rank";
        else if (o.accepted && s->result.peers[std::size_t(peer)]) why = "rank " + std::to_string(peer) + " is connected already";
        else if (o.accepted && s->finished) why = "the group is complete";
        if (why.empty()) return s->joined(peer, socket);
        s->refusals.warn("rank " + std::to_string(s->rank) + " refused a connection from " + format_endpoint(from) + ": " + why);
        boost::system::error_code ignore;
        socket->close(ignore);
      }, s->options.handshake_limit);
    }
    if (s->missing > 0) accept_next(s);  // keep the door open only while ranks are missing
  });
}

inline void connect_to(std::shared_ptr<state> s, int peer, tcp::endpoint where, std::chrono::milliseconds backoff) {
  auto socket = std::make_shared<tcp::socket>(s->acceptor.get_executor());
  socket->async_connect(where, [s, socket, peer, where, backoff](const boost::system::error_code& ec) {
    if (s->finished) return;
    if (ec) {  // not listening yet, or a transient failure: try again later, until the deadline
      if (clock::now() + backoff >= s->until)
        return s->fail(errc::timeout, "could not connect to rank " + std::to_string(peer) + " at " +
                                          format_endpoint(where) + ": " + ec.message());
      auto timer = std::make_shared<asio::steady_timer>(s->acceptor.get_executor(), backoff);
      timer->async_wait([s, timer, peer, where, backoff](const boost::system::error_code&) {
        connect_to(s, peer, where, std::min(backoff * 2, std::chrono::milliseconds{1000}));
      });
      return;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(s->until - clock::now());
    auth::async_introduce(socket, s->token, auth::purpose::peer, hello_of(s->rank, s->size),
                          [s, socket, peer](auth::outcome o) {
                            if (s->finished) return;
                            if (!o.accepted)
                              return s->fail(errc::unauthorized, "rank " + std::to_string(peer) + " did not admit rank " +
                                                                     std::to_string(s->rank) + ": " + o.why);
                            s->joined(peer, socket);
                          },
                          std::max(left, std::chrono::milliseconds{1}));
  });
}

}  // namespace mesh_steps

// Connects this rank to every other; `io` then owns the connections' I/O. Throws
// errc::timeout when a rank does not show up before `until`, and errc::unauthorized
// when another rank refuses this one's token.
inline mesh connect_mesh(asio::io_context& io, int rank, int size, bootstrap::key_value_store& store,
                         const std::string& key_prefix, const auth::job_token& token, const local_interface& where,
                         deadline until, mesh_options options = {}) {
  using namespace mesh_steps;
  auto s = std::make_shared<state>(io, rank, size, token, options, until);
  s->result.peers.resize(static_cast<std::size_t>(size));
  s->missing = size - 1;
  s->acceptor.open(where.address.is_v6() ? tcp::v6() : tcp::v4());
  s->acceptor.bind({where.address, 0});
  s->acceptor.listen();
  s->result.listened_on = s->acceptor.local_endpoint();
  store.set(key_prefix + std::to_string(rank), format_record(s->result.listened_on, bootstrap::host_fingerprint()));

  // Handshakes run from the first moment, while another thread looks up the lower
  // ranks in the store (which may wait for them to start), so nobody who connects
  // early, rank or stranger, waits on this rank's lookups.
  if (rank + 1 < size) accept_next(s);
  std::jthread lookup([s, &store, &io, key_prefix, rank, until] {
    try {
      for (int peer = 0; peer < rank; ++peer) {
        const auto peer_endpoint = parse_endpoint(endpoint_of_record(store.get(key_prefix + std::to_string(peer), until)));
        asio::post(io, [s, peer, peer_endpoint] { connect_to(s, peer, peer_endpoint, std::chrono::milliseconds{10}); });
      }
    } catch (const error& e) {  // a rank that never published, or published garbage: say which
      const auto code = static_cast<errc>(e.code().value());
      asio::post(io, [s, code, why = std::string(e.what())] { s->fail(code, why); });
    } catch (const std::exception& e) {
      asio::post(io, [s, why = std::string(e.what())] { s->fail(errc::timeout, why); });
    }
  });
  while (s->missing > 0 && s->failure.empty() && clock::now() < until) io.run_one_until(until);
  lookup.join();
  io.poll();  // connects the lookup posted after the loop ended, so they see `finished`
  s->finished = true;
  boost::system::error_code ignored;
  s->acceptor.cancel(ignored);
  io.poll();  // the cancelled accept's handler, which sees `finished`
  if (!s->failure.empty()) throw error(s->failure_code, "rank " + std::to_string(rank) + ": start-up failed: " + s->failure);
  if (s->missing > 0) {
    const std::string absent =
        detail::ranks_missing(size, [&](int r) { return r != rank && !s->result.peers[std::size_t(r)]; });
    throw error(errc::timeout, "rank " + std::to_string(rank) + ": start-up timed out; no connection with rank(s) " + absent);
  }
  // Everyone published before connecting, so these are all there now.
  s->result.addresses.resize(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) s->result.addresses[std::size_t(r)] = store.get(key_prefix + std::to_string(r), until);
  s->result.acceptor = std::make_shared<tcp::acceptor>(std::move(s->acceptor));
  return std::move(s->result);
}

}  // namespace collectives::tcp_detail
