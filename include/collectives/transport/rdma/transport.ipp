// The RDMA transport's start-up (transport.hpp): inline in header-only use, compiled once
// into collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION (built where
// libfabric is found).
#pragma once

#include <unistd.h>

#include <sstream>

#include "transport.hpp"

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "../../bootstrap/host_identity.hpp"
#include "../../bootstrap/rendezvous.hpp"
#include "../tcp/address.hpp"
#include "../tcp/shrink.hpp"
#include "door.hpp"

#include "engine.ipp"

namespace collectives {

rdma rdma::join(const bootstrap::launch_info& launch, const auth::job_token& given_token, rdma_options options) {
  const auth::job_token token = given_token.is_public_default() && !launch.derived_port_of_job.empty()
                                    ? auth::job_token(given_token.secret() + "|" + launch.derived_port_of_job)
                                    : given_token;
  const bool spans_hosts = launch.local_size != launch.size;
  if (launch.size == 1) return rdma(launch.rank, 1, nullptr, std::move(options), spans_hosts, token, launch.master_addr);
  auto session = bootstrap::open_store(launch, token, clock::now() + options.startup_timeout);
  return rdma(launch.rank, launch.size, session.store.get(), std::move(options), spans_hosts, token, launch.master_addr);
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

rdma::rdma(int rank, int size, bootstrap::key_value_store* store, rdma_options options, bool spans_hosts,
           const auth::job_token& token, const std::string& route_to)
    : wire_transport(std::make_unique<rdma_detail::engine>(checked_rank(rank, size), size,
                                                           rdma_detail::choose_provider(options.provider, spans_hosts),
                                                           options.limits)),
      options_(std::move(options)), spans_hosts_(spans_hosts) {
  if (size > 1) {
    std::string route = route_to;
    if (route.empty()) {
      char name[256] = {};
      route = ::gethostname(name, sizeof name - 1) == 0 ? name : "localhost";
    }
    const auto where = tcp_detail::choose_interface(settings::text("COLLECTIVES_SOCKET_IFNAME").value_or(""), route);
    door_ = std::make_shared<rdma_detail::door>(where.address, token, auth::default_handshake_limit);
    meet(*store, clock::now() + options_.startup_timeout);
  }
  if (log::enabled(log::level::info)) log::info(describe());
}

rdma rdma::shrink(deadline until) {
  abort();
  if (size() == 1) return rdma(0, 1, nullptr, options_, spans_hosts_, door_ ? door_->token() : auth::job_token::from_env(false), {});
  if (!door_)
    throw error(errc::invalid_config, "rdma rank " + std::to_string(rank()) +
                                          ": cannot shrink: some rank of this group published no door at start-up");
  door_->admit();
  door_->meanwhile = [this] {
    try {
      wire_->wait_for_activity(clock::now());  // it tells the abort, and waits no longer
    } catch (...) {  // the old group's failure: the agreement finds out for itself
    }
  };
  tcp_detail::shrink_outcome outcome;
  try {
    outcome = tcp_detail::agree_on_survivors(*door_, {rank(), size(), ++shrinks_, until});
  } catch (...) {
    door_->stop_admitting();
    throw;
  }
  door_->stop_admitting();
  const auto me = std::find(outcome.survivors.begin(), outcome.survivors.end(), rank());
  if (me == outcome.survivors.end())
    throw error(errc::invalid_group, "rdma rank " + std::to_string(rank()) + ": the survivors left this rank out of the shrunk group");
  return rdma(*this, int(me - outcome.survivors.begin()), std::move(outcome), until);
}

namespace rdma_detail {

// Swaps this rank's new endpoint address for each survivor's, over the agreement's
// connections (4 bytes of length, then the address). A survivor whose connection fails
// meanwhile, or that is left without one, keeps an empty address: it failed during the shrink.
inline std::vector<std::string> swap_addresses(door& d, const std::vector<int>& survivors, int rank, const std::string& mine,
                                               std::vector<std::shared_ptr<boost::asio::ip::tcp::socket>>& sockets,
                                               deadline until) {
  namespace asio = boost::asio;
  const std::size_t n = survivors.size();
  std::vector<std::string> addresses(n);
  addresses[std::size_t(rank)] = mine;
  std::vector<unsigned char> said(4 + mine.size());
  tcp_detail::wire::put(said.data(), std::uint32_t(mine.size()), 4);
  std::copy(mine.begin(), mine.end(), said.begin() + 4);
  struct incoming {
    std::array<unsigned char, 4> length{};
    std::string address;
    bool done = false;
  };
  std::vector<incoming> heard(n);
  int waiting = 0;  // reads and writes: a peer reads this rank's address only once it is written
  d.io().restart();
  for (std::size_t r = 0; r < n; ++r) {
    auto& s = sockets[std::size_t(survivors[r])];
    if (int(r) == rank || !s || !s->is_open()) continue;
    waiting += 2;
    asio::async_write(*s, asio::buffer(said), [&](const boost::system::error_code&, std::size_t) { --waiting; });
    asio::async_read(*s, asio::buffer(heard[r].length), [&, r, s](const boost::system::error_code& ec, std::size_t) {
      const auto length = tcp_detail::wire::get(heard[r].length.data(), 4);
      if (ec || length == 0 || length > 4096) return void(--waiting);
      heard[r].address.resize(std::size_t(length));
      asio::async_read(*s, asio::buffer(heard[r].address), [&, r](const boost::system::error_code& ec2, std::size_t) {
        heard[r].done = !ec2;
        --waiting;
      });
    });
  }
  while (waiting > 0 && clock::now() < until) d.io().run_one_until(until);
  for (auto& s : sockets)
    if (s) tcp_detail::close_quietly(*s);
  d.io().poll();  // the handlers of reads the close ended
  for (std::size_t r = 0; r < n; ++r)
    if (heard[r].done) addresses[r] = std::move(heard[r].address);
  return addresses;
}

}  // namespace rdma_detail

rdma::rdma(rdma& old, int rank, tcp_detail::shrink_outcome&& outcome, deadline until)
    : wire_transport(std::make_unique<rdma_detail::engine>(rank, int(outcome.survivors.size()),
                                                           rdma_detail::choose_provider(old.options_.provider, old.spans_hosts_),
                                                           old.options_.limits)),
      options_(old.options_), spans_hosts_(old.spans_hosts_), shrinks_(old.shrinks_), place_(old.place_),
      door_(old.door_) {
  const std::vector<int>& survivors = outcome.survivors;
  std::vector<std::string> addresses =
      rdma_detail::swap_addresses(*door_, survivors, rank, wire_->address(), outcome.sockets, until);
  std::vector<boost::asio::ip::tcp::endpoint> doors;
  std::vector<int> lost;
  for (std::size_t r = 0; r < survivors.size(); ++r) {
    const auto was = std::size_t(survivors[r]);
    places_.push_back(old.places_[was]);
    doors.push_back(old.door_->doors()[was]);
    if (!old.hosts_.empty()) hosts_.push_back(old.hosts_[was]);
    if (addresses[r].empty()) {  // its old endpoint stands in: nothing is ever sent to it
      addresses[r] = old.addresses_[was];
      lost.push_back(int(r));
    }
  }
  if (!hosts_.empty()) hosts_ = bootstrap::number_hosts(std::span<const int>(hosts_));
  addresses_ = addresses;
  wire_->connect(addresses, places_, place_);
  for (const int r : lost) wire_->lose_at_start(r, "lost rank " + std::to_string(r) + ": it failed during the shrink");
  door_->enter_group(std::move(doors), shrinks_);
  // Greeted as at start-up, so that each pair connects once; a group that lost a rank
  // already reports it at its first call, and its survivors shrink again.
  if (lost.empty()) greet_everyone({reserved_call::rdma_hello, 0}, until);
  if (log::enabled(log::level::info)) log::info(describe() + " (shrunk from " + std::to_string(old.size()) + " ranks)");
}

void rdma::meet(bootstrap::key_value_store& store, deadline until) {
  // Every rank creates its communicators in the same order, so each one's count
  // names the same group on every rank, even in a store that outlives a group.
  const auto generation = store.add("collectives/rdma/communicators/" + std::to_string(rank()), 1);
  const std::string prefix = "collectives/rdma/" + std::to_string(generation) + "/";
  // A peer's pid is watched only where it means the same process; "-" where unknown.
  std::string place = bootstrap::pid_space_identity();
  if (place.empty()) place = "-" + std::to_string(rank());
  // Then the host (bootstrap::host_fingerprint, as the hosts' exchange would learn it),
  // and last the door a shrink meets at.
  store.set(prefix + std::to_string(rank()), place + " " + std::to_string(::getpid()) + " " + to_hex(wire_->address()) +
                                                 " " + std::to_string(bootstrap::host_fingerprint()) + " " +
                                                 tcp_detail::format_endpoint(door_->endpoint()));
  const auto ranks = std::size_t(size());
  std::vector<std::string> addresses(ranks);
  std::vector<rdma_detail::peer_place> places(ranks);
  std::vector<std::uint64_t> host_of_rank(ranks);
  std::vector<tcp_detail::tcp::endpoint> doors(ranks);
  bool every_host_known = true, every_door_known = true;
  for (int r = 0; r < size(); ++r) {
    std::istringstream in(store.get(prefix + std::to_string(r), until));
    std::string hex;
    if (!(in >> places[std::size_t(r)].host >> places[std::size_t(r)].pid >> hex) || !from_hex(hex, addresses[std::size_t(r)]))
      throw error(errc::protocol_error, "rdma: rank " + std::to_string(r) + " published no endpoint address in the store");
    every_host_known = every_host_known && bool(in >> host_of_rank[std::size_t(r)]);
    std::string door;
    every_door_known = every_door_known && bool(in >> door);
    if (every_door_known) doors[std::size_t(r)] = tcp_detail::parse_endpoint(door);
  }
  if (every_door_known) door_->enter_group(std::move(doors), 0);
  else door_.reset();  // some rank published none: this group cannot shrink
  if (every_host_known) hosts_ = bootstrap::number_hosts(std::span<const std::uint64_t>(host_of_rank));
  wire_->connect(addresses, places, place);
  place_ = place;
  places_ = places;
  addresses_ = addresses;
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
