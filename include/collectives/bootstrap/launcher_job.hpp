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

inline std::optional<process_identity> read_process(long pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(file, stat)) return std::nullopt;
  const auto open = stat.find('('), close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
  process_identity p;
  p.name = stat.substr(open + 1, close - open - 1);
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  // After the name: state (3), ppid (4), ..., starttime (22).
  for (int number = 3; fields >> field && number <= 22; ++number) {
    if (number == 4) p.parent = std::atol(field.c_str());
    if (number == 22) p.started = field;
  }
  if (p.started.empty()) return std::nullopt;
  return p;
}

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
inline std::optional<std::string> job_name_on_this_host(std::string_view origin) {
  using detail::launcher_variable;
  if (origin == "Slurm") {
    const auto job = launcher_variable("SLURM_JOB_ID");
    if (!job) return std::nullopt;
    return "slurm job " + *job + " step " + launcher_variable("SLURM_STEP_ID").value_or("-");
  }
  if (origin == "Open MPI") {
    auto job = launcher_variable("PMIX_NAMESPACE");
    if (!job) job = launcher_variable("OMPI_MCA_ess_base_jobid");
    if (!job) return std::nullopt;
    std::string name = "open mpi job " + *job;
    for (const char* uri : {"PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3", "PMIX_SERVER_URI21",
                            "PMIX_SERVER_URI2", "OMPI_MCA_orte_hnp_uri"})
      if (const auto value = launcher_variable(uri)) return name.append(" server ").append(*value);
    return name;
  }
  if (origin.starts_with("Hydra")) return detail::hydra_proxy_identity();
  return std::nullopt;
}

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
inline std::optional<std::uint16_t> slurm_store_port() {
  const auto job = detail::launcher_variable("SLURM_JOB_ID");
  if (!job) return std::nullopt;
  const auto job_id =
      settings::parse_whole_number("SLURM_JOB_ID", *job, 0, (1LL << 62), "the Slurm job id, a whole number");
  std::uint64_t step_id = 0;
  if (const auto step = detail::launcher_variable("SLURM_STEP_ID"))
    if (std::from_chars(step->data(), step->data() + step->size(), step_id).ec != std::errc{}) step_id = 0;
  return slurm_store_port(static_cast<std::uint64_t>(job_id), step_id);
}

}  // namespace collectives::bootstrap
