// Shared-memory transport: ranks that are processes of one host move messages through
// a POSIX shared-memory segment instead of sockets.
//
//   auto comm = collectives::communicator<collectives::shm>::from_env();
//
// Each ordered pair of ranks has a single-producer single-consumer FIFO of fixed
// slots; large messages are pipelined through it a slot at a time, and a fused
// receive reduces straight out of the slot. Waiting spins briefly, then sleeps on a
// futex, so ranks may outnumber cores. A rank that dies is noticed through its pidfd;
// one that closes its communicator says so. The segment's name carries the job, and
// the name is removed as soon as every rank has mapped it, so nothing is left in
// /dev/shm whether the job ends well or not. Needs nothing beyond the C library.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "../../bootstrap/environment.hpp"
#include "../../bootstrap/job_token.hpp"
#include "../../config.hpp"
#include "../../concepts/transport.hpp"
#include "../../error.hpp"
#include "../../log.hpp"
#include "../../settings.hpp"
#include "../detail/wire_transport.hpp"
#include "engine.hpp"
#include "options.hpp"
#include "segment.hpp"
#include "segment_name.hpp"
#include "shrink.hpp"

namespace collectives {

class shm : public transport_detail::wire_transport<shm_detail::engine> {
 public:
  // Its name in COLLECTIVES_TRANSPORT (concepts/transport_selection.hpp).
  static constexpr std::string_view selection_name = "shm";

  // Figures of these 2-core machines; the automatic choice only needs their proportions.
  static constexpr link_costs costs{.latency_s = 1e-6, .per_message_s = 0.3e-6,
                                    .seconds_per_byte = 1.0 / 5e9, .reduce_seconds_per_byte = 1.0 / 8e9};
  // With the default engine_limits: a large early message stays in its FIFO.
  static constexpr transport_traits traits{.sends = send_completion::when_buffered,
                                           .fifo_equal_tags = true,
                                           .early_message_bytes = shm_detail::engine_limits{}.early.message_bytes,
                                           .large_early_message_blocks_peer = true,
                                           .sender_sees_size_refusal = false,
                                           .cancel_halfway = cancel_mid_transfer::link_fails,
                                           .reports_departed_peer = true,
                                           .ranks_can_be_processes = true,
                                           .one_host = true};

  // Joins the group that every one of `size` ranks names `segment` (a file name in
  // /dev/shm, without a slash). Returns once every rank has mapped the segment.
  COLLECTIVES_DECL shm(int rank, int size, std::string segment, shm_options options = shm_options::from_env());

  // The job the launcher described; all its ranks must be on this host.
  COLLECTIVES_DECL static shm join(const bootstrap::launch_info& launch, const auth::job_token& token,
                                   shm_options options = shm_options::from_env());

  // RANK/WORLD_SIZE/LOCAL_* (or mpirun's and srun's variables) and COLLECTIVES_JOB_TOKEN.
  COLLECTIVES_DECL static shm from_env(shm_options options = shm_options::from_env());

  // The segment the launch's `generation`-th communicator uses, the same on every rank
  // because every rank creates its communicators in the same order.
  COLLECTIVES_DECL static std::string segment_name(const bootstrap::launch_info& launch, const auth::job_token& token);

  shm(shm&&) noexcept = default;
  shm& operator=(shm&&) noexcept = default;

  COLLECTIVES_DECL std::string describe() const;

  // Whether this rank reads `peer`'s large messages straight from its memory, in one
  // copy (shm_options::limits.one_copy_bytes), rather than through their FIFO.
  bool reads_memory_of(int peer) const { return wire_->reads_memory_of(peer); }

  // The ranks that live, as a new group in a new segment, ranks renumbered in order;
  // every survivor calls it and gets the same group (docs/fault-tolerance.md). This
  // group is aborted first. Throws errc::timeout when a live rank does not call it
  // by `until`.
  COLLECTIVES_DECL shm shrink(deadline until);

 private:
  const shm_detail::segment& shared_segment() const { return wire_->shared_segment(); }

  bool same_pid_namespace(int peer) const {
    return shared_segment().rank(peer).pid_namespace == shared_segment().rank(rank()).pid_namespace;
  }

  static int checked_rank(int rank, int size) {
    if (size < 1 || rank < 0 || rank >= size)
      throw error(errc::invalid_group, "shm: rank " + std::to_string(rank) + " is not in a group of " + std::to_string(size));
    return rank;
  }

  // Creates (rank 0) or maps (the others) the segment, and waits until every rank has
  // mapped it; then removes its name.
  COLLECTIVES_DECL static shm_detail::segment start(int rank, int size, std::string name, const shm_options& options);

  COLLECTIVES_DECL static void await_everyone(const shm_detail::segment& seg, int rank, deadline until);

  // The group a shrink left: its members' pids, by new rank. Any member creates the
  // segment, and a member that dies before mapping it is left for the group to
  // report lost, so the survivors always get their group.
  COLLECTIVES_DECL shm(int rank, std::string segment, shm_options options, const std::vector<int>& pids);
  COLLECTIVES_DECL static shm_detail::segment start_shrunk(int rank, std::string name, const shm_options& options,
                                                           const std::vector<int>& pids);
  // The segment's record of this rank, and the count of ranks that mapped it.
  COLLECTIVES_DECL static void join_segment(shm_detail::segment& seg, int rank, const shm_options& options);

  shm_options options_;
  std::uint32_t shrinks_ = 0;  // attempts so far, counted alike on every survivor
};

}  // namespace collectives

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "transport.ipp"
#endif
