// TCP transport on Boost.Asio: ranks in different processes or on different hosts,
// one authenticated, full-duplex connection per pair of ranks. Link with
// collectives::tcp (Boost headers and OpenSSL's libcrypto).
//
//   auto comm = collectives::communicator<collectives::tcp>::from_env();
//
// reads the job from the environment that collectives-run, torchrun-style launchers,
// mpirun or srun set (see docs/tcp.md), meets the other ranks through a store and
// connects to each of them. Waiting sleeps in the kernel, so ranks may outnumber cores.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "../bootstrap/auth.hpp"
#include "../bootstrap/environment.hpp"
#include "../bootstrap/rendezvous.hpp"
#include "../bootstrap/store.hpp"
#include "../communicator.hpp"
#include "../concepts/transport.hpp"
#include "../error.hpp"
#include "../log.hpp"
#include "../settings.hpp"
#include "detail/wire_transport.hpp"
#include "tcp/address.hpp"
#include "tcp/engine.hpp"
#include "tcp/mesh.hpp"

namespace collectives {

struct tcp_options {
  // An interface name ("eth0") or a local address to listen on; empty: the interface
  // that routes to `route_to` (so ranks reach each other the way they reach the store).
  std::string interface;
  std::string route_to;  // a host; join() sets the master's, empty means this host's name
  std::chrono::milliseconds startup_timeout{std::chrono::seconds{60}};
  std::chrono::milliseconds handshake_limit = auth::default_handshake_limit;
  tcp_detail::engine_limits limits{};

  // COLLECTIVES_SOCKET_IFNAME and COLLECTIVES_STARTUP_TIMEOUT (seconds).
  static tcp_options from_env() {
    tcp_options o;
    if (auto name = settings::text("COLLECTIVES_SOCKET_IFNAME")) o.interface = std::move(*name);
    if (auto t = settings::seconds("COLLECTIVES_STARTUP_TIMEOUT")) o.startup_timeout = *t;
    return o;
  }
};

class tcp : public transport_detail::wire_transport<tcp_detail::engine> {
 public:
  // Its name in COLLECTIVES_TRANSPORT (concepts/transport_selection.hpp).
  static constexpr std::string_view selection_name = "tcp";

  // Loopback figures of these machines; other networks differ, and the automatic
  // choice only needs their proportions.
  static constexpr link_costs costs{.latency_s = 25e-6, .per_message_s = 4e-6,
                                    .seconds_per_byte = 1.0 / 2.5e9, .reduce_seconds_per_byte = 1.0 / 8e9};
  // With the default engine_limits: a large early frame stays in the socket.
  static constexpr transport_traits traits{.sends = send_completion::when_buffered,
                                           .fifo_equal_tags = true,
                                           .early_message_bytes = tcp_detail::engine_limits{}.early.message_bytes,
                                           .large_early_message_blocks_peer = true,
                                           .sender_sees_size_refusal = false,
                                           .cancel_halfway = cancel_mid_transfer::link_fails,
                                           .reports_departed_peer = true,
                                           .ranks_can_be_processes = true};

  // Joins the group as `rank` of `size`, meeting the other ranks through `store`
  // (any store all ranks share). Returns once every pair of ranks is connected.
  tcp(int rank, int size, bootstrap::key_value_store& store, const auth::job_token& token,
      tcp_options options = tcp_options::from_env())
      : tcp(rank, size, &store, token, std::move(options)) {}

  // Explicit arguments: rank and size, and the store at launch.master_addr:port
  // (served by rank 0), or a file store under COLLECTIVES_STORE_DIR.
  static tcp join(const bootstrap::launch_info& launch, const auth::job_token& token,
                  tcp_options options = tcp_options::from_env()) {
    if (options.route_to.empty()) options.route_to = launch.master_addr;
    if (launch.size == 1) return tcp(launch.rank, 1, nullptr, token, std::move(options));  // nobody to meet
    auto session = bootstrap::open_store(launch, token, clock::now() + options.startup_timeout);
    return tcp(launch.rank, launch.size, session.store.get(), session.agreed_token ? *session.agreed_token : token,
               std::move(options));
    // The store closes here: once every rank has met every other, none needs it.
  }

  // The job as the launcher described it (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT,
  // or mpirun's and srun's variables) and COLLECTIVES_JOB_TOKEN.
  static tcp from_env(tcp_options options = tcp_options::from_env()) {
    const auto launch = bootstrap::detect_launch();  // first: an error in the launch comes alone
    return join(launch, auth::job_token::from_env(bootstrap::warns_of_default_token(launch)), std::move(options));
  }

  tcp(tcp&&) noexcept = default;
  tcp& operator=(tcp&&) noexcept = default;

  // Where this rank listens and every rank's address, for logs.
  std::string describe() const {
    std::string s = "tcp rank " + std::to_string(rank()) + " of " + std::to_string(size());
    if (size() == 1) return s + " (no connections)";
    s += " on " + (interface_.name.empty() ? std::string("?") : interface_.name) + " " +
         tcp_detail::format_endpoint(mesh_.listened_on) + "; ranks at";
    for (std::size_t r = 0; r < mesh_.addresses.size(); ++r) {
      s.append(" ").append(std::to_string(r)).append("=").append(mesh_.addresses[r]);
    }
    return s;
  }
  const tcp_detail::local_interface& interface() const noexcept { return interface_; }

 private:
  tcp(int rank, int size, bootstrap::key_value_store* store, const auth::job_token& token, tcp_options options)
      : wire_transport(std::make_unique<tcp_detail::engine>(checked_rank(rank, size), size, options.limits)) {
    if (size == 1) return;
    const deadline until = clock::now() + options.startup_timeout;
    // Every rank creates its communicators in the same order, so each one's count
    // names the same group on every rank, even in a store that outlives a group.
    const auto generation = store->add("collectives/tcp/communicators/" + std::to_string(rank), 1);
    interface_ = tcp_detail::choose_interface(options.interface, route_target(options.route_to));
    mesh_ = tcp_detail::connect_mesh(wire_->io(), rank, size, *store,
                                     "collectives/tcp/" + std::to_string(generation) + "/address/", token, interface_,
                                     until, {options.handshake_limit});
    wire_->adopt(std::move(mesh_.peers));
    meet_everyone(until);
    if (log::enabled(log::level::info)) log::info(describe());
  }

  static int checked_rank(int rank, int size) {
    if (size < 1 || rank < 0 || rank >= size)
      throw error(errc::invalid_group, "tcp: rank " + std::to_string(rank) + " is not in a group of " + std::to_string(size));
    return rank;
  }

  static std::string route_target(const std::string& host) {
    if (!host.empty()) return host;
    char name[256] = {};
    return gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("localhost");
  }

  // A message to and from every peer: when it is done, every rank has finished its
  // start-up, so nobody needs the store any more and the first call finds all ready.
  void meet_everyone(deadline until) {
    std::vector<request> pending;
    const message_tag hello{reserved_call::tcp_hello, 0};
    for (int p = 0; p < size(); ++p)
      if (p != rank()) {
        pending.push_back(post_send(p, hello, {}));
        pending.push_back(post_recv(p, hello, {}));
      }
    try {
      while (!pending.empty()) {
        std::erase_if(pending, [&](request& r) { return test(r); });
        if (pending.empty()) break;
        if (clock::now() >= until || !wait_for_activity(until))
          throw error(errc::timeout, "rank " + std::to_string(rank()) + ": start-up timed out waiting for every rank to connect");
      }
    } catch (...) {
      for (auto& r : pending) cancel(r);
      throw;
    }
  }

  tcp_detail::local_interface interface_;
  tcp_detail::mesh mesh_;
};

}  // namespace collectives
