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

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "../../bootstrap/environment.hpp"
#include "../../bootstrap/job_token.hpp"
#include "../../bootstrap/store.hpp"
#include "../../config.hpp"
#include "../../concepts/transport.hpp"
#include "../../error.hpp"
#include "../detail/wire_transport.hpp"
#include "options.hpp"

namespace collectives {

namespace tcp_detail {
// Boost.Asio's types stay in the bodies (transport.ipp and the headers it includes):
// a program that links collectives::compiled and includes this header does not
// compile Asio (3.3 s of g++ a unit, a third of an example's).
class engine;
struct local_interface;
struct group_record;  // the chosen interface and every rank's address record
struct shrink_outcome;
struct door;
}  // namespace tcp_detail

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
  COLLECTIVES_DECL static tcp join(const bootstrap::launch_info& launch, const auth::job_token& token,
                                   tcp_options options = tcp_options::from_env());

  // The job as the launcher described it (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT,
  // or mpirun's and srun's variables) and COLLECTIVES_JOB_TOKEN.
  COLLECTIVES_DECL static tcp from_env(tcp_options options = tcp_options::from_env());

  COLLECTIVES_DECL tcp(tcp&&) noexcept;
  COLLECTIVES_DECL tcp& operator=(tcp&&) noexcept;
  COLLECTIVES_DECL ~tcp();

  // The Transport concept's calls (wire_transport's, here where the engine's type is
  // complete).
  COLLECTIVES_DECL int rank() const;
  COLLECTIVES_DECL int size() const;
  COLLECTIVES_DECL request post_send(int peer, message_tag tag, std::span<const std::byte> data);
  COLLECTIVES_DECL request post_recv(int peer, message_tag tag, std::span<std::byte> into);
  COLLECTIVES_DECL request post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule,
                                            chunk_sink sink);
  COLLECTIVES_DECL bool test(request& r);
  COLLECTIVES_DECL bool wait_for_activity(deadline until);
  COLLECTIVES_DECL void cancel(request& r) noexcept;
  COLLECTIVES_DECL void abort();
  COLLECTIVES_DECL void note_failure(std::string_view what) noexcept;

  // Where this rank listens and every rank's address, for logs.
  COLLECTIVES_DECL std::string describe() const;

  // Each rank's host, as the ranks published them with their addresses (hosts_known_to).
  COLLECTIVES_DECL std::vector<int> hosts() const;

  // The ranks that live, as a new group over new connections, ranks renumbered in
  // order; every survivor calls it and gets the same group, even when more ranks fail
  // meanwhile (docs/fault-tolerance.md). This group is aborted first. Throws
  // errc::timeout when a live rank does not call it by `until`.
  COLLECTIVES_DECL tcp shrink(deadline until);
  COLLECTIVES_DECL const tcp_detail::local_interface& interface() const noexcept;

 private:
  COLLECTIVES_DECL tcp(int rank, int size, bootstrap::key_value_store* store, const auth::job_token& token,
                       tcp_options options);

  static int checked_rank(int rank, int size) {
    if (size < 1 || rank < 0 || rank >= size)
      throw error(errc::invalid_group, "tcp: rank " + std::to_string(rank) + " is not in a group of " + std::to_string(size));
    return rank;
  }

  COLLECTIVES_DECL static std::string route_target(const std::string& host);

  // The group a shrink left: this rank's connections to the others (a null one for a
  // survivor that failed since), made on the old group's io_context; the old group's
  // door moves here.
  COLLECTIVES_DECL tcp(tcp& old, int rank, tcp_detail::shrink_outcome&& outcome);
  // Admits visitors at the door from now on (tcp/door.hpp).
  COLLECTIVES_DECL void open_door(tcp_detail::door&& door);

  std::unique_ptr<tcp_detail::group_record> group_;
  auth::job_token token_;
  tcp_options options_;
  // Shrink attempts so far, counted alike on every survivor and on from the group this
  // one was shrunk from, so that a visitor of an earlier attempt at the same door is
  // never taken for one of this attempt.
  std::uint32_t shrinks_ = 0;
};

}  // namespace collectives

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "transport.ipp"
#endif
