// The job's shared secret, which admits a process to the job's store, connections and
// shared-memory segments. Kept apart from auth.hpp so that transports that need no
// handshake (shm) don't pull in Asio or OpenSSL.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <string_view>
#include <utility>

#include "../error.hpp"
#include "../log.hpp"
#include "../settings.hpp"

namespace collectives::auth {

// How long a peer may take to prove it holds the token (auth.hpp's handshakes).
inline constexpr std::chrono::seconds default_handshake_limit{10};

// The job's shared secret. The launcher makes a fresh one per job and hands it to
// every rank as COLLECTIVES_JOB_TOKEN.
class job_token {
 public:
  explicit job_token(std::string secret) : secret_(std::move(secret)) {
    if (secret_.empty()) throw error(errc::invalid_config, "the job token must not be empty");
    // HMAC pads a short key with zero bytes, so "abc" and "abc\0" would prove the same.
    if (secret_.find('\0') != std::string::npos) throw error(errc::invalid_config, "the job token must not contain a NUL byte");
  }

  // COLLECTIVES_JOB_TOKEN, or, with a warning, a fixed public token: such a job still
  // refuses garbage and other jobs' ranks that use a token, but not a stranger who
  // knows the default. The warning is printed once per process, and only when `warn`
  // (the transports pass "rank 0, and no fresh token is to be agreed on", so that a
  // job says it once, after any error in its launch environment).
  static job_token from_env(bool warn = true) {
    if (auto secret = settings::text("COLLECTIVES_JOB_TOKEN")) return job_token(std::move(*secret));
    static std::atomic<bool> warned{false};
    if (warn && !warned.exchange(true))
      log::warn("COLLECTIVES_JOB_TOKEN is not set; using the public default token. collectives-run sets a fresh "
                "one; elsewhere export the same secret to every rank (e.g. $(openssl rand -hex 32))");
    return job_token(std::string(public_default));
  }

  // Whether this is the public default token, which admits anyone who knows it.
  bool is_public_default() const noexcept { return secret_ == public_default; }

  const std::string& secret() const noexcept { return secret_; }

 private:
  static constexpr std::string_view public_default = "collectives-public-default-token";
  std::string secret_;
};

}  // namespace collectives::auth
