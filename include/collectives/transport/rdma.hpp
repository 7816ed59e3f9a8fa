// RDMA transport on libfabric: ranks on hosts joined by InfiniBand or RoCE (verbs),
// AWS EFA (efa), HPE Slingshot (cxi), Omni-Path (psm2, opx) or Intel's psm3, and the
// same code over libfabric's software providers (tcp, shm). Link with collectives::rdma
// (libfabric, found through pkg-config, and what collectives::tcp needs for the store).
//
//   auto comm = collectives::communicator<collectives::rdma>::from_env();
//
// Each rank opens one reliable-datagram endpoint (FI_EP_RDM) of the provider
// COLLECTIVES_FABRIC_PROVIDER names (else FI_PROVIDER, else the first hardware one,
// else tcp), meets the others through the job's store, as tcp does, and exchanges
// endpoint addresses there. Small messages go whole; large ones are read by the
// receiver straight from the sender's registered memory (rdma/engine.hpp,
// docs/rdma.md).
#pragma once

#include <unistd.h>

#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../bootstrap/auth.hpp"
#include "../bootstrap/environment.hpp"
#include "../bootstrap/host_identity.hpp"
#include "../bootstrap/rendezvous.hpp"
#include "../bootstrap/store.hpp"
#include "../communicator.hpp"
#include "../concepts/transport.hpp"
#include "../error.hpp"
#include "../log.hpp"
#include "../settings.hpp"
#include "detail/plugged_transport.hpp"
#include "detail/wire_transport.hpp"
#include "rdma/engine.hpp"

namespace collectives {

struct rdma_options {
  // libfabric's name of the provider ("verbs", "efa", "tcp", "shm", ...); empty: the
  // first hardware provider, else tcp.
  std::string provider;
  std::chrono::milliseconds startup_timeout{std::chrono::seconds{60}};
  rdma_detail::engine_limits limits{};

  // COLLECTIVES_FABRIC_PROVIDER (else FI_PROVIDER), COLLECTIVES_RDMA_EAGER_BYTES and
  // COLLECTIVES_STARTUP_TIMEOUT (seconds).
  static rdma_options from_env() {
    rdma_options o;
    if (auto p = settings::text("COLLECTIVES_FABRIC_PROVIDER")) o.provider = std::move(*p);
    else if (auto f = settings::value_of("FI_PROVIDER")) o.provider = std::move(*f);
    if (auto e = settings::byte_size("COLLECTIVES_RDMA_EAGER_BYTES")) o.limits.eager_bytes = *e;
    if (auto t = settings::seconds("COLLECTIVES_STARTUP_TIMEOUT")) o.startup_timeout = *t;
    return o;
  }
};

class rdma : public transport_detail::wire_transport<rdma_detail::engine> {
 public:
  static constexpr std::string_view selection_name = "rdma";

  // tcp;ofi_rxm over loopback on these machines; a hardware fabric is faster, and the
  // automatic choice only needs the proportions.
  static constexpr link_costs costs{.latency_s = 30e-6, .per_message_s = 5e-6,
                                    .seconds_per_byte = 1.0 / 2.5e9, .reduce_seconds_per_byte = 1.0 / 8e9};
  static constexpr transport_traits traits{.sends = send_completion::when_buffered,
                                           .fifo_equal_tags = true,
                                           .early_message_bytes = rdma_detail::engine_limits{}.eager_bytes,
                                           .large_early_message_blocks_peer = true,
                                           .sender_sees_size_refusal = false,
                                           .cancel_halfway = cancel_mid_transfer::link_fails,
                                           .reports_departed_peer = true,
                                           .ranks_can_be_processes = true};

  // Joins the group as `rank` of `size`, meeting the other ranks through `store`.
  // `spans_hosts`: some rank is on another host (the loopback interface won't do).
  rdma(int rank, int size, bootstrap::key_value_store& store, rdma_options options = rdma_options::from_env(),
       bool spans_hosts = true)
      : rdma(rank, size, &store, std::move(options), spans_hosts) {}

  // The job `launch` describes; the store at launch.master_addr:port, as tcp meets it.
  static rdma join(const bootstrap::launch_info& launch, const auth::job_token& given_token,
                   rdma_options options = rdma_options::from_env()) {
    const auth::job_token token = given_token.is_public_default() && !launch.derived_port_of_job.empty()
                                      ? auth::job_token(given_token.secret() + "|" + launch.derived_port_of_job)
                                      : given_token;
    const bool spans_hosts = launch.local_size != launch.size;
    if (launch.size == 1) return rdma(launch.rank, 1, nullptr, std::move(options), spans_hosts);
    auto session = bootstrap::open_store(launch, token, clock::now() + options.startup_timeout);
    return rdma(launch.rank, launch.size, session.store.get(), std::move(options), spans_hosts);
  }

  // The job as the launcher described it, and COLLECTIVES_JOB_TOKEN.
  static rdma from_env(rdma_options options = rdma_options::from_env()) {
    const auto launch = bootstrap::detect_launch();
    return join(launch, auth::job_token::from_env(bootstrap::warns_of_default_token(launch)), std::move(options));
  }

  rdma(rdma&&) noexcept = default;
  rdma& operator=(rdma&&) noexcept = default;

  // The provider, fabric and domain, and how messages move.
  std::string describe() const {
    const auto& f = wire_->fabric();
    std::string s = "rdma rank " + std::to_string(rank()) + " of " + std::to_string(size()) + " over libfabric provider " +
                    f.provider() + " (fabric " + f.fabric_name() + ", domain " + f.domain_name() + "); messages up to " +
                    std::to_string(wire_->limits().eager_bytes) + " bytes are sent whole, larger ones read by their receiver; ";
    s += wire_->keeps_registrations() ? "user buffers stay registered between calls"
                                      : "user buffers are registered for each transfer (no memory monitor here)";
    return s;
  }
  // libfabric's name of the provider in use.
  std::string provider() const { return wire_->fabric().provider(); }
  // The registration cache's counts: hits, misses, invalidated, evicted.
  const rdma_detail::registration_cache::counters& registrations() const { return wire_->registrations(); }
  // Whether user buffers stay registered between transfers: where the kernel lets
  // this process watch its memory (userfaultfd); else each transfer registers its own.
  bool keeps_registrations() const { return wire_->keeps_registrations(); }

 private:
  rdma(int rank, int size, bootstrap::key_value_store* store, rdma_options options, bool spans_hosts)
      : wire_transport(std::make_unique<rdma_detail::engine>(checked_rank(rank, size), size,
                                                             rdma_detail::choose_provider(options.provider, spans_hosts),
                                                             options.limits)) {
    if (size > 1) meet(*store, clock::now() + options.startup_timeout);
    if (log::enabled(log::level::info)) log::info(describe());
  }

  static int checked_rank(int rank, int size) {
    if (size < 1 || rank < 0 || rank >= size)
      throw error(errc::invalid_group, "rdma: rank " + std::to_string(rank) + " is not in a group of " + std::to_string(size));
    return rank;
  }

  // Publishes this rank's endpoint address, place and process; reads every other
  // rank's; greets them all.
  void meet(bootstrap::key_value_store& store, deadline until) {
    // Every rank creates its communicators in the same order, so each one's count
    // names the same group on every rank, even in a store that outlives a group.
    const auto generation = store.add("collectives/rdma/communicators/" + std::to_string(rank()), 1);
    const std::string prefix = "collectives/rdma/" + std::to_string(generation) + "/";
    // A peer's pid is watched only where it means the same process; "-" where unknown.
    std::string place = bootstrap::pid_space_identity();
    if (place.empty()) place = "-" + std::to_string(rank());
    store.set(prefix + std::to_string(rank()), place + " " + std::to_string(::getpid()) + " " + to_hex(wire_->address()));
    const auto ranks = std::size_t(size());
    std::vector<std::string> addresses(ranks);
    std::vector<rdma_detail::peer_place> places(ranks);
    for (int r = 0; r < size(); ++r) {
      std::istringstream in(store.get(prefix + std::to_string(r), until));
      std::string hex;
      if (!(in >> places[std::size_t(r)].host >> places[std::size_t(r)].pid >> hex) || !from_hex(hex, addresses[std::size_t(r)]))
        throw error(errc::protocol_error, "rdma: rank " + std::to_string(r) + " published no endpoint address in the store");
    }
    wire_->connect(addresses, places, place);
    greet_everyone({reserved_call::rdma_hello, 0}, until);
  }

  static std::string to_hex(const std::string& bytes) {
    static const char digits[] = "0123456789abcdef";
    std::string s;
    for (const char c : bytes) {
      const auto b = static_cast<unsigned char>(c);
      s += {digits[b >> 4], digits[b & 15]};
    }
    return s;
  }
  static bool from_hex(const std::string& hex, std::string& bytes) {
    auto value = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
    if (hex.size() % 2 != 0) return false;
    bytes.clear();
    for (std::size_t i = 0; i < hex.size(); i += 2) {
      const int hi = value(hex[i]), lo = value(hex[i + 1]);
      if (hi < 0 || lo < 0) return false;
      bytes += char(hi * 16 + lo);
    }
    return true;
  }
};

namespace rdma_detail {
// automatic_transport offers rdma in every program that includes this header.
inline std::unique_ptr<transport_detail::plugged_transport> join_for_automatic(const bootstrap::launch_info& launch,
                                                                               const auth::job_token& token) {
  return std::make_unique<transport_detail::plugged<rdma>>(rdma::join(launch, token));
}
inline const bool plugged_into_automatic = (transport_detail::rdma_socket() = {&join_for_automatic, &hardware_present}, true);
}  // namespace rdma_detail

}  // namespace collectives
