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
// docs/rdma.md). After a failure the survivors shrink the group through each rank's
// door, a TCP socket (rdma/door.hpp), into a group on new endpoints.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../bootstrap/environment.hpp"
#include "../../bootstrap/job_token.hpp"  // not auth.hpp: its handshake is Asio's, the start-up's (transport.ipp)
#include "../../bootstrap/store.hpp"
#include "../../config.hpp"
#include "../../concepts/transport.hpp"
#include "../../error.hpp"
#include "../../log.hpp"
#include "../../settings.hpp"
#include "../detail/plugged_transport.hpp"
#include "../detail/wire_transport.hpp"
#include "engine.hpp"

namespace collectives {

namespace rdma_detail {
class door;  // door.hpp, with Asio: only the start-up and shrink (transport.ipp) see them
}
namespace tcp_detail {
struct shrink_outcome;
}

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
      : rdma(rank, size, &store, std::move(options), spans_hosts, auth::job_token::from_env(false), {}) {}

  // The job `launch` describes; the store at launch.master_addr:port, as tcp meets it.
  COLLECTIVES_DECL static rdma join(const bootstrap::launch_info& launch, const auth::job_token& given_token,
                                    rdma_options options = rdma_options::from_env());

  // The job as the launcher described it, and COLLECTIVES_JOB_TOKEN.
  COLLECTIVES_DECL static rdma from_env(rdma_options options = rdma_options::from_env());

  rdma(rdma&&) noexcept = default;
  rdma& operator=(rdma&&) noexcept = default;

  // The ranks that live, agreed by all of them, as a group on new endpoints, ranks in
  // their old order (docs/fault-tolerance.md). Aborts this group first. Throws
  // errc::timeout when a rank that lives does not shrink by `until`.
  COLLECTIVES_DECL rdma shrink(deadline until);

  // The provider, fabric and domain, and how messages move.
  COLLECTIVES_DECL std::string describe() const;
  // libfabric's name of the provider in use.
  std::string provider() const { return wire_->fabric().provider(); }
  // The registration cache's counts: hits, misses, invalidated, evicted.
  const rdma_detail::registration_cache::counters& registrations() const { return wire_->registrations(); }
  // Whether user buffers stay registered between transfers: where the kernel lets
  // this process watch its memory (userfaultfd); else each transfer registers its own.
  bool keeps_registrations() const { return wire_->keeps_registrations(); }
  // Each rank's host, as the ranks published them with their addresses (hosts_known_to),
  // so that a call that plans by hosts exchanges nothing to learn them.
  std::vector<int> hosts() const { return size() == 1 ? std::vector<int>{0} : hosts_; }

 private:
  // `route_to`: a host the door's interface reaches (the store's); empty: this host's name.
  COLLECTIVES_DECL rdma(int rank, int size, bootstrap::key_value_store* store, rdma_options options, bool spans_hosts,
                        const auth::job_token& token, const std::string& route_to);
  // The group a shrink left: this rank of the survivors, which swap their new endpoints'
  // addresses over the agreement's connections.
  COLLECTIVES_DECL rdma(rdma& old, int rank, tcp_detail::shrink_outcome&& outcome, deadline until);

  static int checked_rank(int rank, int size) {
    if (size < 1 || rank < 0 || rank >= size)
      throw error(errc::invalid_group, "rdma: rank " + std::to_string(rank) + " is not in a group of " + std::to_string(size));
    return rank;
  }

  // Publishes this rank's endpoint address, place and process; reads every other
  // rank's; greets them all.
  COLLECTIVES_DECL void meet(bootstrap::key_value_store& store, deadline until);
  COLLECTIVES_DECL static std::string to_hex(const std::string& bytes);
  COLLECTIVES_DECL static bool from_hex(const std::string& hex, std::string& bytes);

  std::vector<int> hosts_;  // empty where some rank published no host
  // What a shrink needs: how this rank started, and where every rank is.
  rdma_options options_;
  bool spans_hosts_ = true;
  std::uint32_t shrinks_ = 0;  // attempts so far, counted alike on every survivor
  std::string place_;          // this rank's kernel and pid space (rdma_detail::peer_place)
  std::vector<rdma_detail::peer_place> places_;
  std::vector<std::string> addresses_;  // every rank's endpoint
  std::shared_ptr<rdma_detail::door> door_;  // null in a group of one, or where a rank published none
};

namespace rdma_detail {
// automatic_transport offers rdma in every program that includes this header.
// Defined with the rest of rdma's start-up (transport.ipp): with separate compilation,
// this reference is what links it in.
COLLECTIVES_DECL std::unique_ptr<transport_detail::plugged_transport> join_for_automatic(const bootstrap::launch_info& launch,
                                                                                         const auth::job_token& token);
inline const bool plugged_into_automatic = (transport_detail::rdma_socket() = {&join_for_automatic, &hardware_present}, true);
}  // namespace rdma_detail

}  // namespace collectives

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "transport.ipp"
#endif
