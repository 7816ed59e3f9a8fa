// What a program may set for the tcp transport, apart from the transport, so that
// automatic_transport's options name it without bringing Asio or OpenSSL.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>

#include "../../bootstrap/job_token.hpp"
#include "../../settings.hpp"
#include "../detail/matching.hpp"

namespace collectives {
namespace tcp_detail {

struct engine_limits {
  transport_detail::early_limits early{};      // frames kept in memory before their receive is posted
  std::size_t piece_bytes = 256 * 1024;        // a fused receive reduces at most this much at once
  std::size_t inbox_bytes = 64 * 1024;         // what one read takes in, headers and small payloads
  std::chrono::microseconds poll_time{50};     // how long a wait polls before it sleeps
};

}  // namespace tcp_detail

struct tcp_options {
  // An interface name ("eth0") or a local address to listen on; empty: the interface
  // that routes to `route_to` (so ranks reach each other the way they reach the store).
  std::string interface;
  std::string route_to;  // a host; join() sets the master's, empty means this host's name
  std::chrono::milliseconds startup_timeout{std::chrono::seconds{60}};
  std::chrono::milliseconds handshake_limit = auth::default_handshake_limit;
  tcp_detail::engine_limits limits{};

  // COLLECTIVES_SOCKET_IFNAME and COLLECTIVES_STARTUP_TIMEOUT (seconds).
  static tcp_options from_env() {
    tcp_options o;
    if (auto name = settings::text("COLLECTIVES_SOCKET_IFNAME")) o.interface = std::move(*name);
    if (auto t = settings::seconds("COLLECTIVES_STARTUP_TIMEOUT")) o.startup_timeout = *t;
    return o;
  }
};

}  // namespace collectives
