// The cluster a simulated group runs on (transport/sim.hpp): hosts of equal size, a
// class of link between two ranks of one host and another between hosts, and what a
// reduction costs. docs/simulation.md gives the model and its limits.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>

#include "../../concepts/vocabulary.hpp"
#include "../../error.hpp"

namespace collectives {

// What a message costs on one class of link.
struct sim_link {
  double latency_s = 1e-6;               // from a message's departure to its first byte's arrival
  double seconds_per_byte = 1.0 / 25e9;  // each byte, at both ends' ports
  double per_message_s = 0;              // the sender's port is busy this long per message, besides its bytes
  // Each byte of a call whose buffers are far larger than the caches; 0: as
  // seconds_per_byte. Without shared bandwidth, a call of up to a pipeline's slice per
  // rank (512 KiB) pays seconds_per_byte, one of 32 MiB or more this, one of 4 MiB
  // middle_seconds_per_byte where it is given (with a memory figure only), and one between two of these sizes a
  // figure between, by the logarithm of its size: where COLLECTIVES_TUNE measures them,
  // and how the cost of a byte grows as a call leaves the caches. A call's size here
  // is what it streams through as the measurement does, a separate input and output a
  // rank: an in-place call of N bytes counts as N / 2 (world::set_call_bytes).
  double memory_seconds_per_byte = 0;
  double middle_seconds_per_byte = 0;

  double seconds_per_byte_at(std::size_t call_bytes) const noexcept {
    if (memory_seconds_per_byte <= 0 || call_bytes <= in_cache_bytes) return seconds_per_byte;
    if (call_bytes >= from_memory_bytes) return memory_seconds_per_byte;
    const auto between = [&](double from_bytes, double from, double to_bytes, double to) {
      return from + std::log2(double(call_bytes) / from_bytes) / std::log2(to_bytes / from_bytes) * (to - from);
    };
    if (middle_seconds_per_byte <= 0) return between(in_cache_bytes, seconds_per_byte, from_memory_bytes, memory_seconds_per_byte);
    if (call_bytes <= middle_bytes) return between(in_cache_bytes, seconds_per_byte, middle_bytes, middle_seconds_per_byte);
    return between(middle_bytes, middle_seconds_per_byte, from_memory_bytes, memory_seconds_per_byte);
  }
  // How many times a byte in cache a byte of such a call costs.
  double memory_factor_at(std::size_t call_bytes) const noexcept {
    return seconds_per_byte > 0 ? seconds_per_byte_at(call_bytes) / seconds_per_byte : 1.0;
  }
  static constexpr std::size_t in_cache_bytes = std::size_t(512) << 10, middle_bytes = link_costs::middle_figure_bytes,
                               from_memory_bytes = link_costs::memory_figure_bytes;
};

// Every rank has a port for each class of link, which sends and receives at once.
// Without shared bandwidth a port sends one message at a time and receives one at a
// time: a message leaves when its sender's port is free, its first byte arrives
// `latency_s` later, and it has arrived once its receiver's port has taken every byte.
// With it, a message's bytes are a flow through every link it crosses (the two ports,
// or the NICs, and a leaf switch's uplinks), the flows on a link share it max-min
// fairly, and the message arrives `latency_s` after its last byte left. A message
// costs its sender `per_message_s` before it leaves, one message at a time.
//
// A rank's core does one thing at a time: reducing a received message, and the
// call's local steps, a reduction (`reduce_seconds_per_byte`) or a copy
// (`copy_seconds_per_byte`; 0: copies are free). A received message is reduced once it
// has arrived, or, with `reduces_as_bytes_arrive`, as its bytes come (as the CPU
// transports do it, piece by piece), finishing no sooner than its last byte. A
// received message is reduced at the in-cache figure (its bytes just came in); the
// local steps, over the call's buffers, at it times sim_link::memory_factor_at.
struct cluster_model {
  int ranks_per_host = 1;
  sim_link on_host{};       // between two ranks of one host
  sim_link across_hosts{};  // between hosts, through the NICs
  double reduce_seconds_per_byte = 0;
  // A straggler: this rank's ports and core take `slow_factor` times as long.
  int slow_rank = -1;
  double slow_factor = 1;
  // A slow link: the bytes through this rank's link to the other hosts (its NIC, or its
  // host's with nic_per_host, both ways) take `slow_link_factor` times as long.
  int slow_link_rank = -1;
  double slow_link_factor = 1;
  // Shared bandwidth, and what is shared.
  bool shares_bandwidth = false;
  bool nic_per_host = false;    // one NIC per host (across_hosts' figures), which its ranks share; else one per rank
  int hosts_per_leaf = 0;       // hosts under one leaf switch; 0: one switch that never blocks
  double oversubscription = 1;  // a leaf's uplinks carry its hosts' NIC bandwidth divided by this
  // The core (above): a local copy's cost, and whether a received message is reduced as its bytes come.
  double copy_seconds_per_byte = 0;
  bool reduces_as_bytes_arrive = false;

  // Every link alike (one host per rank), as the textbook formulas assume.
  static cluster_model uniform(sim_link link, double reduce_seconds_per_byte = 0) {
    return {.ranks_per_host = 1, .on_host = link, .across_hosts = link, .reduce_seconds_per_byte = reduce_seconds_per_byte};
  }

  // 8 GPUs per host joined by NVLink (about 360 GB/s each way per GPU, as NCCL measures
  // on H100), one 400 Gb/s NIC per GPU, and a GPU's reduction at 1 TB/s. Each message
  // costs its sender 0.2 us on NVLink and 1 us on the NIC (posting, completion). Flows
  // share bandwidth; the fabric blocks nothing: leaves of 16 hosts, not oversubscribed.
  static cluster_model nvlink_hosts() {
    return {.ranks_per_host = 8,
            .on_host = {.latency_s = 3e-6, .seconds_per_byte = 1.0 / 360e9, .per_message_s = 2e-7},
            .across_hosts = {.latency_s = 6e-6, .seconds_per_byte = 1.0 / 50e9, .per_message_s = 1e-6},
            .reduce_seconds_per_byte = 1.0 / 1e12,
            .shares_bandwidth = true,
            .hosts_per_leaf = 16};
  }
  // The same with each leaf's uplinks carrying 1/factor of its hosts' NIC bandwidth.
  static cluster_model nvlink_hosts_oversubscribed(double factor) {
    cluster_model m = nvlink_hosts();
    m.oversubscription = factor;
    return m;
  }

  // The figures COLLECTIVES_TUNE measures on a real machine (docs/tuning.md; a cost
  // file holds them), with ports that send one message at a time, as the measurement's
  // ring shift sees them, and reductions made as the bytes come, as the transports
  // measured make them. Local steps cost what the core's figures say, times how much
  // dearer the on-host link's byte is at the call's size (sim_link::memory_factor_at).
  static cluster_model measured(const link_classes& links, int ranks_per_host) {
    const auto link = [](const link_costs& c) {
      return sim_link{.latency_s = c.latency_s, .seconds_per_byte = c.seconds_per_byte, .per_message_s = c.per_message_s,
                      .memory_seconds_per_byte = c.memory_seconds_per_byte, .middle_seconds_per_byte = c.middle_seconds_per_byte};
    };
    return {.ranks_per_host = ranks_per_host, .on_host = link(links.on_host), .across_hosts = link(links.across_hosts),
            .reduce_seconds_per_byte = links.on_host.reduce_seconds_per_byte,
            .copy_seconds_per_byte = links.on_host.copy_seconds_per_byte,
            .reduces_as_bytes_arrive = true};
  }

  int host_of(int rank) const noexcept { return rank / ranks_per_host; }
  int leaf_of(int rank) const noexcept { return hosts_per_leaf > 0 ? host_of(rank) / hosts_per_leaf : 0; }
  // Whether messages between leaves cross uplinks narrower than the NICs under them.
  bool leaves_block() const noexcept { return shares_bandwidth && hosts_per_leaf > 0 && oversubscription > 1; }
  bool same_host(int a, int b) const noexcept { return host_of(a) == host_of(b); }
  double slowdown(int rank) const noexcept { return rank == slow_rank ? slow_factor : 1.0; }
  // How much slower the bytes through this rank's link to the other hosts move.
  double link_slowdown(int rank) const noexcept {
    const bool slow = nic_per_host ? slow_link_rank >= 0 && same_host(rank, slow_link_rank) : rank == slow_link_rank;
    return slow ? slow_link_factor : 1.0;
  }

  // The figures the algorithms plan and choose by (automatic's cost model).
  link_costs costs(const sim_link& l) const {
    return {.latency_s = l.latency_s, .per_message_s = l.per_message_s, .seconds_per_byte = l.seconds_per_byte,
            .reduce_seconds_per_byte = reduce_seconds_per_byte};
  }

  // A last host may be partly filled.
  void check() const {
    const auto bad = [](const std::string& what) { throw error(errc::invalid_config, "cluster_model: " + what); };
    if (ranks_per_host < 1) bad("ranks_per_host must be at least 1, got " + std::to_string(ranks_per_host));
    for (const sim_link* l : {&on_host, &across_hosts})
      if (!(l->latency_s >= 0 && l->seconds_per_byte >= 0 && l->per_message_s >= 0 && l->memory_seconds_per_byte >= 0 &&
            l->middle_seconds_per_byte >= 0))
        bad("a link's latency, seconds per byte (in cache, at 4 MiB and from memory) and per-message time must be 0 or more");
    if (!(reduce_seconds_per_byte >= 0 && copy_seconds_per_byte >= 0))
      bad("reduce_seconds_per_byte and copy_seconds_per_byte must be 0 or more");
    if (!(slow_factor > 0)) bad("slow_factor must be above 0");
    if (!(slow_link_factor > 0)) bad("slow_link_factor must be above 0");
    if (hosts_per_leaf < 0) bad("hosts_per_leaf must be 0 or more");
    if (!(oversubscription >= 1)) bad("oversubscription must be 1 or more");
  }
};

}  // namespace collectives
