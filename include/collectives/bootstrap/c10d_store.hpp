// A client of PyTorch's TCPStore, the store torchrun's agent serves on MASTER_PORT:
// under torchrun the ranks meet there instead of in a store of their own. It speaks
// the wire protocol of torch 1.13's TCPStore (verified against that server):
//
//   request   query u8 (set 0, get 2, add 3, check 4, wait 5, key count 6), then its
//             arguments: a string or bytes as a u64 size and the bytes, a key list as
//             a u64 count and that many strings, an add's delta as an i64
//   replies   set: none; get: bytes; add and key count: i64; check: u8, 0 when every
//             key is set, else 1; wait: u8 0 once every key is set
//
// Numbers are in host byte order, as torch sends them. The server parks a wait until
// its keys are set, however long that takes, and closes the connection on a get of a
// missing key or an add to a value that is no integer; so a get waits for its key
// first, and a deadline that passes closes this client's connection, which the next
// call opens afresh. torch 2.x changed the numbering and expects a handshake first;
// connecting checks that the server answers as 1.13's does, so another one is an
// error here rather than a hang later. The store admits anyone who reaches it: see
// docs/launcher.md for what that means for a job.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "../error.hpp"
#include "blocking_socket.hpp"
#include "store.hpp"
#include "tcp_store_protocol.hpp"

namespace collectives::bootstrap {

namespace detail {

enum class c10d_query : std::uint8_t { set = 0, get = 2, add = 3, check = 4, wait = 5, key_count = 6 };
inline constexpr std::uint8_t c10d_ready = 0, c10d_not_ready = 1, c10d_stop_waiting = 0;
// torch's client puts this in front of every key it sends; so does this one, so that
// each sees the other's keys under the same names.
inline constexpr char c10d_key_root[] = "/";

// One request as the server reads it.
class c10d_request {
 public:
  explicit c10d_request(c10d_query q) : bytes_(1, static_cast<char>(q)) {}
  c10d_request& number(std::uint64_t n) {
    bytes_.append(reinterpret_cast<const char*>(&n), sizeof n);
    return *this;
  }
  c10d_request& text(const std::string& s) {
    number(s.size());
    bytes_ += s;
    return *this;
  }
  const std::string& bytes() const noexcept { return bytes_; }

 private:
  std::string bytes_;
};

}  // namespace detail

// Safe to share between threads (calls take turns on the one connection). Every key
// is sent with `key_prefix` in front (after torch's own "/"), so that jobs and runs
// sharing the store never meet; errors name keys as the caller gave them.
class c10d_store final : public key_value_store {
  using tcp = boost::asio::ip::tcp;
  using query = detail::c10d_query;

 public:
  // Connects to the store at host:port, retrying until `connect_until`. `operation_limit`
  // bounds set, add and check, and reconnecting after a failed call.
  c10d_store(std::string host, std::uint16_t port, std::string key_prefix, deadline connect_until,
             std::chrono::milliseconds operation_limit = std::chrono::seconds(60))
      : host_(detail::without_brackets(host)), port_(port), prefix_(detail::c10d_key_root + key_prefix),
        operation_limit_(operation_limit) {
    const auto started = clock::now();
    std::string last_error = "none";
    for (auto backoff = std::chrono::milliseconds(10);;
         backoff = std::min(2 * backoff, std::chrono::milliseconds(1000))) {
      if (try_connect(std::max(connect_until, clock::now() + std::chrono::milliseconds(100)), last_error)) break;
      const auto now = clock::now();
      if (now >= connect_until)
        throw error(errc::timeout, "could not reach " + where() + " within " +
                                       detail::ms_text(connect_until - started) + " ms: last error: " + last_error);
      std::this_thread::sleep_for(std::min<clock::duration>(backoff, connect_until - now));
    }
    // A short, fixed bound: the server is up, and one that does not answer this will not answer anything.
    const std::string why = key_count(clock::now() + std::chrono::seconds(5));
    if (!why.empty())
      throw error(errc::protocol_error,
                  where() + " does not answer as torch 1.13's TCPStore does (" + why +
                      "); the TCPStore of torch 2.x, which expects a handshake first, is not supported: set "
                      "COLLECTIVES_STORE_DIR to a directory every rank shares to meet there instead");
  }

  void set(const std::string& key, const std::string& value) override {
    check_store_sizes(prefix_ + key, value.size());
    std::lock_guard lock(mutex_);
    connected("a set of", key);
    const auto why = send(detail::c10d_request(query::set).text(prefix_ + key).text(value),
                          clock::now() + operation_limit_);
    if (!why.empty()) throw failed("a set of", key, why);
  }

  std::string get(const std::string& key, deadline until) override {
    check_store_sizes(prefix_ + key, 0);
    const auto started = clock::now();
    std::lock_guard lock(mutex_);
    wait_locked({key}, until, started);  // the server drops a client that gets a missing key
    const deadline give_up = clock::now() + operation_limit_;
    std::uint64_t size = 0;
    auto why = send(detail::c10d_request(query::get).text(prefix_ + key), give_up);
    if (why.empty()) why = receive(&size, sizeof size, give_up);
    if (why.empty() && size > max_value_size) {
      close();
      throw error(errc::protocol_error, where() + " answered a get of key '" + key + "' with a value of " +
                                            std::to_string(size) + " bytes, more than the limit of " +
                                            std::to_string(max_value_size));
    }
    std::string value(why.empty() ? size : 0, '\0');
    if (why.empty()) why = receive(value.data(), value.size(), give_up);
    if (!why.empty()) throw failed("a get of", key, why);
    return value;
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    check_store_sizes(prefix_ + key, 0);
    std::lock_guard lock(mutex_);
    connected("an add to", key);
    const deadline give_up = clock::now() + operation_limit_;
    std::int64_t result = 0;
    auto why = send(detail::c10d_request(query::add).text(prefix_ + key).number(static_cast<std::uint64_t>(delta)),
                    give_up);
    if (why.empty()) why = receive(&result, sizeof result, give_up);
    if (why.empty()) return result;
    // The server hangs up on an add to a value that is no integer; if it still answers
    // a fresh connection, that was the reason.
    if (why == lost_text && reconnect(clock::now() + operation_limit_).empty() &&
        key_count(clock::now() + operation_limit_).empty())
      throw error(errc::protocol_error,
                  "cannot add to key '" + key + "' in " + where() + ": its value is not an integer");
    throw failed("an add to", key, why);
  }

  void wait(const std::vector<std::string>& keys, deadline until) override {
    for (const auto& key : keys) check_store_sizes(prefix_ + key, 0);
    const auto started = clock::now();
    std::lock_guard lock(mutex_);
    wait_locked(keys, until, started);
  }

  bool check(const std::vector<std::string>& keys) override {
    for (const auto& key : keys) check_store_sizes(prefix_ + key, 0);
    if (keys.empty()) return true;
    std::lock_guard lock(mutex_);
    connected("a check of", keys.front());
    const deadline give_up = clock::now() + operation_limit_;
    std::uint8_t answer = 0;
    auto why = send(with_keys(query::check, keys), give_up);
    if (why.empty()) why = receive(&answer, 1, give_up);
    if (why.empty() && answer > detail::c10d_not_ready) {
      close();
      why = "an unknown answer " + std::to_string(answer);
    }
    if (!why.empty()) throw failed("a check of", keys.front(), why);
    return answer == detail::c10d_ready;
  }

 private:
  static constexpr char lost_text[] = "the server closed the connection";

  std::string where() const { return "the c10d store at " + detail::endpoint_text(host_, port_); }

  detail::c10d_request with_keys(query q, const std::vector<std::string>& keys) const {
    detail::c10d_request request(q);
    request.number(keys.size());
    for (const auto& key : keys) request.text(prefix_ + key);
    return request;
  }

  void wait_locked(const std::vector<std::string>& keys, deadline until, deadline started) {
    if (keys.empty()) return;
    connected("a wait for", keys.front());
    if (clock::now() < until) {
      std::uint8_t answer = 0;
      auto why = send(with_keys(query::wait, keys), until);
      if (why.empty()) why = receive(&answer, 1, until);
      if (why.empty() && answer == detail::c10d_stop_waiting) return;
      if (why.empty()) {
        close();
        why = "an unknown answer " + std::to_string(answer);
      }
      if (why != timed_out_text) throw failed("a wait for", keys.front(), why);
      // The server never gives up a wait, so the connection that holds it is closed;
      // a fresh one tells which key is missing.
      if (!reconnect(clock::now() + std::min(operation_limit_, std::chrono::milliseconds(2000))).empty())
        throw timed_out(keys.front(), started);
    }
    for (const auto& key : keys)
      if (is_set(key) != true) throw timed_out(key, started);
    // Every key turned up just as the deadline passed.
  }

  error timed_out(const std::string& key, deadline started) const {
    return error(errc::timeout, "timed out after " + detail::ms_text(clock::now() - started) +
                                    " ms waiting for key '" + key + "' in " + where());
  }

  // Whether `key` is set; nothing when that cannot be told.
  std::optional<bool> is_set(const std::string& key) {
    const deadline give_up = clock::now() + std::min(operation_limit_, std::chrono::milliseconds(2000));
    std::uint8_t answer = 0;
    auto why = send(with_keys(query::check, {key}), give_up);
    if (why.empty()) why = receive(&answer, 1, give_up);
    if (!why.empty()) return std::nullopt;
    return answer == detail::c10d_ready;
  }

  // The number of keys the server holds, as a sign of life; returns why it failed.
  std::string key_count(deadline until) {
    std::int64_t count = 0;
    auto why = send(detail::c10d_request(query::key_count), until);
    if (why.empty()) why = receive(&count, sizeof count, until);
    if (why.empty() && count < 0) why = "a key count of " + std::to_string(count);
    return why;
  }

  // Reconnects after an earlier failure closed the connection.
  void connected(const char* what, const std::string& key) {
    if (socket_ && socket_->is_open()) return;
    if (const auto why = reconnect(clock::now() + operation_limit_); !why.empty())
      throw error(errc::peer_lost, std::string("lost ") + where() + " before " + what + " key '" + key +
                                       "': reconnecting failed: " + why);
  }

  std::string reconnect(deadline until) {
    close();
    std::string why;
    return try_connect(until, why) ? std::string() : why;
  }

  // `what` reads "a set of", "an add to", ...
  error failed(const char* what, const std::string& key, const std::string& why) const {
    if (why == timed_out_text)
      return error(errc::timeout, where() + " did not complete " + what + " key '" + key + "' in time");
    return error(errc::peer_lost, std::string("lost ") + where() + " during " + what + " key '" + key + "': " + why);
  }

  static constexpr const char* timed_out_text = detail::no_answer_text;

  // Sends or reads bytes until done or `until`; returns why it failed, or an empty
  // string. A failure closes the connection, since a reply may still be on its way.
  std::string send(const detail::c10d_request& request, deadline until) {
    boost::system::error_code ec;
    bool finished = false;
    boost::asio::async_write(*socket_, boost::asio::buffer(request.bytes()), [&](auto error, std::size_t) {
      ec = error;
      finished = true;
    });
    return outcome(until, finished, ec);
  }

  std::string receive(void* into, std::size_t size, deadline until) {
    boost::system::error_code ec;
    bool finished = false;
    boost::asio::async_read(*socket_, boost::asio::buffer(into, size), [&](auto error, std::size_t) {
      ec = error;
      finished = true;
    });
    return outcome(until, finished, ec);
  }

  std::string outcome(deadline until, const bool& finished, const boost::system::error_code& ec) {
    if (!run_until(until, finished)) return timed_out_text;
    if (!ec) return {};
    close();
    return ec == boost::asio::error::eof ? lost_text : ec.message();
  }

  bool try_connect(deadline until, std::string& last_error) {
    auto socket = detail::connect_before(io_, host_, port_, until, last_error);
    if (!socket) return false;
    boost::system::error_code ignored;
    socket->set_option(tcp::no_delay(true), ignored);
    socket_ = std::move(socket);
    return true;
  }

  bool run_until(deadline until, const bool& finished) { return detail::run_until(io_, *socket_, until, finished); }

  void close() {
    if (socket_) detail::close_socket(*socket_);
  }

  std::string host_;
  std::uint16_t port_;
  std::string prefix_;
  std::chrono::milliseconds operation_limit_;
  boost::asio::io_context io_;
  std::shared_ptr<tcp::socket> socket_;
  std::mutex mutex_;
};

}  // namespace collectives::bootstrap
