// The job's shared secret, which admits a process to the job's store, connections and
// shared-memory segments. Kept apart from auth.hpp so that transports that need no
// handshake (shm) don't pull in Asio or OpenSSL.
#pragma once

#include <cstdlib>
#include <string>
#include <utility>

#include "../error.hpp"
#include "../log.hpp"

namespace collectives::auth {

// The job's shared secret. The launcher makes a fresh one per job and hands it to
// every rank as COLLECTIVES_JOB_TOKEN.
class job_token {
 public:
  explicit job_token(std::string secret) : secret_(std::move(secret)) {
    if (secret_.empty()) throw error(errc::invalid_config, "the job token must not be empty");
  }

  // COLLECTIVES_JOB_TOKEN, or, with a warning, a fixed public token: such a job still
  // refuses garbage and other jobs' ranks that use a token, but not a stranger who
  // knows the default.
  static job_token from_env() {
    if (const char* v = std::getenv("COLLECTIVES_JOB_TOKEN"); v != nullptr && *v != '\0') return job_token(v);
    log::warn("COLLECTIVES_JOB_TOKEN is not set; using the public default token. collectives-run sets a fresh "
              "one; elsewhere export the same secret to every rank (e.g. $(openssl rand -hex 32))");
    return job_token("collectives-public-default-token");
  }

  const std::string& secret() const noexcept { return secret_; }

 private:
  std::string secret_;
};

}  // namespace collectives::auth
