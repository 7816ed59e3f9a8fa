// A key-value store served over TCP by one process (rank 0, like PyTorch's TCPStore),
// on Boost.Asio: the server is in tcp_store_server.hpp, the client here. The client
// is synchronous, and every call is bounded by a deadline: it runs the asynchronous
// operations on a private io_context until they finish or the deadline passes.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "../error.hpp"
#include "auth.hpp"
#include "blocking_socket.hpp"
#include "store.hpp"
#include "tcp_store_protocol.hpp"
#include "tcp_store_server.hpp"

namespace collectives::bootstrap {

// A client. Safe to share between threads (calls take turns on the one connection).
// After a call fails with a timeout or a lost connection the connection is closed and
// every later call fails with errc::peer_lost.
class tcp_store final : public key_value_store {
  using tcp = boost::asio::ip::tcp;

 public:
  // Connects to the store at host:port (an IPv4 or IPv6 address, brackets allowed, or a
  // name), retrying until `connect_until` since the server may start after its clients.
  // `operation_limit` bounds set, add and check, which take no deadline of their own.
  tcp_store(std::string host, std::uint16_t port, auth::job_token token, deadline connect_until,
            std::chrono::milliseconds operation_limit = std::chrono::seconds(60))
      : host_(detail::without_brackets(host)), port_(port), operation_limit_(operation_limit) {
    const auto started = clock::now();
    std::string last_error = "none";
    for (auto backoff = std::chrono::milliseconds(10);;
         backoff = std::min(2 * backoff, std::chrono::milliseconds(1000))) {
      // Even a deadline already passed gets one short try.
      if (try_connect(std::max(connect_until, clock::now() + std::chrono::milliseconds(100)), last_error)) break;
      const auto now = clock::now();
      if (now >= connect_until)
        throw error(errc::timeout, "could not reach the store at " + where() + " within " +
                                       detail::ms_text(connect_until - started) + " ms: last error: " + last_error);
      std::this_thread::sleep_for(std::min<clock::duration>(backoff, connect_until - now));
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(connect_until - clock::now());
    auth::outcome admitted;
    auth::async_introduce(
        socket_, token, auth::purpose::store, 0, [&](auth::outcome result) { admitted = std::move(result); },
        std::clamp(left, std::chrono::milliseconds(1000), std::chrono::milliseconds(auth::default_handshake_limit)));
    io_.restart();
    io_.run();  // bounded by the handshake's own timer
    if (!admitted.accepted && !admitted.peer_speaks_protocol)  // garbage, silence or a hang-up before any challenge
      throw error(errc::protocol_error, "what answers at " + where() + " is not a collectives store: " + admitted.why);
    if (!admitted.accepted)
      throw error(errc::unauthorized, "the store at " + where() + " did not admit this client: " + admitted.why);
    boost::system::error_code ignored;
    socket_->set_option(tcp::no_delay(true), ignored);
  }

  void set(const std::string& key, const std::string& value) override {
    check_store_sizes(key, value.size());
    expect_ok(exchange(detail::store_op::set, key, value, clock::now()), "set", key);
  }

  std::string get(const std::string& key, deadline until) override {
    check_store_sizes(key, 0);
    const auto started = clock::now();
    auto [status, value] = exchange(detail::store_op::get, key, {}, until);
    if (status == detail::store_status::timed_out) throw timed_out(key, started);
    expect_ok({status, {}}, "get", key);
    return std::move(value);
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    check_store_sizes(key, 0);
    std::string encoded(8, '\0');
    detail::put_u64(encoded.data(), static_cast<std::uint64_t>(delta));
    auto [status, value] = exchange(detail::store_op::add, key, encoded, clock::now());
    if (status == detail::store_status::not_integer)
      throw error(errc::protocol_error,
                  "cannot add to key '" + key + "' in the store at " + where() + ": its value is not an integer");
    expect_ok({status, {}}, "add", key);
    if (value.size() != 8)
      throw error(errc::protocol_error,
                  "the store at " + where() + " answered an add with " + std::to_string(value.size()) + " bytes");
    return static_cast<std::int64_t>(detail::get_u64(value.data()));
  }

  void wait(const std::vector<std::string>& keys, deadline until) override {
    for (const auto& key : keys) check_store_sizes(key, 0);
    const auto started = clock::now();
    for (const auto& key : keys) {
      const auto status = exchange(detail::store_op::wait, key, {}, until).status;
      if (status == detail::store_status::timed_out) throw timed_out(key, started);
      expect_ok({status, {}}, "wait", key);
    }
  }

  bool check(const std::vector<std::string>& keys) override {
    for (const auto& key : keys) check_store_sizes(key, 0);
    for (const auto& key : keys) {
      const auto status = exchange(detail::store_op::check, key, {}, clock::now()).status;
      if (status == detail::store_status::absent) return false;
      expect_ok({status, {}}, "check", key);
    }
    return true;
  }

 private:
  struct answer {
    detail::store_status status;
    std::string value;
  };

  // Time the server may take to answer beyond a request's own timeout (it answers a
  // parked get exactly when the timeout passes, so this only covers a slow server).
  static constexpr std::chrono::seconds answer_grace{2};

  std::string where() const { return detail::endpoint_text(host_, port_); }

  bool try_connect(deadline until, std::string& last_error) {
    auto socket = detail::connect_before(io_, host_, port_, until, last_error);
    if (!socket) return false;
    socket_ = std::move(socket);
    return true;
  }

  // Sends one request and reads its reply. A get or wait may be parked by the server
  // until `until`; other requests must be answered within the operation limit.
  answer exchange(detail::store_op op, const std::string& key, const std::string& value, deadline until) {
    std::lock_guard lock(mutex_);
    if (!socket_->is_open())
      throw error(errc::peer_lost,
                  "lost the store at " + where() + ": the connection was closed after an earlier failure");
    const bool may_park = op == detail::store_op::get || op == detail::store_op::wait;
    const auto now = clock::now();
    const auto wait_ms = may_park ? detail::saturated_ms(until - now) : 0;
    const deadline give_up =
        may_park ? detail::saturated_add(std::max(until, now), answer_grace) : now + operation_limit_;
    const auto header = detail::encode_request(
        {op, static_cast<std::uint32_t>(key.size()), static_cast<std::uint32_t>(value.size()), wait_ms});
    answer result{};
    std::array<unsigned char, detail::reply_header_size> reply_header{};
    boost::system::error_code failure;
    std::string broken;  // a reply that breaks the protocol
    bool finished = false;
    std::array<asio::const_buffer, 3> request{asio::buffer(header), asio::buffer(key), asio::buffer(value)};
    asio::async_write(*socket_, request, [&](auto ec, std::size_t) {
      if (ec) return void((failure = ec, finished = true));
      asio::async_read(*socket_, asio::buffer(reply_header), [&](auto header_ec, std::size_t) {
        if (header_ec) return void((failure = header_ec, finished = true));
        std::uint32_t size = 0;
        broken = detail::parse_reply(reply_header, result.status, size);
        if (!broken.empty()) return void(finished = true);
        result.value.assign(size, '\0');
        asio::async_read(*socket_, asio::buffer(result.value), [&](auto value_ec, std::size_t) {
          failure = value_ec;
          finished = true;
        });
      });
    });
    if (!run_until(give_up, finished))
      throw error(errc::timeout, "the store at " + where() + " did not answer a request for key '" + key + "' in time");
    if (failure) {
      close_socket();
      throw error(errc::peer_lost, "lost the store at " + where() + ": " + failure.message());
    }
    if (!broken.empty()) {
      close_socket();
      throw error(errc::protocol_error, "the store at " + where() + " sent a malformed reply: " + broken);
    }
    return result;
  }

  bool run_until(deadline until, const bool& finished) { return detail::run_until(io_, *socket_, until, finished); }

  void close_socket() { detail::close_socket(*socket_); }

  void expect_ok(const answer& a, const char* what, const std::string& key) const {
    if (a.status != detail::store_status::ok)
      throw error(errc::protocol_error, "the store at " + where() + " answered a " + what + " of key '" + key +
                                            "' with status " + std::to_string(static_cast<int>(a.status)));
  }

  error timed_out(const std::string& key, deadline started) const {
    return error(errc::timeout, "timed out after " + detail::ms_text(clock::now() - started) + " ms waiting for key '" +
                                    key + "' in the store at " + where());
  }

  std::string host_;
  std::uint16_t port_;
  std::chrono::milliseconds operation_limit_;
  asio::io_context io_;
  std::shared_ptr<tcp::socket> socket_;
  std::mutex mutex_;
};

}  // namespace collectives::bootstrap
