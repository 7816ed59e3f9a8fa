// Which host each rank of a communicator runs on: exchanged once, by the first call
// whose algorithm needs it (hierarchical, automatic) or that measures link costs, and
// kept by the communicator. A transport that knows its ranks' hosts (hosts_known_to)
// needs no exchange.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "../algorithm/direct.hpp"
#include "../bootstrap/host_identity.hpp"
#include "../communicator.hpp"
#include "../config.hpp"
#include "../log.hpp"
#include "../runtime/executor_core.hpp"
#include "call_check.hpp"
#include "exchange.hpp"

namespace collectives::detail {

// "2 hosts: 0-1 | 2-3": each host's ranks, consecutive ones as a range, for the INFO log.
COLLECTIVES_DECL std::string describe_hosts(std::span<const int> hosts);

// Every rank calls this at the same point (inside the same collective call).
template <transport Tr>
std::span<const int> hosts_of(communicator<Tr>& comm, const char* call) {
  auto& known = comm.hosts();
  if (!known.empty()) return known;
  known = hosts_known_to(comm.transport());
  if (known.empty()) {
    const std::uint64_t mine = bootstrap::host_fingerprint();
    std::vector<std::uint64_t> all(static_cast<std::size_t>(comm.size()));
    const schedule plan = plan_of<direct>(kind::all_gather{}, {.rank = comm.rank(), .size = comm.size(), .count = 1});
    exchange(comm, plan, &mine, all.data(), sizeof mine,
             call_context::starting_at(comm.now(), call, comm.next_call(), comm.timeout()));
    known = bootstrap::number_hosts(std::span<const std::uint64_t>(all));
  }
  if (comm.rank() == 0 && log::enabled(log::level::info)) log::info("rank 0: " + describe_hosts(known));
  return known;
}

}  // namespace collectives::detail

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "hosts.ipp"
#endif
