// Admission to a job: before any data is accepted, each side of a connection proves
// that it holds the job's secret token, without sending it, by a challenge-response:
//
//   server -> client  challenge     magic, version, purpose, server nonce        (40 bytes)
//   client -> server  response      magic, version, purpose, hello, client nonce,
//                                   HMAC-SHA256(token, "client" purpose hello nonces) (80)
//   server -> client  confirmation  HMAC-SHA256(token, "server" purpose hello nonces) (32)
//
// Every message has a fixed size, so nothing a stranger sends is trusted for a length,
// and a timer bounds the whole exchange, so a silent connection cannot stall anyone.
// Fresh nonces on both sides make a recorded exchange useless for a replay. `hello`
// is a 64-bit value the client vouches for (a rank joining the mesh says which).
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "../error.hpp"
#include "../log.hpp"
#include "job_token.hpp"

namespace collectives::auth {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// What a connection is for; part of every proof, so one can't stand in for the other.
enum class purpose : std::uint8_t { store = 1, peer = 2, shrink = 3 };

struct outcome {
  bool accepted = false;
  std::uint64_t hello = 0;  // what the client vouched for
  std::string why;          // when refused: what went wrong, for the log or the error
  // Client side: the other end sent a challenge of this protocol and purpose, so a
  // refusal came from a collectives endpoint, not from another program on the port.
  bool peer_speaks_protocol = false;
};

namespace detail {

inline constexpr std::uint32_t magic = 0x4C4C4F43;  // "COLL" on the wire (little-endian)
inline constexpr std::uint8_t version = 1;
inline constexpr std::size_t nonce_size = 32, mac_size = 32;
inline constexpr std::size_t challenge_size = 8 + nonce_size;
inline constexpr std::size_t response_size = 8 + 8 + nonce_size + mac_size;

using nonce = std::array<unsigned char, nonce_size>;
using mac = std::array<unsigned char, mac_size>;

inline void put_u64(unsigned char* at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline std::uint64_t get_u64(const unsigned char* at) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t(at[i]) << (8 * i);
  return v;
}

// magic, version, purpose, two bytes reserved as zero
inline void put_preamble(unsigned char* at, purpose p) {
  put_u64(at, std::uint64_t(magic) | std::uint64_t(version) << 32 | std::uint64_t(p) << 40);
}
inline bool preamble_matches(const unsigned char* at, purpose p) {
  return get_u64(at) == (std::uint64_t(magic) | std::uint64_t(version) << 32 | std::uint64_t(p) << 40);
}

inline nonce fresh_nonce() {
  nonce n;
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1)
    throw error(errc::unauthorized, "OpenSSL could not produce random bytes for a handshake nonce");
  return n;
}

// HMAC-SHA256(token, side || purpose || hello || first nonce || second nonce)
inline mac proof(const job_token& token, std::string_view side, purpose p, std::uint64_t hello, const nonce& first,
                 const nonce& second) {
  std::array<unsigned char, 6 + 1 + 8 + 2 * nonce_size> message{};
  unsigned char* at = message.data();
  for (char c : side.substr(0, 6)) *at++ = static_cast<unsigned char>(c);
  at = message.data() + 6;
  *at++ = static_cast<unsigned char>(p);
  put_u64(at, hello);
  at += 8;
  for (auto b : first) *at++ = b;
  for (auto b : second) *at++ = b;
  mac out{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), token.secret().data(), static_cast<int>(token.secret().size()), message.data(), message.size(),
       out.data(), &length);
  return out;
}

inline bool same(const unsigned char* a, const mac& b) { return CRYPTO_memcmp(a, b.data(), b.size()) == 0; }

// The three messages, made and checked without a socket, so that what a stranger can
// send is tested byte by byte; the handshake below only moves them.
using challenge_bytes = std::array<unsigned char, challenge_size>;
using response_bytes = std::array<unsigned char, response_size>;

// Server -> client: the preamble, then the server's nonce.
inline challenge_bytes make_challenge(purpose p, const nonce& server) {
  challenge_bytes b{};
  put_preamble(b.data(), p);
  std::copy(server.begin(), server.end(), b.begin() + 8);
  return b;
}

// The server's nonce, or nothing when the bytes are no challenge for this purpose.
inline std::optional<nonce> read_challenge(std::span<const unsigned char, challenge_size> b, purpose p) {
  if (!preamble_matches(b.data(), p)) return std::nullopt;
  nonce server;
  std::copy(b.begin() + 8, b.end(), server.begin());
  return server;
}

// Client -> server: the preamble, hello, the client's nonce and its proof.
inline response_bytes make_response(const job_token& token, purpose p, std::uint64_t hello, const nonce& server,
                                    const nonce& client) {
  response_bytes b{};
  put_preamble(b.data(), p);
  put_u64(b.data() + 8, hello);
  std::copy(client.begin(), client.end(), b.begin() + 16);
  const mac proven = proof(token, "client", p, hello, server, client);
  std::copy(proven.begin(), proven.end(), b.begin() + 16 + nonce_size);
  return b;
}

struct checked_response {
  bool accepted = false;
  std::uint64_t hello = 0;
  nonce client{};
  std::string why;  // when refused
};

// The server's verdict on a response to the challenge that carried `server`: accepted
// only when the proof is the exact MAC of what the response says, under this token.
inline checked_response check_response(std::span<const unsigned char, response_size> b, const job_token& token,
                                       purpose p, const nonce& server) {
  checked_response r;
  if (!preamble_matches(b.data(), p)) {
    r.why = "not a collectives handshake (bad preamble)";
    return r;
  }
  r.hello = get_u64(b.data() + 8);
  std::copy(b.begin() + 16, b.begin() + 16 + nonce_size, r.client.begin());
  r.accepted = same(b.data() + 16 + nonce_size, proof(token, "client", p, r.hello, server, r.client));
  if (!r.accepted) r.why = "wrong job token";
  return r;
}

// Server -> client: the server's own proof, over the same values in another order.
inline mac make_confirmation(const job_token& token, purpose p, std::uint64_t hello, const nonce& server,
                             const nonce& client) {
  return proof(token, "server", p, hello, client, server);
}

inline bool check_confirmation(std::span<const unsigned char, mac_size> b, const job_token& token, purpose p,
                               std::uint64_t hello, const nonce& server, const nonce& client) {
  return same(b.data(), make_confirmation(token, p, hello, server, client));
}

// State shared by the steps of one handshake: the buffers, the timer and the
// completion, which runs exactly once.
struct handshake {
  std::shared_ptr<tcp::socket> socket;
  job_token token;
  purpose what;
  asio::steady_timer timer;
  std::function<void(outcome)> done;
  nonce mine{}, theirs{};
  std::uint64_t hello = 0;
  std::array<unsigned char, response_size> buffer{};
  bool finished = false;
  bool challenged = false;  // client side: a valid challenge arrived

  handshake(std::shared_ptr<tcp::socket> s, job_token t, purpose p, std::function<void(outcome)> d)
      : socket(std::move(s)), token(std::move(t)), what(p), timer(socket->get_executor()), done(std::move(d)) {}

  void start_timer(std::shared_ptr<handshake> self, std::chrono::milliseconds limit) {
    timer.expires_after(limit);
    timer.async_wait([self, limit](const boost::system::error_code& ec) {
      if (ec) return;  // cancelled: the handshake ended first
      self->finish(false, "no complete handshake within " + std::to_string(limit.count()) + " ms");
    });
  }

  void finish(bool accepted, std::string why = {}) {
    if (finished) return;
    finished = true;
    timer.cancel();
    if (!accepted) {
      boost::system::error_code ignored;
      socket->shutdown(tcp::socket::shutdown_both, ignored);
      socket->close(ignored);
    }
    auto callback = std::move(done);
    callback(outcome{accepted, accepted ? hello : 0, std::move(why), challenged});
  }

  // The reason a read or write of the handshake failed, in words.
  static std::string broken(const boost::system::error_code& ec, const char* during) {
    if (ec == asio::error::eof) return std::string("connection closed during the ") + during;
    return std::string(during) + " failed: " + ec.message();
  }
};

}  // namespace detail

// Server side: challenges a freshly accepted connection and calls done(outcome) once.
// A refused connection is closed; the caller decides what to log.
inline void async_admit(std::shared_ptr<tcp::socket> socket, const job_token& token, purpose what,
                        std::function<void(outcome)> done,
                        std::chrono::milliseconds limit = default_handshake_limit) {
  using namespace detail;
  auto h = std::make_shared<handshake>(std::move(socket), token, what, std::move(done));
  h->start_timer(h, limit);
  h->mine = fresh_nonce();
  const challenge_bytes challenge = make_challenge(what, h->mine);
  std::copy(challenge.begin(), challenge.end(), h->buffer.begin());
  asio::async_write(*h->socket, asio::buffer(h->buffer.data(), challenge_size), [h](auto ec, std::size_t) {
    if (ec) return h->finish(false, handshake::broken(ec, "challenge"));
    asio::async_read(*h->socket, asio::buffer(h->buffer.data(), response_size), [h](auto response_ec, std::size_t) {
      if (response_ec) return h->finish(false, handshake::broken(response_ec, "response"));
      const checked_response r = check_response(h->buffer, h->token, h->what, h->mine);
      if (!r.accepted) return h->finish(false, r.why);
      h->hello = r.hello;
      h->theirs = r.client;
      const mac answer = make_confirmation(h->token, h->what, h->hello, h->mine, h->theirs);
      std::copy(answer.begin(), answer.end(), h->buffer.begin());
      asio::async_write(*h->socket, asio::buffer(h->buffer.data(), mac_size), [h](auto confirmation_ec, std::size_t) {
        if (confirmation_ec) return h->finish(false, handshake::broken(confirmation_ec, "confirmation"));
        h->finish(true);
      });
    });
  });
}

// Client side: answers the server's challenge, vouching for `hello`, and checks that
// the server holds the token too. Calls done(outcome) once.
inline void async_introduce(std::shared_ptr<tcp::socket> socket, const job_token& token, purpose what,
                            std::uint64_t hello, std::function<void(outcome)> done,
                            std::chrono::milliseconds limit = default_handshake_limit) {
  using namespace detail;
  auto h = std::make_shared<handshake>(std::move(socket), token, what, std::move(done));
  h->hello = hello;
  h->start_timer(h, limit);
  asio::async_read(*h->socket, asio::buffer(h->buffer.data(), challenge_size), [h](auto ec, std::size_t) {
    if (ec) return h->finish(false, handshake::broken(ec, "challenge"));
    const std::span<const unsigned char, challenge_size> challenge(h->buffer.data(), challenge_size);
    const auto server = read_challenge(challenge, h->what);
    if (!server) return h->finish(false, "the other end is not a collectives endpoint of this kind");
    h->challenged = true;
    h->theirs = *server;
    h->mine = fresh_nonce();
    const response_bytes response = make_response(h->token, h->what, h->hello, h->theirs, h->mine);
    std::copy(response.begin(), response.end(), h->buffer.begin());
    asio::async_write(*h->socket, asio::buffer(h->buffer.data(), response_size), [h](auto response_ec, std::size_t) {
      if (response_ec) return h->finish(false, handshake::broken(response_ec, "response"));
      asio::async_read(*h->socket, asio::buffer(h->buffer.data(), mac_size), [h](auto confirmation_ec, std::size_t) {
        if (confirmation_ec == asio::error::eof || confirmation_ec == asio::error::connection_reset)
          return h->finish(false, "the other end refused this job token (is COLLECTIVES_JOB_TOKEN the same for every rank?)");
        if (confirmation_ec) return h->finish(false, handshake::broken(confirmation_ec, "confirmation"));
        const std::span<const unsigned char, mac_size> confirmation(h->buffer.data(), mac_size);
        if (!check_confirmation(confirmation, h->token, h->what, h->hello, h->theirs, h->mine))
          return h->finish(false, "the other end could not prove it holds the job token");
        h->finish(true);
      });
    });
  });
}

}  // namespace collectives::auth
