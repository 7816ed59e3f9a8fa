// The TCP store's server: one thread with its own io_context serves every client
// asynchronously, so a few hundred ranks cost it one thread. Each connection must pass
// the job-token handshake (auth.hpp) before its first request is read; after that it
// speaks the frames of tcp_store_protocol.hpp, one request and one reply at a time.
// A get or wait of a key nobody has set yet is parked until some client sets it or the
// request's timeout passes. A connection that breaks the protocol is closed and logged,
// and affects no other.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "../error.hpp"
#include "../log.hpp"
#include "auth.hpp"
#include "limited_warnings.hpp"
#include "store.hpp"
#include "tcp_store_protocol.hpp"

namespace collectives::bootstrap {

namespace detail {

class store_connection;

using store_data = std::unordered_map<std::string, std::string>;

// What the server does with a request, apart from any socket: the reply, or that the
// request waits for its key. `changed`: a set or add stored something, so the
// requests parked on the key wake.
struct store_answer {
  store_status status = store_status::ok;
  std::string value;
  bool parks = false;
  bool changed = false;
};

// `h` has passed parse_request, and `key` and `value` have its sizes.
inline store_answer answer_request(store_data& data, const request_header& h, const std::string& key,
                                   std::string value) {
  const auto found = data.find(key);
  switch (h.op) {
    case store_op::set:
      data.insert_or_assign(key, std::move(value));
      return {store_status::ok, {}, false, true};
    case store_op::get:
    case store_op::wait:
      if (found != data.end()) return {store_status::ok, h.op == store_op::get ? found->second : std::string()};
      if (h.timeout_ms == 0) return {store_status::timed_out, {}};
      return {store_status::ok, {}, true};
    case store_op::check:
      return {found != data.end() ? store_status::ok : store_status::absent, {}};
    case store_op::add: {
      std::int64_t now = 0;
      if (found != data.end()) {
        const auto current = parse_counter(found->second);
        if (!current) return {store_status::not_integer, {}};
        now = *current;
      }
      now = wrapping_add(now, static_cast<std::int64_t>(get_u64(value.data())));
      data.insert_or_assign(key, std::to_string(now));
      std::string answer(8, '\0');
      put_u64(answer.data(), static_cast<std::uint64_t>(now));
      return {store_status::ok, std::move(answer), false, true};
    }
  }
  return {store_status::absent, {}};  // parse_request admits no other operation
}

// The server's state; lives on, and is touched only by, the server's thread.
struct store_server_core {
  std::atomic<int> clients{0};  // admitted connections; first, so that it outlives those the io_context destroys
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> keep_running{io.get_executor()};
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_retry{io};
  auth::job_token token;
  std::chrono::milliseconds handshake_limit;
  std::uint16_t port = 0;
  store_data data;
  std::unordered_map<std::string, std::vector<std::weak_ptr<store_connection>>> waiting;  // parked requests by key
  limited_warnings refusals{"store: refused connections"};  // a stranger may knock as often as it likes

  store_server_core(auth::job_token t, std::chrono::milliseconds limit) : token(std::move(t)), handshake_limit(limit) {}
  inline void accept();
  inline void publish(const std::string& key);
  inline void forget(const std::string& key, const store_connection* who);
};

// One admitted client: reads a request, answers it (perhaps after parking it), reads
// the next. Exactly one socket operation is outstanding at any time.
class store_connection : public std::enable_shared_from_this<store_connection> {
 public:
  store_connection(store_server_core& server, std::shared_ptr<tcp::socket> socket, std::string peer)
      : server_(server), socket_(std::move(socket)), timer_(server.io), peer_(std::move(peer)) {
    ++server_.clients;
  }
  ~store_connection() { --server_.clients; }
  store_connection(const store_connection&) = delete;
  store_connection& operator=(const store_connection&) = delete;

  void read_request() {
    state_ = state::reading;
    asio::async_read(*socket_, asio::buffer(header_), [self = shared_from_this()](auto ec, std::size_t) {
      if (ec) return self->close(self->hung_up(ec) ? "" : "reading a request failed: " + ec.message());
      const std::string why = parse_request(self->header_, self->request_);
      if (!why.empty()) return self->close(why);
      // The sizes are within the limits now, so allocating them is safe.
      self->key_.assign(self->request_.key_size, '\0');
      self->value_.assign(self->request_.value_size, '\0');
      std::array<asio::mutable_buffer, 2> body{asio::buffer(self->key_), asio::buffer(self->value_)};
      asio::async_read(*self->socket_, body, [self](auto body_ec, std::size_t) {
        if (body_ec) return self->close(self->hung_up(body_ec) ? "" : "reading a request failed: " + body_ec.message());
        self->serve();
      });
    });
  }

  // The key this connection's parked request waits for has been set.
  void key_was_set() {
    if (state_ == state::parked) stop_parking(store_status::ok);
  }

 private:
  enum class state { reading, parked, answering, closed };

  void serve() {
    store_answer answer = answer_request(server_.data, request_, key_, std::move(value_));
    if (answer.changed) server_.publish(key_);
    if (answer.parks) return park();
    reply(answer.status, std::move(answer.value));
  }

  void reply(store_status status, std::string value) {
    state_ = state::answering;
    put_reply_header(reply_header_, status, static_cast<std::uint32_t>(value.size()));
    reply_value_ = std::move(value);
    std::array<asio::const_buffer, 2> out{asio::buffer(reply_header_), asio::buffer(reply_value_)};
    asio::async_write(*socket_, out, [self = shared_from_this()](auto ec, std::size_t) {
      if (ec) return self->close(self->hung_up(ec) ? "" : "writing a reply failed: " + ec.message());
      self->read_request();
    });
  }

  // Waits for the key, or the request's timeout, while watching the socket: a client
  // that hangs up while parked is forgotten at once instead of at its timeout.
  void park() {
    state_ = state::parked;
    server_.waiting[key_].push_back(weak_from_this());
    timer_.expires_after(std::chrono::milliseconds(request_.timeout_ms));
    timer_.async_wait([self = shared_from_this()](auto ec) {
      if (ec || self->state_ != state::parked) return;
      self->stop_parking(store_status::timed_out);
    });
    socket_->async_wait(tcp::socket::wait_read, [self = shared_from_this()](auto) { self->socket_woke(); });
  }

  // Ends the parking; the answer goes out once the socket watch has been cancelled,
  // so that the socket never has two operations of this connection outstanding.
  void stop_parking(store_status status) {
    server_.forget(key_, this);
    state_ = state::answering;
    parked_status_ = status;
    timer_.cancel();
    boost::system::error_code ignored;
    socket_->cancel(ignored);
  }

  void socket_woke() {
    if (state_ == state::answering) {
      const auto found = server_.data.find(key_);
      const bool with_value =
          parked_status_ == store_status::ok && request_.op == store_op::get && found != server_.data.end();
      return reply(parked_status_, with_value ? found->second : "");
    }
    if (state_ != state::parked) return;
    // Readable while parked: the client hung up, or broke the protocol by speaking.
    boost::system::error_code ec;
    const bool spoke = socket_->available(ec) > 0;
    close(spoke ? "sent a request before the answer to its previous one" : "");
    if (!spoke)
      log::info("store on " + std::to_string(server_.port) + ": " + peer_ + " hung up while waiting for a key");
  }

  static bool hung_up(const boost::system::error_code& ec) {
    return ec == asio::error::eof || ec == asio::error::connection_reset || ec == asio::error::operation_aborted;
  }

  void close(const std::string& why) {
    if (state_ == state::closed) return;
    if (state_ == state::parked) server_.forget(key_, this);
    state_ = state::closed;
    if (!why.empty())
      log::warn("store on " + std::to_string(server_.port) + " closed the connection from " + peer_ + ": " + why);
    timer_.cancel();
    boost::system::error_code ignored;
    socket_->shutdown(tcp::socket::shutdown_both, ignored);
    socket_->close(ignored);
  }

  store_server_core& server_;
  std::shared_ptr<tcp::socket> socket_;
  asio::steady_timer timer_;
  std::string peer_;
  state state_ = state::reading;
  std::array<unsigned char, request_header_size> header_{};
  request_header request_{};
  std::string key_, value_;
  std::array<unsigned char, reply_header_size> reply_header_{};
  std::string reply_value_;
  store_status parked_status_ = store_status::ok;
};

void store_server_core::accept() {
  acceptor.async_accept([this](boost::system::error_code ec, tcp::socket accepted) {
    if (ec == asio::error::operation_aborted) return;
    if (ec) {  // e.g. out of file descriptors: say so, and try again shortly rather than spin
      log::warn("store on " + std::to_string(port) + " could not accept a connection: " + ec.message());
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](auto wait_ec) {
        if (!wait_ec) accept();
      });
      return;
    }
    auto socket = std::make_shared<tcp::socket>(std::move(accepted));
    const std::string peer = endpoint_text(socket->remote_endpoint(ec));
    socket->set_option(tcp::no_delay(true), ec);
    auth::async_admit(
        socket, token, auth::purpose::store,
        [this, socket, peer](auth::outcome result) {
          if (!result.accepted)
            return refusals.warn("store on " + std::to_string(port) + " refused a connection from " + peer + ": " +
                                 result.why);
          std::make_shared<store_connection>(*this, socket, peer)->read_request();
        },
        handshake_limit);
    accept();
  });
}

void store_server_core::publish(const std::string& key) {
  const auto parked = waiting.find(key);
  if (parked == waiting.end()) return;
  const auto waiters = std::move(parked->second);
  waiting.erase(parked);
  for (const auto& waiter : waiters)
    if (auto connection = waiter.lock()) connection->key_was_set();
}

void store_server_core::forget(const std::string& key, const store_connection* who) {
  const auto parked = waiting.find(key);
  if (parked == waiting.end()) return;
  std::erase_if(parked->second, [who](const auto& w) { return w.expired() || w.lock().get() == who; });
  if (parked->second.empty()) waiting.erase(parked);
}

}  // namespace detail

// Serves a store on `listen_on` (port 0: any free port) from a thread of its own until
// destroyed; destroying it closes every connection, so parked clients fail at once.
class tcp_store_server {
  using tcp = boost::asio::ip::tcp;

 public:
  tcp_store_server(const tcp::endpoint& listen_on, auth::job_token token,
                   std::chrono::milliseconds handshake_limit = auth::default_handshake_limit)
      : core_(std::make_unique<detail::store_server_core>(std::move(token), handshake_limit)) {
    auto& acceptor = core_->acceptor;
    boost::system::error_code ec;
    const std::string where = detail::endpoint_text(listen_on);
    acceptor.open(listen_on.protocol(), ec);
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);  // restart while old connections linger
    if (!ec) acceptor.bind(listen_on, ec);
    if (ec == asio::error::address_in_use)
      throw error(errc::invalid_config, "port " + std::to_string(listen_on.port()) + detail::port_in_use +
                                            ": the store could not listen on " + where);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) throw error(errc::invalid_config, "the store could not listen on " + where + ": " + ec.message());
    core_->port = acceptor.local_endpoint().port();
    core_->refusals.name("store on " + std::to_string(core_->port) + ": refused connections");
    core_->accept();
    thread_ = std::jthread([core = core_.get()] {
      for (;;) {
        try {
          core->io.run();
          return;
        } catch (const std::exception& e) {  // e.g. out of memory in one handler: keep serving the others
          log::warn("store on " + std::to_string(core->port) + ": " + e.what());
        }
      }
    });
  }

  ~tcp_store_server() {
    core_->io.stop();
    thread_.join();
  }
  tcp_store_server(const tcp_store_server&) = delete;
  tcp_store_server& operator=(const tcp_store_server&) = delete;

  std::uint16_t port() const noexcept { return core_->port; }
  // How many admitted clients are connected now (strangers in their handshake are not).
  int clients() const noexcept { return core_->clients.load(); }

 private:
  std::unique_ptr<detail::store_server_core> core_;
  std::jthread thread_;
};
}  // namespace collectives::bootstrap
