// Each rank's door: the socket it listened on at start-up, kept open for the group's
// life (mesh.hpp). The group's connections can fall out of step after a failure (a
// transfer given up halfway), and a rank may then have no connection left that could
// carry news. The door still can: a rank knocks, proves it holds the job's token,
// and says who it is and why it came:
//   notice  the group is aborted (revoked) by this rank;
//   agree   this rank shrinks the group (shrink.hpp); the connection stays open for
//           the agreement, and tells of the abort too;
//   report  this rank's first failure (a failure frame follows), for a peer whose
//           connection is out of step; the door answers one byte once it has taken it.
// A knock that nobody answers (the connection is refused) means the rank's process
// has gone: the kernel closes a dead process's door.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include <boost/asio/ip/tcp.hpp>

#include "../../bootstrap/auth.hpp"

namespace collectives::tcp_detail {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

enum class visit_kind : std::uint8_t { notice = 1, agree = 2, report = 3 };

// What a visitor vouches for in its handshake: rank, shrink attempt, kind.
struct visit {
  visit_kind kind = visit_kind::notice;
  int rank = -1;
  std::uint32_t attempt = 0;  // below 2^24

  std::uint64_t hello() const {
    return std::uint64_t(std::uint32_t(rank)) | std::uint64_t(attempt & 0xFFFFFFu) << 32 | std::uint64_t(kind) << 56;
  }
  static visit of(std::uint64_t hello) {
    return {visit_kind(hello >> 56), int(std::uint32_t(hello)), std::uint32_t(hello >> 32) & 0xFFFFFFu};
  }
};

// A visitor admitted to shrink the group: who, for which attempt, and its connection.
struct visitor {
  int rank;
  std::uint32_t attempt;
  std::shared_ptr<tcp::socket> socket;
};

inline void close_quietly(tcp::socket& socket) {
  boost::system::error_code ignored;
  socket.close(ignored);
}

// Knocks at `where` and introduces `who`: done(socket, true) once admitted (the caller
// keeps or closes it); done(nullptr, true) when the door opened but the handshake
// failed or took longer than `limit`; done(nullptr, false) when nobody opened.
inline void knock(asio::io_context& io, const tcp::endpoint& where, const auth::job_token& token, visit who,
                  std::chrono::milliseconds limit, std::function<void(std::shared_ptr<tcp::socket>, bool)> done) {
  auto socket = std::make_shared<tcp::socket>(io);
  socket->async_connect(where, [socket, token, who, limit, done = std::move(done)](const boost::system::error_code& ec) {
    if (ec) return done(nullptr, false);
    auth::async_introduce(socket, token, auth::purpose::shrink, who.hello(), [socket, done](auth::outcome o) {
      done(o.accepted ? socket : nullptr, true);
    }, limit);
  });
}

}  // namespace collectives::tcp_detail
