// Which host each rank of a communicator runs on: exchanged once, by the first call
// whose algorithm needs it (hierarchical, automatic) or that measures link costs, and
// kept by the communicator. A transport that knows its ranks' hosts (hosts_known_to)
// needs no exchange. A call started without waiting runs the exchange as a stage of
// its own, so that starting it never waits on the network.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../algorithm/direct.hpp"
#include "../bootstrap/host_identity.hpp"
#include "../communicator.hpp"
#include "../config.hpp"
#include "../error.hpp"
#include "../log.hpp"
#include "../runtime/in_flight.hpp"
#include "exchange.hpp"

namespace collectives::detail {

// "2 hosts: 0-1 | 2-3": each host's ranks, consecutive ones as a range, for the INFO log.
COLLECTIVES_DECL std::string describe_hosts(std::span<const int> hosts);

// The exchange's timeout, in the user's words: the call `ctx` names waited for the
// hosts, and the ranks whose fingerprints did not come (their slots are still zero:
// the executor cancelled every receive) had not made it.
COLLECTIVES_DECL error hosts_timed_out(const call_context& ctx, int rank, std::span<const std::uint64_t> all);

// The exchange of every rank's host fingerprint, as steps that never wait: as a
// stage of the calls started before the hosts were known (all of them wait on this
// one: it takes one call number, at the first), or run to its end by a blocking call.
template <class Tr>
class hosts_exchange {
 public:
  hosts_exchange(communicator<Tr>& comm, const char* call)
      : rank_(comm.rank()), all_(std::size_t(comm.size())),
        exchange_(comm, plan_of<direct>(kind::all_gather{}, {.rank = comm.rank(), .size = comm.size(), .count = 1}),
                  &mine_, all_.data(), sizeof mine_, call,
                  [this](const call_context& ctx) { return hosts_timed_out(ctx, rank_, all_); }) {}

  // True once every rank's host is known; throws the exchange's failure, to every
  // call that waits on it.
  bool advance() {
    if (!hosts_.empty()) return true;
    if (!exchange_.advance()) return false;
    hosts_ = bootstrap::number_hosts(std::span<const std::uint64_t>(all_));
    return true;
  }

  // To its end, advancing the communicator's calls in flight meanwhile.
  void run(communicator<Tr>& comm) {
    exchange_.run(comm);
    advance();
  }

  const std::vector<int>& hosts() const noexcept { return hosts_; }
  std::size_t finished() const noexcept { return exchange_.finished(); }
  [[noreturn]] void fail_timed_out() { exchange_.fail_timed_out(); }

 private:
  int rank_;
  std::uint64_t mine_ = bootstrap::host_fingerprint() | 1;  // never 0: a slot still 0 has not come
  std::vector<std::uint64_t> all_;
  service_exchange<Tr> exchange_;  // cancels its messages if it goes before it ends
  std::vector<int> hosts_;  // each rank's host, once they are all in
};

// The exchange as a stage of one started call (runtime/in_flight.hpp).
template <class Tr>
class hosts_exchange_stage final : public hosts_stage {
 public:
  explicit hosts_exchange_stage(std::shared_ptr<hosts_exchange<Tr>> exchange) : exchange_(std::move(exchange)) {}
  bool advance() override { return exchange_->advance(); }
  std::size_t finished() const noexcept override { return exchange_->finished(); }
  [[noreturn]] void fail_timed_out() override { exchange_->fail_timed_out(); }
  void abandon() noexcept override {}  // the exchange cancels its messages when the last call that waits on it goes
  std::span<const int> hosts() const noexcept override { return exchange_->hosts(); }

 private:
  std::shared_ptr<hosts_exchange<Tr>> exchange_;
};

// What the transport knows or an earlier exchange learned; empty if neither.
template <transport Tr>
std::vector<int>& known_hosts(communicator<Tr>& comm) {
  auto& known = comm.hosts();
  if (!known.empty()) return known;
  known = hosts_known_to(comm.transport());
  auto& pending = comm.pending_hosts();
  if (known.empty() && pending && !pending->hosts().empty()) known = std::exchange(pending, nullptr)->hosts();
  if (!known.empty() && comm.rank() == 0 && log::enabled(log::level::info)) log::info("rank 0: " + describe_hosts(known));
  return known;
}

// Every rank calls this at the same point (inside the same collective call), and
// waits for the exchange if it takes one.
template <transport Tr>
std::span<const int> hosts_of(communicator<Tr>& comm, const char* call) {
  if (!comm.hosts().empty()) return comm.hosts();  // every call after the first
  auto& known = known_hosts(comm);
  if (!known.empty()) return known;
  auto& pending = comm.pending_hosts();
  if (!pending) pending = std::make_shared<hosts_exchange<Tr>>(comm, call);
  const auto exchange = pending;  // the calls it runs meanwhile may take it from the communicator
  exchange->run(comm);
  return known_hosts(comm);
}

// For a call that starts without waiting: null where the hosts are known, else the
// exchange as the call's stage (the one already running, if an earlier call started it).
template <transport Tr>
std::unique_ptr<hosts_stage> hosts_later(communicator<Tr>& comm, const char* call) {
  if (!comm.hosts().empty() || !known_hosts(comm).empty()) return nullptr;
  auto& pending = comm.pending_hosts();
  if (!pending) pending = std::make_shared<hosts_exchange<Tr>>(comm, call);
  return std::make_unique<hosts_exchange_stage<Tr>>(pending);
}

}  // namespace collectives::detail

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "hosts.ipp"
#endif
