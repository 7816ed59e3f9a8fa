// The shared-memory transport's start-up (transport.hpp): inline in header-only use,
// compiled once into collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include "transport.hpp"

namespace collectives {

shm::shm(int rank, int size, std::string segment, shm_options options)
    : wire_transport(std::make_unique<shm_detail::engine>(checked_rank(rank, size), start(rank, size, std::move(segment), options),
                                                          options.limits)),
      options_(options) {
  for (int p = 0; p < size; ++p)
    if (p != rank && same_pid_namespace(p)) wire_->watch().watch(p, shared_segment().rank(p).pid);
  if (log::enabled(log::level::info)) log::info(describe());
}


shm shm::shrink(deadline until) {
  abort();
  if (size() == 1) return shm(0, 1, {}, options_);
  const auto survivors = shm_detail::agree_on_survivors(shared_segment(), rank(), wire_->watch(), ++shrinks_, until);
  const auto me = std::find(survivors.begin(), survivors.end(), rank());
  if (me == survivors.end())
    throw error(errc::invalid_group, "shm rank " + std::to_string(rank()) + ": the survivors left this rank out of the shrunk group");
  shm_options next = options_;
  next.slot_bytes = shared_segment().shape().slot_bytes;
  next.slots = shared_segment().shape().slots;
  next.startup_timeout = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(until - clock::now()),
                                  std::chrono::milliseconds(1));
  if (survivors.size() == 1) return shm(0, 1, {}, next);
  std::vector<int> pids;  // 0 for a rank whose pid means nothing here
  for (int r : survivors) pids.push_back(same_pid_namespace(r) ? shared_segment().rank(r).pid : 0);
  shm next_group(int(me - survivors.begin()), shared_segment().name() + "s" + std::to_string(shrinks_), next, pids);
  next_group.shrinks_ = shrinks_;
  return next_group;
}

shm::shm(int rank, std::string segment, shm_options options, const std::vector<int>& pids)
    : wire_transport(std::make_unique<shm_detail::engine>(rank, start_shrunk(rank, std::move(segment), options, pids),
                                                          options.limits)),
      options_(options) {
  for (int p = 0; p < size(); ++p)
    if (p != rank) wire_->watch().watch(p, pids[std::size_t(p)]);
  if (log::enabled(log::level::info)) log::info(describe() + " (shrunk)");
}

shm_detail::segment shm::start_shrunk(int rank, std::string name, const shm_options& options, const std::vector<int>& pids) {
  using namespace shm_detail;
  const int size = int(pids.size());
  const layout shape{size, options.slot_bytes, options.slots};
  const deadline until = clock::now() + options.startup_timeout;
  // The lowest member that lives lays it out; the others map it, or lay out their own
  // if every member below them has died.
  auto my_turn = [&] {
    for (int r = 0; r < rank; ++r)
      if (pids[std::size_t(r)] == 0 || process_alive(pids[std::size_t(r)])) return false;
    return true;
  };
  segment seg;
  for (auto pause = std::chrono::microseconds(100);
       !(seg = my_turn() ? segment::create_or_attach(name, shape) : segment::attach(name, shape, true));) {
    if (clock::now() >= until)
      throw error(errc::timeout, "shm rank " + std::to_string(rank) + ": the shrunk group's /dev/shm/" + name + " was not laid out in time");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
  join_segment(seg, rank, options);
  // Every member maps it, or has died: the group then reports that one lost.
  for (auto pause = std::chrono::microseconds(50);; pause = std::min(pause * 2, std::chrono::microseconds(5000))) {
    bool waiting = false;
    for (int r = 0; r < size; ++r)
      waiting = waiting || (shared(seg.rank(r).state).load(std::memory_order_acquire) == absent &&
                            (pids[std::size_t(r)] == 0 || process_alive(pids[std::size_t(r)])));
    if (!waiting) break;
    if (clock::now() >= until) {
      seg.unlink_name();
      throw error(errc::timeout, "shm rank " + std::to_string(rank) + ": the shrunk group's members did not all map /dev/shm/" + name + " in time");
    }
    std::this_thread::sleep_for(pause);
  }
  seg.unlink_name();
  return seg;
}

void shm::join_segment(shm_detail::segment& seg, int rank, const shm_options& options) {
  shm_detail::rank_record& me = seg.rank(rank);
  me.pid = ::getpid();
  me.pid_namespace = shm_detail::pid_namespace_id();
  me.probe_address = shm_detail::probe_address();
  // Before the peers see this rank attached and try; only where asked for one copy,
  // since it lets any process of the user read this one's memory.
  if (options.limits.one_copy_bytes != 0) shm_detail::allow_peers_to_read();
  shm_detail::shared(me.state).store(shm_detail::attached, std::memory_order_release);
  shm_detail::shared(seg.header().attached).fetch_add(1, std::memory_order_acq_rel);
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
  if (options_.limits.one_copy_bytes != 0) {
    int readable = 0;
    for (int r = 0; r < size(); ++r) readable += reads_memory_of(r);
    s += "; messages from " + std::to_string(options_.limits.one_copy_bytes >> 10) + " KiB read from the sender's memory (" +
         std::to_string(readable) + " of " + std::to_string(size() - 1) + " peers)";
  }
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
  join_segment(seg, rank, options);
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
      const std::string missing = detail::ranks_missing(
          size, [&](int r) { return shared(seg.rank(r).state).load(std::memory_order_acquire) == absent; });
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
