// The TCP store's frames and the checks on them, apart from the server and the client
// so that tests can build frames, malformed ones included, exactly as a client would.
// After the job-token handshake (auth.hpp) a client sends requests and reads one reply
// to each, in order; all numbers are little-endian:
//
//   request  op u8, 3 zero bytes, key size u32, value size u32, timeout ms u32 (16 bytes)
//            then the key and the value
//   reply    status u8, 3 zero bytes, value size u32 (8 bytes), then the value
//
// The server checks a header before it allocates anything for the sizes it names.
// take_request reads requests from a plain byte stream with the same checks, in the
// same order, so that tests and the fuzz target can feed any bytes without a socket.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>

#include <boost/asio/ip/tcp.hpp>

#include "../concepts/transport.hpp"
#include "store.hpp"

namespace collectives::bootstrap {

namespace asio = boost::asio;

namespace detail {

using tcp = asio::ip::tcp;

enum class store_op : std::uint8_t { set = 1, get = 2, add = 3, wait = 4, check = 5 };
enum class store_status : std::uint8_t { ok = 0, timed_out = 1, absent = 2, not_integer = 3 };

// How the server's error for a busy port says so; the rendezvous names MASTER_PORT then.
inline constexpr char port_in_use[] = " is in use on this host";

inline constexpr std::size_t request_header_size = 16;
inline constexpr std::size_t reply_header_size = 8;

struct request_header {
  store_op op = store_op::set;
  std::uint32_t key_size = 0;
  std::uint32_t value_size = 0;  // add: 8, the delta
  std::uint32_t timeout_ms = 0;  // get and wait only: how long the server may park the request
};

inline void put_u32(void* at, std::uint32_t v) {
  auto* bytes = static_cast<unsigned char*>(at);
  for (int i = 0; i < 4; ++i) bytes[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline std::uint32_t get_u32(const void* at) {
  const auto* bytes = static_cast<const unsigned char*>(at);
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t(bytes[i]) << (8 * i);
  return v;
}
inline void put_u64(void* at, std::uint64_t v) {
  put_u32(at, static_cast<std::uint32_t>(v));
  put_u32(static_cast<unsigned char*>(at) + 4, static_cast<std::uint32_t>(v >> 32));
}
inline std::uint64_t get_u64(const void* at) {
  return get_u32(at) | std::uint64_t(get_u32(static_cast<const unsigned char*>(at) + 4)) << 32;
}

inline std::array<unsigned char, request_header_size> encode_request(const request_header& h) {
  std::array<unsigned char, request_header_size> raw{};
  raw[0] = static_cast<unsigned char>(h.op);
  put_u32(&raw[4], h.key_size);
  put_u32(&raw[8], h.value_size);
  put_u32(&raw[12], h.timeout_ms);
  return raw;
}

// Decodes a request header from an untrusted client; returns why it is unacceptable,
// or an empty string. Fields an operation does not use must be zero.
inline std::string parse_request(const std::array<unsigned char, request_header_size>& raw, request_header& h) {
  if (raw[0] < 1 || raw[0] > 5) return "unknown operation " + std::to_string(raw[0]);
  if (raw[1] != 0 || raw[2] != 0 || raw[3] != 0) return "reserved header bytes are not zero";
  h.op = static_cast<store_op>(raw[0]);
  h.key_size = get_u32(&raw[4]);
  h.value_size = get_u32(&raw[8]);
  h.timeout_ms = get_u32(&raw[12]);
  if (h.key_size > max_key_size)
    return "a key of " + std::to_string(h.key_size) + " bytes is longer than the limit of " +
           std::to_string(max_key_size);
  if (h.value_size > max_value_size)
    return "a value of " + std::to_string(h.value_size) + " bytes is larger than the limit of " +
           std::to_string(max_value_size);
  const bool parks = h.op == store_op::get || h.op == store_op::wait;
  const std::uint32_t expected_value = h.op == store_op::add ? 8 : 0;
  if (h.op != store_op::set && h.value_size != expected_value)
    return "a value of " + std::to_string(h.value_size) + " bytes where this operation takes " +
           std::to_string(expected_value);
  if (!parks && h.timeout_ms != 0) return "a timeout on an operation that takes none";
  return {};
}

// One whole request, as the server serves it.
struct store_request {
  request_header header;
  std::string key, value;
};

// What the front of a request stream holds.
struct taken_request {
  enum class result { complete, incomplete, refused };
  result status = result::incomplete;
  store_request request;  // when complete
  std::size_t used = 0;   // the bytes it took, when complete
  std::string why;        // when refused
};

// The first request of `stream`, checked in the server's order: the header by
// parse_request before its sizes are trusted, and the key and value copied only once
// all of their bytes are there, so nothing is allocated for bytes that never came.
inline taken_request take_request(std::span<const unsigned char> stream) {
  taken_request t;
  if (stream.size() < request_header_size) return t;
  std::array<unsigned char, request_header_size> raw;
  std::copy(stream.begin(), stream.begin() + request_header_size, raw.begin());
  t.why = parse_request(raw, t.request.header);
  if (!t.why.empty()) {
    t.status = taken_request::result::refused;
    return t;
  }
  const std::size_t key_size = t.request.header.key_size, value_size = t.request.header.value_size;
  if (stream.size() - request_header_size < key_size + value_size) return t;
  const auto* key = reinterpret_cast<const char*>(stream.data() + request_header_size);
  t.request.key.assign(key, key_size);
  t.request.value.assign(key + key_size, value_size);
  t.used = request_header_size + key_size + value_size;
  t.status = taken_request::result::complete;
  return t;
}

inline void put_reply_header(std::array<unsigned char, reply_header_size>& raw, store_status status,
                             std::uint32_t size) {
  raw = {};
  raw[0] = static_cast<unsigned char>(status);
  put_u32(&raw[4], size);
}

// Decodes a reply header; returns why it is unacceptable, or an empty string.
inline std::string parse_reply(const std::array<unsigned char, reply_header_size>& raw, store_status& status,
                               std::uint32_t& size) {
  if (raw[0] > 3) return "unknown status " + std::to_string(raw[0]);
  if (raw[1] != 0 || raw[2] != 0 || raw[3] != 0) return "reserved header bytes are not zero";
  status = static_cast<store_status>(raw[0]);
  size = get_u32(&raw[4]);
  if (size > max_value_size) return "a value of " + std::to_string(size) + " bytes";
  return {};
}

// "[::1]" and "::1" name the same host; Asio wants the latter.
inline std::string without_brackets(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') return host.substr(1, host.size() - 2);
  return host;
}

// host:port, with brackets around an IPv6 address so the port stays readable.
inline std::string endpoint_text(const std::string& host, std::uint16_t port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}
inline std::string endpoint_text(const tcp::endpoint& e) { return endpoint_text(e.address().to_string(), e.port()); }

inline std::string ms_text(clock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
}

// A wait in whole milliseconds as the wire carries it: at least 0, at most ~49 days.
inline std::uint32_t saturated_ms(clock::duration d) {
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(d).count();
  return static_cast<std::uint32_t>(std::clamp<decltype(ms)>(ms, 0, std::numeric_limits<std::uint32_t>::max()));
}

inline deadline saturated_add(deadline t, clock::duration d) {
  return t > deadline::max() - d ? deadline::max() : t + d;
}

}  // namespace detail
}  // namespace collectives::bootstrap
