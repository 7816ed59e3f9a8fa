// The RDMA transport's start-up (transport.hpp): inline in header-only use, compiled once
// into collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION (built where
// libfabric is found).
#pragma once

#include <unistd.h>

#include <sstream>

#include "transport.hpp"

#include "../../bootstrap/host_identity.hpp"
#include "../../bootstrap/rendezvous.hpp"

#include "engine.ipp"

namespace collectives {

rdma rdma::join(const bootstrap::launch_info& launch, const auth::job_token& given_token, rdma_options options) {
  const auth::job_token token = given_token.is_public_default() && !launch.derived_port_of_job.empty()
                                    ? auth::job_token(given_token.secret() + "|" + launch.derived_port_of_job)
                                    : given_token;
  const bool spans_hosts = launch.local_size != launch.size;
  if (launch.size == 1) return rdma(launch.rank, 1, nullptr, std::move(options), spans_hosts);
  auto session = bootstrap::open_store(launch, token, clock::now() + options.startup_timeout);
  return rdma(launch.rank, launch.size, session.store.get(), std::move(options), spans_hosts);
}

rdma rdma::from_env(rdma_options options) {
  const auto launch = bootstrap::detect_launch();
  return join(launch, auth::job_token::from_env(bootstrap::warns_of_default_token(launch)), std::move(options));
}

std::string rdma::describe() const {
  const auto& f = wire_->fabric();
  std::string s = "rdma rank " + std::to_string(rank()) + " of " + std::to_string(size()) + " over libfabric provider " +
                  f.provider() + " (fabric " + f.fabric_name() + ", domain " + f.domain_name() + "); messages up to " +
                  std::to_string(wire_->limits().eager_bytes) + " bytes are sent whole, larger ones read by their receiver; ";
  s += wire_->keeps_registrations() ? "user buffers stay registered between calls"
                                    : "user buffers are registered for each transfer (no memory monitor here)";
  return s;
}

rdma::rdma(int rank, int size, bootstrap::key_value_store* store, rdma_options options, bool spans_hosts)
    : wire_transport(std::make_unique<rdma_detail::engine>(checked_rank(rank, size), size,
                                                           rdma_detail::choose_provider(options.provider, spans_hosts),
                                                           options.limits)) {
  if (size > 1) meet(*store, clock::now() + options.startup_timeout);
  if (log::enabled(log::level::info)) log::info(describe());
}

void rdma::meet(bootstrap::key_value_store& store, deadline until) {
  // Every rank creates its communicators in the same order, so each one's count
  // names the same group on every rank, even in a store that outlives a group.
  const auto generation = store.add("collectives/rdma/communicators/" + std::to_string(rank()), 1);
  const std::string prefix = "collectives/rdma/" + std::to_string(generation) + "/";
  // A peer's pid is watched only where it means the same process; "-" where unknown.
  std::string place = bootstrap::pid_space_identity();
  if (place.empty()) place = "-" + std::to_string(rank());
  // Last, the host (bootstrap::host_fingerprint, as the hosts' exchange would learn it).
  store.set(prefix + std::to_string(rank()), place + " " + std::to_string(::getpid()) + " " +
                                                 to_hex(wire_->address()) + " " + std::to_string(bootstrap::host_fingerprint()));
  const auto ranks = std::size_t(size());
  std::vector<std::string> addresses(ranks);
  std::vector<rdma_detail::peer_place> places(ranks);
  std::vector<std::uint64_t> host_of_rank(ranks);
  bool every_host_known = true;
  for (int r = 0; r < size(); ++r) {
    std::istringstream in(store.get(prefix + std::to_string(r), until));
    std::string hex;
    if (!(in >> places[std::size_t(r)].host >> places[std::size_t(r)].pid >> hex) || !from_hex(hex, addresses[std::size_t(r)]))
      throw error(errc::protocol_error, "rdma: rank " + std::to_string(r) + " published no endpoint address in the store");
    every_host_known = every_host_known && bool(in >> host_of_rank[std::size_t(r)]);
  }
  if (every_host_known) hosts_ = bootstrap::number_hosts(std::span<const std::uint64_t>(host_of_rank));
  wire_->connect(addresses, places, place);
  greet_everyone({reserved_call::rdma_hello, 0}, until);
}

std::string rdma::to_hex(const std::string& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    s += {digits[b >> 4], digits[b & 15]};
  }
  return s;
}

bool rdma::from_hex(const std::string& hex, std::string& bytes) {
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

namespace rdma_detail {

std::unique_ptr<transport_detail::plugged_transport> join_for_automatic(const bootstrap::launch_info& launch,
                                                                        const auth::job_token& token) {
  return std::make_unique<transport_detail::plugged<rdma>>(rdma::join(launch, token));
}

}  // namespace rdma_detail

}  // namespace collectives
