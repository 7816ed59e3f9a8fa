// Which host this process runs on, as a string that every process of the host
// builds alike and no process of another host does: for groups by host (split.hpp).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "../config.hpp"
#include "fingerprint.hpp"

namespace collectives::bootstrap {

namespace detail {
inline std::string boot_id() {
  std::string boot;
  if (std::ifstream in("/proc/sys/kernel/random/boot_id"); in) std::getline(in, boot);
  return boot;
}
// "net:[4026531840]" for `kind` "net": which namespace of that kind this process is in.
inline std::string namespace_of(const char* kind) {
  char ns[128] = {};
  const ssize_t n = readlink((std::string("/proc/self/ns/") + kind).c_str(), ns, sizeof ns - 1);
  return n > 0 ? std::string(ns, static_cast<std::size_t>(n)) : std::string();
}
}  // namespace detail

// The host name, the kernel's boot id (two machines may share a name), and the
// network namespace: processes in different namespaces reach each other only over
// the network, as containers and the netns tests' hosts do, so they count as hosts
// of their own.
COLLECTIVES_DECL std::string host_identity();

// host_identity() hashed (FNV-1a): 8 bytes that travel between ranks, the same in
// every process of one host.
inline std::uint64_t host_fingerprint() { return fingerprint(host_identity()); }

// The hosts numbered 0, 1, ... in the order of their first ranks, from what tells one
// host from another at each rank (a fingerprint, a record's host, a job's numbers).
template <class Host>
std::vector<int> number_hosts(std::span<const Host> host_of_rank) {
  std::vector<Host> seen;
  std::vector<int> numbers;
  numbers.reserve(host_of_rank.size());
  for (const Host& h : host_of_rank) {
    const auto at = std::find(seen.begin(), seen.end(), h);
    numbers.push_back(static_cast<int>(at - seen.begin()));
    if (at == seen.end()) seen.push_back(h);
  }
  return numbers;
}

// Where a process id names the same process: this kernel's boot and pid namespace
// (network namespaces and containers of one kernel may share them). Empty where it
// can't be told.
COLLECTIVES_DECL std::string pid_space_identity();

}  // namespace collectives::bootstrap

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "host_identity.ipp"
#endif
