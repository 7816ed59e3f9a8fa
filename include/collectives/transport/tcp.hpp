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

#include "../bootstrap/auth.hpp"
#include "../bootstrap/environment.hpp"
#include "../bootstrap/rendezvous.hpp"
#include "../bootstrap/store.hpp"
#include "../communicator.hpp"
#include "../concepts/transport.hpp"
#include "../error.hpp"
#include "../log.hpp"
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
    if (const char* v = std::getenv("COLLECTIVES_SOCKET_IFNAME")) o.interface = v;
    if (const char* v = std::getenv("COLLECTIVES_STARTUP_TIMEOUT")) {
      char* end = nullptr;
      const double seconds = std::strtod(v, &end);
      if (end == v || *end != '\0' || !(seconds > 0))
        throw error(errc::invalid_config, std::string("COLLECTIVES_STARTUP_TIMEOUT=") + v + " is not a positive number of seconds");
      o.startup_timeout = std::chrono::milliseconds{static_cast<long long>(seconds * 1000)};
    }
    return o;
  }
};

class tcp {
 public:
  // Loopback figures of these machines; other networks differ, and the automatic
  // choice only needs their proportions.
  static constexpr link_costs costs{.latency_s = 25e-6, .per_message_s = 4e-6,
                                    .seconds_per_byte = 1.0 / 2.5e9, .reduce_seconds_per_byte = 1.0 / 8e9};

  struct request {
    std::uint32_t slot = tcp_detail::no_slot;
  };

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
    return tcp(launch.rank, launch.size, session.store.get(), token, std::move(options));
    // The store closes here: once every rank has met every other, none needs it.
  }

  // The job as the launcher described it (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT,
  // or mpirun's and srun's variables) and COLLECTIVES_JOB_TOKEN.
  static tcp from_env(tcp_options options = tcp_options::from_env()) {
    return join(bootstrap::detect_launch(), auth::job_token::from_env(), std::move(options));
  }

  tcp(tcp&&) noexcept = default;
  tcp& operator=(tcp&&) noexcept = default;

  int rank() const { return engine_->rank(); }
  int size() const { return engine_->size(); }

  request post_send(int peer, message_tag tag, std::span<const std::byte> data) { return {engine_->post_send(peer, tag, data)}; }
  request post_recv(int peer, message_tag tag, std::span<std::byte> into) { return {engine_->post_recv(peer, tag, into)}; }
  request post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink) {
    return {engine_->post_recv_reduce(peer, tag, bytes, granule, sink)};
  }
  bool test(request& r) { return engine_->test(r.slot); }
  bool wait_for_activity(deadline until) { return engine_->wait_for_activity(until); }
  void cancel(request& r) noexcept { engine_->cancel(r.slot); }
  void abort() { engine_->abort(); }

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
      : engine_(std::make_unique<tcp_detail::engine>(checked_rank(rank, size), size, options.limits)) {
    if (size == 1) return;
    const deadline until = clock::now() + options.startup_timeout;
    // Every rank creates its communicators in the same order, so each one's count
    // names the same group on every rank, even in a store that outlives a group.
    const auto generation = store->add("collectives/tcp/communicators/" + std::to_string(rank), 1);
    interface_ = tcp_detail::choose_interface(options.interface, route_target(options.route_to));
    mesh_ = tcp_detail::connect_mesh(engine_->io(), rank, size, *store,
                                     "collectives/tcp/" + std::to_string(generation) + "/address/", token, interface_,
                                     until, {options.handshake_limit});
    engine_->adopt(std::move(mesh_.peers));
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
    const message_tag hello{UINT64_MAX, 0};
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

  std::unique_ptr<tcp_detail::engine> engine_;
  tcp_detail::local_interface interface_;
  tcp_detail::mesh mesh_;
};

}  // namespace collectives
