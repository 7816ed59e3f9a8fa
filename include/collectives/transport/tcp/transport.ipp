// The TCP transport's start-up (transport.hpp): inline in header-only use, compiled once
// into collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <span>
#include <utility>

#include "transport.hpp"

#include "../../bootstrap/auth.hpp"
#include "../../bootstrap/host_identity.hpp"
#include "../../bootstrap/rendezvous.hpp"
#include "../../log.hpp"
#include "address.hpp"
#include "engine.hpp"
#include "mesh.hpp"
#include "shrink.hpp"

namespace collectives {

namespace tcp_detail {
struct group_record {
  local_interface interface;
  mesh links;  // after the start-up: every rank's address record and where this one listens
};
struct door {
  std::shared_ptr<tcp::acceptor> acceptor;
};
}  // namespace tcp_detail

tcp tcp::join(const bootstrap::launch_info& launch, const auth::job_token& given_token, tcp_options options) {
  // Jobs whose derived store ports meet must not admit each other (launch_info).
  const auth::job_token token = given_token.is_public_default() && !launch.derived_port_of_job.empty()
                                    ? auth::job_token(given_token.secret() + "|" + launch.derived_port_of_job)
                                    : given_token;
  if (options.route_to.empty()) options.route_to = launch.master_addr;
  if (launch.size == 1) return tcp(launch.rank, 1, nullptr, token, std::move(options));  // nobody to meet
  auto session = bootstrap::open_store(launch, token, clock::now() + options.startup_timeout);
  return tcp(launch.rank, launch.size, session.store.get(), session.agreed_token ? *session.agreed_token : token,
             std::move(options));
  // The store closes here: once every rank has met every other, none needs it.
}

tcp::tcp(int rank, int size, bootstrap::key_value_store* store, const auth::job_token& token, tcp_options options)
    : wire_transport(std::make_unique<tcp_detail::engine>(checked_rank(rank, size), size, options.limits)),
      group_(std::make_unique<tcp_detail::group_record>()), token_(token), options_(options) {
  if (size == 1) return;
  const deadline until = clock::now() + options.startup_timeout;
  // Every rank creates its communicators in the same order, so each one's count
  // names the same group on every rank, even in a store that outlives a group.
  const auto generation = store->add("collectives/tcp/communicators/" + std::to_string(rank), 1);
  group_->interface = tcp_detail::choose_interface(options.interface, route_target(options.route_to));
  group_->links = tcp_detail::connect_mesh(wire_->io(), rank, size, *store,
                                           "collectives/tcp/" + std::to_string(generation) + "/address/", token,
                                           group_->interface, until, {options.handshake_limit});
  wire_->adopt(std::move(group_->links.peers));
  open_door({std::move(group_->links.acceptor)});
  greet_everyone({reserved_call::tcp_hello, 0}, until);
  if (log::enabled(log::level::info)) log::info(describe());
}

tcp tcp::shrink(deadline until) {
  abort();
  if (size() == 1) return tcp(0, 1, nullptr, token_, options_);
  wire_->start_due_reads();  // the old links read on during the agreement: the news of the abort comes that way
  auto outcome = tcp_detail::agree_on_survivors(*wire_, {rank(), size(), ++shrinks_, until});
  const auto me = std::find(outcome.survivors.begin(), outcome.survivors.end(), rank());
  if (me == outcome.survivors.end())
    throw error(errc::invalid_group, "tcp rank " + std::to_string(rank()) + ": the survivors left this rank out of the shrunk group");
  return tcp(*this, int(me - outcome.survivors.begin()), std::move(outcome));
}

namespace tcp_detail {
// The same socket, now on `io`.
template <class Socket>
std::shared_ptr<Socket> moved_to(asio::io_context& io, Socket& s) {
  const auto protocol = s.local_endpoint().protocol();
  auto moved = std::make_shared<Socket>(io);
  moved->assign(protocol, s.release());
  return moved;
}
}  // namespace tcp_detail

tcp::tcp(tcp& old, int rank, tcp_detail::shrink_outcome&& outcome)
    : wire_transport(std::make_unique<tcp_detail::engine>(rank, int(outcome.survivors.size()), old.options_.limits)),
      group_(std::make_unique<tcp_detail::group_record>()), token_(old.token_), options_(old.options_),
      shrinks_(old.shrinks_) {
  const std::vector<int>& survivors = outcome.survivors;
  auto& sockets = outcome.sockets;
  group_->interface = old.group_->interface;
  std::vector<std::shared_ptr<tcp_detail::tcp::socket>> links(survivors.size());
  for (std::size_t r = 0; r < survivors.size(); ++r) {
    group_->links.addresses.push_back(old.group_->links.addresses[std::size_t(survivors[r])]);
    if (int(r) == rank) continue;
    auto& s = sockets[std::size_t(survivors[r])];
    if (s && s->is_open()) {
      links[r] = tcp_detail::moved_to(wire_->io(), *s);
    } else {  // a link that is never opened, to a peer lost from the start
      links[r] = std::make_shared<tcp_detail::tcp::socket>(wire_->io());
      wire_->lose_at_start(int(r), "lost rank " + std::to_string(r) + ": it failed during the shrink");
    }
  }
  group_->links.listened_on = old.group_->links.listened_on;
  wire_->set_epoch(shrinks_);
  // The old door stops admitting first, so that a visit whose handshake ends meanwhile
  // is among those moved below. (One let in later still is dropped with the old group:
  // its visitor comes again, shrink.hpp.)
  const auto door = old.wire_->close_door();
  // Ranks already shrinking this group came to the old one's door: their visits wait here.
  for (auto& v : std::exchange(old.wire_->early_agreements, {}))
    if (v.attempt > shrinks_ && v.socket->is_open())
      wire_->early_agreements.push_back({v.rank, v.attempt, tcp_detail::moved_to(wire_->io(), *v.socket)});
  wire_->adopt(std::move(links));
  if (door && door->is_open()) open_door({tcp_detail::moved_to(wire_->io(), *door)});
  if (log::enabled(log::level::info)) log::info(describe() + " (shrunk from " + std::to_string(old.size()) + " ranks)");
}

void tcp::open_door(tcp_detail::door&& door) {
  std::vector<tcp_detail::tcp::endpoint> doors;
  for (const auto& a : group_->links.addresses)
    doors.push_back(tcp_detail::parse_endpoint(tcp_detail::endpoint_of_record(a)));
  wire_->open_door(std::move(door.acceptor), std::move(doors), token_, options_.handshake_limit);
}

std::string tcp::route_target(const std::string& host) {
  if (!host.empty()) return host;
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("localhost");
}

std::string tcp::describe() const {
  std::string s = "tcp rank " + std::to_string(rank()) + " of " + std::to_string(size());
  if (size() == 1) return s + " (no connections)";
  const auto& links = group_->links;
  s += " on " + (group_->interface.name.empty() ? std::string("?") : group_->interface.name) + " " +
       tcp_detail::format_endpoint(links.listened_on) + "; ranks at";
  for (std::size_t r = 0; r < links.addresses.size(); ++r) {
    s.append(" ").append(std::to_string(r)).append("=").append(tcp_detail::endpoint_of_record(links.addresses[r]));
  }
  return s;
}

std::vector<int> tcp::hosts() const {
  if (size() == 1) return {0};
  std::vector<std::string_view> host_of_rank;
  for (const auto& record : group_->links.addresses) {
    host_of_rank.push_back(tcp_detail::host_of_record(record));
    if (host_of_rank.back().empty()) return {};  // a record without its host: not known
  }
  return bootstrap::number_hosts(std::span<const std::string_view>(host_of_rank));
}

tcp tcp::from_env(tcp_options options) {
  const auto launch = bootstrap::detect_launch();  // first: an error in the launch comes alone
  return join(launch, auth::job_token::from_env(bootstrap::warns_of_default_token(launch)), std::move(options));
}

tcp::tcp(tcp&&) noexcept = default;
tcp& tcp::operator=(tcp&&) noexcept = default;
tcp::~tcp() = default;

const tcp_detail::local_interface& tcp::interface() const noexcept { return group_->interface; }

int tcp::rank() const { return wire_transport::rank(); }
int tcp::size() const { return wire_transport::size(); }
tcp::request tcp::post_send(int peer, message_tag tag, std::span<const std::byte> data) {
  return wire_transport::post_send(peer, tag, data);
}
tcp::request tcp::post_recv(int peer, message_tag tag, std::span<std::byte> into) {
  return wire_transport::post_recv(peer, tag, into);
}
tcp::request tcp::post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink) {
  return wire_transport::post_recv_reduce(peer, tag, bytes, granule, sink);
}
bool tcp::test(request& r) { return wire_transport::test(r); }
bool tcp::wait_for_activity(deadline until) { return wire_transport::wait_for_activity(until); }
void tcp::cancel(request& r) noexcept { wire_transport::cancel(r); }
void tcp::abort() { wire_transport::abort(); }
void tcp::note_failure(std::string_view what) noexcept { wire_transport::note_failure(what); }

}  // namespace collectives
