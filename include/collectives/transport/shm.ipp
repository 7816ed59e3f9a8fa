// The shared-memory transport's start-up (shm.hpp): inline in header-only use,
// compiled once into collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include "shm.hpp"

namespace collectives {

shm::shm(int rank, int size, std::string segment, shm_options options)
    : wire_transport(std::make_unique<shm_detail::engine>(checked_rank(rank, size), start(rank, size, std::move(segment), options),
                                                          options.limits)) {
  for (int p = 0; p < size; ++p)
    if (p != rank && same_pid_namespace(p)) wire_->watch().watch(p, shared_segment().rank(p).pid);
  if (log::enabled(log::level::info)) log::info(describe());
}


shm shm::join(const bootstrap::launch_info& launch, const auth::job_token& token, shm_options options) {
  if (launch.local_size != launch.size)
    throw error(errc::invalid_config,
                "shm: the launcher (" + launch.origin + ") puts " + std::to_string(launch.local_size) + " of the job's " +
                    std::to_string(launch.size) + " ranks on this host, and shm joins only ranks of one host; use tcp or "
                    "automatic_transport, or set LOCAL_RANK and LOCAL_WORLD_SIZE if all run here");
  return shm(launch.rank, launch.size, segment_name(launch, token), options);
}


std::string shm::segment_name(const bootstrap::launch_info& launch, const auth::job_token& token) {
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


std::string shm::describe() const {
  std::string s = "shm rank " + std::to_string(rank()) + " of " + std::to_string(size());
  if (size() == 1) return s + " (no segment)";
  const auto& shape = shared_segment().shape();
  s += " through /dev/shm/" + shared_segment().name() + " (" + std::to_string(shape.total_bytes() >> 10) + " KiB, " +
       std::to_string(shape.slots) + " slots of " + std::to_string(shape.slot_bytes >> 10) + " KiB per pair); pids";
  for (int r = 0; r < size(); ++r) s.append(" ").append(std::to_string(r)).append("=").append(std::to_string(shared_segment().rank(r).pid));
  return s;
}


shm_detail::segment shm::start(int rank, int size, std::string name, const shm_options& options) {
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


void shm::await_everyone(const shm_detail::segment& seg, int rank, deadline until) {
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


shm shm::from_env(shm_options options) {
  const auto launch = bootstrap::detect_launch();  // first: an error in the launch comes alone
  return join(launch, auth::job_token::from_env(bootstrap::warns_of_default_token(launch)), options);
}

}  // namespace collectives
