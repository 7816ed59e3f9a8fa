// The host's and the process namespace's identity (host_identity.hpp): inline in header-
// only use, compiled once into collectives::compiled with
// COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include "host_identity.hpp"

namespace collectives::bootstrap {

std::string host_identity() {
  char name[256] = {};
  std::string id = gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("?");
  return id + "|" + detail::boot_id() + "|" + detail::namespace_of("net");
}

std::string pid_space_identity() {
  const std::string boot = detail::boot_id(), pids = detail::namespace_of("pid");
  return boot.empty() || pids.empty() ? std::string() : boot + "|" + pids;
}

}  // namespace collectives::bootstrap
