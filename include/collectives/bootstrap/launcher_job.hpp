// What a launcher says about the job as a whole, beyond each process's rank: a name for
// the job that every process of it on this host shares (for a rendezvous on this host
// without a port), and, under Slurm, where rank 0 runs and a port for its store.
#pragma once

#include <unistd.h>

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "../config.hpp"
#include "../settings.hpp"
#include "hostlist.hpp"

namespace collectives::bootstrap {

namespace detail {

inline std::optional<std::string> launcher_variable(const char* name) { return settings::value_of(name); }

// The parent pid, command name and start time (clock ticks after boot) of a process,
// from /proc/PID/stat. The name is between the first '(' and the last ')', since it
// may hold blanks and parentheses itself.
struct process_identity {
  long parent = 0;
  std::string name;
  std::string started;
};

COLLECTIVES_DECL std::optional<process_identity> read_process(long pid);

// Hydra gives its processes no job id. Its proxy, hydra_pmi_proxy, starts every
// process of the job on its host and lives as long as they do, so its pid and start
// time name the job on this host: the same for all of them, never the same for two
// jobs (a pid is reused only after its process ended, and then with a later start
// time). The proxy is looked for among the ancestors, not only the parent, so that a
// process started through a shell (mpiexec -n 4 sh -c ./program) finds it too.
inline std::optional<std::string> hydra_proxy_identity() {
  long pid = ::getppid();
  for (int hops = 0; hops < 32 && pid > 1; ++hops) {
    const auto p = read_process(pid);
    if (!p) return std::nullopt;
    if (p->name == "hydra_pmi_proxy") return "hydra proxy " + std::to_string(pid) + " started at " + p->started;
    pid = p->parent;
  }
  return std::nullopt;
}

}  // namespace detail

// A name for this job that all its processes on this host share and no other job on
// this host has had, from what `origin` (launch_info::origin) sets; nothing when it
// gives no such name.
//   Slurm: the job and step ids (SLURM_JOB_ID, SLURM_STEP_ID), unique in the cluster.
//   Open MPI: the PMIx namespace (the job id) with the URI of the local PMIx server,
//     whose port is new for every mpirun, so that a job id that comes round again
//     does not meet what an earlier job left.
//   Hydra (MPICH, Intel MPI): its proxy's pid and start time (above).
COLLECTIVES_DECL std::optional<std::string> job_name_on_this_host(std::string_view origin);

// Under Slurm, the host of rank 0: the first host of the step's node list (SLURM_STEP_NODELIST,
// else SLURM_JOB_NODELIST). Slurm's block and cyclic distributions, the default ones,
// both put task 0 on the step's first node.
inline std::optional<std::string> slurm_first_host() {
  for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})
    if (const auto list = detail::launcher_variable(name)) return expand_hostlist(name, *list, 1).at(0);
  return std::nullopt;
}

// The first and last port a Slurm job's store may be given.
inline constexpr std::uint16_t slurm_first_port = 20000, slurm_last_port = 29999;

// Under Slurm, a port for the store of job `job_id`, step `step_id`:
//   20000 + (job_id mod 1000) * 10 + (step_id mod 10)
// so that jobs whose ids differ by less than 1000, and the first ten steps of one
// job, never share a port on a node. Two jobs that do share one are told so by rank 0
// (the port is taken), and MASTER_PORT overrides the choice.
inline std::uint16_t slurm_store_port(std::uint64_t job_id, std::uint64_t step_id) {
  return static_cast<std::uint16_t>(slurm_first_port + (job_id % 1000) * 10 + step_id % 10);
}

// The port for this Slurm job's store, from SLURM_JOB_ID and SLURM_STEP_ID; nothing
// without a job id. A step id that is not a number (Slurm's "batch") counts as 0.
COLLECTIVES_DECL std::optional<std::uint16_t> slurm_store_port();

}  // namespace collectives::bootstrap

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "launcher_job.ipp"
#endif
