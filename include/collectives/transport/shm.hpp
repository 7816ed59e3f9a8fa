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

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "../bootstrap/environment.hpp"
#include "../bootstrap/job_token.hpp"
#include "../communicator.hpp"
#include "../concepts/transport.hpp"
#include "../error.hpp"
#include "../log.hpp"
#include "../settings.hpp"
#include "detail/wire_transport.hpp"
#include "shm/engine.hpp"
#include "shm/segment.hpp"
#include "shm/segment_name.hpp"

namespace collectives {

struct shm_options {
  // Each FIFO holds `slots` fragments of up to `slot_bytes`: the pipelining chunk. The
  // segment takes about size * (size - 1) * slots * slot_bytes bytes of /dev/shm.
  std::size_t slot_bytes = 64 * 1024;
  std::size_t slots = 8;
  std::chrono::milliseconds startup_timeout{std::chrono::seconds{60}};
  shm_detail::engine_limits limits{};

  // COLLECTIVES_STARTUP_TIMEOUT (seconds), COLLECTIVES_SHM_SLOT_BYTES, COLLECTIVES_SHM_SLOTS,
  // COLLECTIVES_SHM_POLL_US (how long a wait polls before it sleeps, however many cores).
  static shm_options from_env() {
    shm_options o;
    if (auto t = settings::seconds("COLLECTIVES_STARTUP_TIMEOUT")) o.startup_timeout = *t;
    if (auto b = settings::byte_size("COLLECTIVES_SHM_SLOT_BYTES")) o.slot_bytes = *b;
    if (auto n = settings::whole_number("COLLECTIVES_SHM_SLOTS")) o.slots = static_cast<std::size_t>(*n);
    if (auto us = settings::whole_number("COLLECTIVES_SHM_POLL_US"))
      o.limits.poll_time = o.limits.oversubscribed_poll_time = std::chrono::microseconds{*us};
    return o;
  }
};

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
                                           .ranks_can_be_processes = true};

  // Joins the group that every one of `size` ranks names `segment` (a file name in
  // /dev/shm, without a slash). Returns once every rank has mapped the segment.
  shm(int rank, int size, std::string segment, shm_options options = shm_options::from_env())
      : wire_transport(std::make_unique<shm_detail::engine>(checked_rank(rank, size), start(rank, size, std::move(segment), options),
                                                            options.limits)) {
    for (int p = 0; p < size; ++p)
      if (p != rank && same_pid_namespace(p)) wire_->watch().watch(p, shared_segment().rank(p).pid);
    if (log::enabled(log::level::info)) log::info(describe());
  }

  // The job the launcher described; all its ranks must be on this host.
  static shm join(const bootstrap::launch_info& launch, const auth::job_token& token,
                  shm_options options = shm_options::from_env()) {
    if (launch.local_size != launch.size)
      throw error(errc::invalid_config,
                  "shm: the launcher (" + launch.origin + ") puts " + std::to_string(launch.local_size) + " of the job's " +
                      std::to_string(launch.size) + " ranks on this host, and shm joins only ranks of one host; use tcp or "
                      "automatic_transport, or set LOCAL_RANK and LOCAL_WORLD_SIZE if all run here");
    return shm(launch.rank, launch.size, segment_name(launch, token), options);
  }

  // RANK/WORLD_SIZE/LOCAL_* (or mpirun's and srun's variables) and COLLECTIVES_JOB_TOKEN.
  static shm from_env(shm_options options = shm_options::from_env()) {
    const auto launch = bootstrap::detect_launch();  // first: an error in the launch comes alone
    return join(launch, auth::job_token::from_env(bootstrap::warns_of_default_token(launch)), options);
  }

  // The segment the launch's `generation`-th communicator uses, the same on every rank
  // because every rank creates its communicators in the same order.
  static std::string segment_name(const bootstrap::launch_info& launch, const auth::job_token& token) {
    std::string identity = launch.origin + "|" + launch.master_addr + ":" + std::to_string(launch.master_port) + "|" +
                           std::to_string(launch.size);
    for (const char* v : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID", "SLURM_STEP_ID"})
      if (const char* value = std::getenv(v)) identity.append("|").append(value);
    identity.append("|").append(launch.job_on_this_host);
    const std::string base = shm_detail::segment_prefix(token.secret()) + shm_detail::hex(shm_detail::fingerprint(identity), 8);
    static std::mutex mutex;
    static std::map<std::string, int> made;
    std::lock_guard lock(mutex);
    return base + "-" + std::to_string(made[base]++);
  }

  shm(shm&&) noexcept = default;
  shm& operator=(shm&&) noexcept = default;

  std::string describe() const {
    std::string s = "shm rank " + std::to_string(rank()) + " of " + std::to_string(size());
    if (size() == 1) return s + " (no segment)";
    const auto& shape = shared_segment().shape();
    s += " through /dev/shm/" + shared_segment().name() + " (" + std::to_string(shape.total_bytes() >> 10) + " KiB, " +
         std::to_string(shape.slots) + " slots of " + std::to_string(shape.slot_bytes >> 10) + " KiB per pair); pids";
    for (int r = 0; r < size(); ++r) s.append(" ").append(std::to_string(r)).append("=").append(std::to_string(shared_segment().rank(r).pid));
    return s;
  }

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
  static shm_detail::segment start(int rank, int size, std::string name, const shm_options& options) {
    using namespace shm_detail;
    checked_rank(rank, size);
    if (size == 1) return {};
    if (name.empty() || name.find('/') != std::string::npos)
      throw error(errc::invalid_config, "shm: segment name '" + name + "' must be a non-empty file name without '/'");
    const layout shape{size, (std::max<std::size_t>(options.slot_bytes, 64) + line - 1) / line * line, std::max<std::size_t>(options.slots, 2)};
    const deadline until = clock::now() + options.startup_timeout;
    segment seg;
    if (rank == 0) {
      seg = segment::create(name, shape, until);
    } else {
      for (auto pause = std::chrono::microseconds(200); !(seg = segment::attach(name, shape));) {
        if (clock::now() >= until)
          throw error(errc::timeout, "shm rank " + std::to_string(rank) + ": start-up timed out waiting for rank 0 to create /dev/shm/" +
                                         name + " (is it running on this host, with the same COLLECTIVES_JOB_TOKEN?)");
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(10000));
      }
    }
    rank_record& me = seg.rank(rank);
    me.pid = ::getpid();
    me.pid_namespace = pid_namespace_id();
    shared(me.state).store(attached, std::memory_order_release);
    shared(seg.header().attached).fetch_add(1, std::memory_order_acq_rel);
    try {
      await_everyone(seg, rank, until);
    } catch (...) {
      seg.unlink_name();
      throw;
    }
    seg.unlink_name();
    return seg;
  }

  static void await_everyone(const shm_detail::segment& seg, int rank, deadline until) {
    using namespace shm_detail;
    const int size = seg.shape().size;
    for (auto pause = std::chrono::microseconds(50); shared(seg.header().attached).load(std::memory_order_acquire) < std::uint32_t(size);) {
      if (rank != 0 && !process_alive(seg.header().creator_pid))
        throw error(errc::peer_lost, "shm rank " + std::to_string(rank) + ": rank 0 died during start-up");
      if (clock::now() >= until) {
        std::string missing;
        for (int r = 0; r < size; ++r)
          if (shared(seg.rank(r).state).load(std::memory_order_acquire) == absent) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        throw error(errc::timeout, "shm rank " + std::to_string(rank) + ": start-up timed out; rank(s) " + missing +
                                       " never mapped /dev/shm/" + seg.name() +
                                       " (are they running on this host, with the same COLLECTIVES_JOB_TOKEN?)");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(5000));
    }
  }
};

}  // namespace collectives
