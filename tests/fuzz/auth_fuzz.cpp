// The job-token handshake's messages (bootstrap/auth.hpp), checked as the handshake
// checks them: a response made with the right token and challenge is accepted, with
// the hello and nonce it carries; any change to it (one byte, the purpose, the
// challenge's nonce, the token) is refused; and random bytes are accepted only when
// they are that exact response. The same for the challenge and the confirmation.
//
// Input: purpose bit, mutation offset, mutation mask, hello (8), server nonce (32),
// client nonce (32), then the token (the rest; "t" when empty). Inputs of a response's
// length or more are also tried as a response from a stranger.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include <collectives/bootstrap/auth.hpp>

#include "fuzz_check.hpp"

namespace auth = collectives::auth;
namespace hs = collectives::auth::detail;

namespace {

constexpr std::size_t fixed_part = 3 + 8 + 2 * hs::nonce_size;

hs::nonce nonce_at(const std::uint8_t* at) {
  hs::nonce n;
  std::memcpy(n.data(), at, n.size());
  return n;
}

// Flips the bits of `mask` (never zero) in byte `at` of `bytes`.
template <std::size_t N>
std::array<unsigned char, N> changed(std::array<unsigned char, N> bytes, std::size_t at, std::uint8_t mask) {
  bytes[at % N] ^= mask == 0 ? 1 : mask;
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < fixed_part) return 0;
  const auto what = (data[0] & 1) ? auth::purpose::store : auth::purpose::peer;
  const auto other = what == auth::purpose::store ? auth::purpose::peer : auth::purpose::store;
  const std::size_t at = data[1];
  const std::uint8_t mask = data[2];
  std::uint64_t hello = 0;
  std::memcpy(&hello, data + 3, 8);
  const hs::nonce server = nonce_at(data + 11), client = nonce_at(data + 11 + hs::nonce_size);
  std::string secret(reinterpret_cast<const char*>(data + fixed_part), size - fixed_part);
  if (secret.empty()) secret = "t";
  if (secret.find('\0') != std::string::npos) {  // HMAC would take "abc" and "abc\0" for one key
    bool refused = false;
    try {
      auth::job_token{secret};
    } catch (const collectives::error&) {
      refused = true;
    }
    fuzz_check(refused, "a job token with a NUL byte was accepted");
    return 0;
  }
  const auth::job_token token(secret);

  // The challenge carries the server's nonce for its purpose only.
  const auto challenge = hs::make_challenge(what, server);
  const auto read = hs::read_challenge(challenge, what);
  fuzz_check(read && *read == server, "a challenge does not carry its nonce");
  fuzz_check(!hs::read_challenge(challenge, other), "a challenge was read for the other purpose");
  const auto bent_challenge = changed(challenge, at, mask);
  const auto bent_read = hs::read_challenge(bent_challenge, what);
  fuzz_check(at % hs::challenge_size < 8 ? !bent_read : bent_read && *bent_read != server,
             "a changed challenge was read as the original");

  // The response: accepted as made, refused after any change.
  const auto response = hs::make_response(token, what, hello, server, client);
  const auto verdict = hs::check_response(response, token, what, server);
  fuzz_check(verdict.accepted && verdict.hello == hello && verdict.client == client && verdict.why.empty(),
             "the exact response was not accepted as it is");
  fuzz_check(!hs::check_response(changed(response, at, mask), token, what, server).accepted,
             "a response with a changed byte was accepted");
  fuzz_check(!hs::check_response(response, token, other, server).accepted,
             "a response was accepted for the other purpose");
  fuzz_check(!hs::check_response(response, token, what, changed(server, at, mask)).accepted,
             "a response was accepted for another challenge");
  std::string other_secret = secret;
  other_secret[at % other_secret.size()] ^= static_cast<char>(mask == 0 ? 1 : mask);
  if (other_secret.find('\0') == std::string::npos)
    fuzz_check(!hs::check_response(response, auth::job_token(other_secret), what, server).accepted,
               "a response was accepted under another token of the same length");
  const auto refused = hs::check_response(changed(response, at, mask), token, what, server);
  fuzz_check(!refused.why.empty(), "a refusal does not say why");

  // The confirmation: the server's proof, never the client's proof sent back.
  const auto confirmation = hs::make_confirmation(token, what, hello, server, client);
  fuzz_check(hs::check_confirmation(confirmation, token, what, hello, server, client),
             "the exact confirmation was not accepted");
  fuzz_check(!hs::check_confirmation(changed(confirmation, at, mask), token, what, hello, server, client),
             "a changed confirmation was accepted");
  hs::mac echoed;
  std::copy(response.end() - hs::mac_size, response.end(), echoed.begin());
  fuzz_check(!hs::check_confirmation(echoed, token, what, hello, server, client),
             "the client's own proof was accepted as the server's");

  // Bytes from a stranger: accepted only when they are the exact response.
  if (size >= hs::response_size) {
    const std::span<const unsigned char, hs::response_size> stranger(data, hs::response_size);
    const auto v = hs::check_response(stranger, token, what, server);
    if (v.accepted) {
      const auto exact = hs::make_response(token, what, v.hello, server, v.client);
      fuzz_check(std::equal(exact.begin(), exact.end(), stranger.begin()), "a stranger's inexact response was accepted");
    }
  }
  return 0;
}
