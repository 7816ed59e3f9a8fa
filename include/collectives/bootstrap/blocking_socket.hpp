// Blocking use of an Asio socket with deadlines, for the store clients (tcp_store.hpp,
// c10d_store.hpp): each wait runs the client's own io_context until its operation
// finishes or the deadline passes. On the deadline the socket is closed and the
// aborted handlers run there too, so none outlives the caller's frame.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "../concepts/transport.hpp"
#include "tcp_store_protocol.hpp"

namespace collectives::bootstrap::detail {

inline constexpr char no_answer_text[] = "no answer before the deadline";

inline void close_socket(boost::asio::ip::tcp::socket& socket) {
  boost::system::error_code ignored;
  socket.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
  socket.close(ignored);
}

// Runs `io` until `finished` or `until`; true when it finished.
inline bool run_until(boost::asio::io_context& io, boost::asio::ip::tcp::socket& socket, deadline until,
                      const bool& finished) {
  io.restart();
  io.run_until(until);
  if (finished) return true;
  close_socket(socket);
  io.restart();
  io.run();
  return false;
}

// One try at connecting to host:port before `until`: an address, or a name resolved
// afresh on each try, since its record may appear late. The connected socket, or null
// with the reason in `last_error`.
inline std::shared_ptr<boost::asio::ip::tcp::socket> connect_before(boost::asio::io_context& io,
                                                                    const std::string& host, std::uint16_t port,
                                                                    deadline until, std::string& last_error) {
  using boost::asio::ip::tcp;
  boost::system::error_code ec;
  std::vector<tcp::endpoint> endpoints;
  if (const auto address = boost::asio::ip::make_address(host, ec); !ec) {
    endpoints.emplace_back(address, port);
  } else {
    tcp::resolver resolver(io);
    bool finished = false;
    resolver.async_resolve(host, std::to_string(port), [&](auto error, auto results) {
      finished = true;
      ec = error;
      for (const auto& entry : results) endpoints.push_back(entry.endpoint());
    });
    io.restart();
    io.run_until(until);
    if (!finished) {  // the lookup itself cannot be interrupted: this waits for the resolver's own timeout
      resolver.cancel();
      io.restart();
      io.run();
    }
    if (ec || endpoints.empty()) {
      last_error = "could not resolve " + host + ": " + (ec ? ec.message() : "no addresses");
      return nullptr;
    }
  }
  for (const auto& endpoint : endpoints) {
    auto socket = std::make_shared<tcp::socket>(io);
    bool finished = false;
    socket->async_connect(endpoint, [&](auto error) {
      finished = true;
      ec = error;
    });
    if (run_until(io, *socket, until, finished) && !ec) return socket;
    last_error = endpoint_text(endpoint) + ": " + (finished ? ec.message() : no_answer_text);
    close_socket(*socket);
  }
  return nullptr;
}

}  // namespace collectives::bootstrap::detail
