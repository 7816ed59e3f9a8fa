// Which host each rank of a communicator runs on: exchanged once, by the first call
// whose algorithm needs it (hierarchical), and kept by the communicator.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "../algorithm/direct.hpp"
#include "../algorithm/executor.hpp"
#include "../bootstrap/host_identity.hpp"
#include "../communicator.hpp"
#include "call_check.hpp"

namespace collectives::detail {

inline std::uint64_t host_fingerprint() { return fingerprint(bootstrap::host_identity()); }

// Numbers the hosts 0, 1, ... in the order of their first ranks.
inline std::vector<int> number_hosts(std::span<const std::uint64_t> fingerprints) {
  std::vector<int> hosts;
  std::vector<std::uint64_t> seen;
  for (auto f : fingerprints) {
    auto at = std::find(seen.begin(), seen.end(), f);
    if (at == seen.end()) at = seen.insert(seen.end(), f);
    hosts.push_back(static_cast<int>(at - seen.begin()));
  }
  return hosts;
}

// Every rank calls this at the same point (inside the same collective call).
template <transport Tr>
std::span<const int> hosts_of(communicator<Tr>& comm, const char* call) {
  auto& known = comm.hosts();
  if (!known.empty()) return known;
  const std::uint64_t mine = host_fingerprint();
  std::vector<std::uint64_t> all(static_cast<std::size_t>(comm.size()));
  const schedule plan = direct::plan(kind::all_gather{}, {.rank = comm.rank(), .size = comm.size(), .count = 1});
  no_reduce none;
  executor_workspace<typename Tr::request> room;
  executor<Tr, std::uint64_t, no_reduce>(plan, comm.transport(), {&mine, all.data()}, none, room)
      .run(call_context::starting_now(call, comm.next_call(), comm.timeout()), [&] { return comm.progress_in_flight(); });
  known = number_hosts(all);
  return known;
}

}  // namespace collectives::detail
