// Who this process is in its job (rank, size, its place on the host) and where the
// job's store is, read from the variables the launcher set. The launchers people use
// already are understood as they are: torchrun-style RANK / WORLD_SIZE (which
// collectives-run sets too), Open MPI's mpirun, Hydra's mpiexec (MPICH, Intel MPI) and
// Slurm's srun. Parsing is strict: a value that is not entirely a number in range is an
// error naming the variable, since a half-understood rank makes a job hang instead of fail.
#pragma once

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "../config.hpp"
#include "../error.hpp"
#include "../log.hpp"
#include "../settings.hpp"
#include "launcher_job.hpp"
#include "topology.hpp"

namespace collectives::bootstrap {

struct launch_info {
  int rank = 0, size = 1;              // this process in the job
  int local_rank = 0, local_size = 1;  // this process among the job's processes on its host
  std::string master_addr;             // where rank 0 serves the TCP store (may be empty with a file store)
  std::uint16_t master_port = 0;
  std::string origin;  // "torchrun", "torchrun-style environment", "Open MPI", "Hydra (MPICH, Intel MPI)", "Slurm" or "arguments"
  // Under torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True) MASTER_ADDR:MASTER_PORT
  // is torchrun's own store, and the job's keys go under this prefix, one per run and
  // restart; empty otherwise.
  std::string launcher_store_prefix;
  // Set when every rank is on this host and neither MASTER_ADDR/MASTER_PORT nor
  // COLLECTIVES_STORE_DIR was given: the launcher's name for the job, which the ranks
  // meet under in a private directory of this host (rendezvous.hpp).
  std::string job_on_this_host;
  // Set when the store's port was derived from the launcher's job ids (Slurm): the job's
  // name. Two jobs may derive the same port; with the public default token, the tcp
  // transport mixes this into the token, so that they refuse each other instead of
  // meeting.
  std::string derived_port_of_job;
};

namespace detail {

// A variable's value; an empty one counts as unset (`export RANK=` is how shells clear).
inline std::optional<std::string> variable(const char* name) { return settings::value_of(name); }

// NAME=value, with the value quoted when blanks or odd bytes would hide in it.
inline std::string assignment(std::string_view name, const std::string& value) {
  return settings::assignment(name, value);
}

// The whole of `value` as a number within [lowest, highest], by the rules and with the
// words every variable of the library is read with (settings.hpp).
inline long long whole_number(const char* name, const std::string& value, long long lowest, long long highest,
                              const std::string& expected) {
  return settings::parse_whole_number(name, value, lowest, highest, expected);
}

inline int count_of(const char* name, const std::string& value, const char* meaning) {
  return static_cast<int>(whole_number(name, value, 1, 1 << 30, std::string(meaning) + ", at least 1"));
}
inline int index_of(const char* name, const std::string& value, const char* meaning) {
  return static_cast<int>(whole_number(name, value, 0, (1 << 30) - 1, std::string(meaning) + ", from 0"));
}

// How many tasks Slurm started on this node, from SLURM_STEP_TASKS_PER_NODE ("2(x3),1":
// two tasks on each of three nodes, then one) and SLURM_NODEID; nothing if either is
// missing or unreadable.
inline std::optional<int> slurm_tasks_on_this_node() {
  const auto layout = variable("SLURM_STEP_TASKS_PER_NODE");
  const auto node_text = variable("SLURM_NODEID");
  int node = 0;
  if (!layout || !node_text ||
      std::from_chars(node_text->data(), node_text->data() + node_text->size(), node).ec != std::errc{})
    return std::nullopt;
  const char* at = layout->data();
  const char* const end = at + layout->size();
  while (at < end) {
    int tasks = 0, repeat = 1;
    auto parsed = std::from_chars(at, end, tasks);
    if (parsed.ec != std::errc{}) return std::nullopt;
    at = parsed.ptr;
    if (end - at >= 2 && at[0] == '(' && at[1] == 'x') {
      parsed = std::from_chars(at + 2, end, repeat);
      if (parsed.ec != std::errc{} || parsed.ptr == end || *parsed.ptr != ')') return std::nullopt;
      at = parsed.ptr + 1;
    }
    if (node < repeat) return tasks;
    node -= repeat;
    if (at < end && *at++ != ',') return std::nullopt;
  }
  return std::nullopt;
}

// The variables one launcher sets.
struct launcher_variables {
  const char* origin;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;  // nullptr: worked out otherwise (Slurm)
};

inline void read_ranks(const launcher_variables& v, launch_info& info) {
  const auto rank = variable(v.rank), size = variable(v.size);
  if (!rank || !size)
    throw error(errc::invalid_config, std::string(rank ? v.rank : v.size) + " is set but " + (rank ? v.size : v.rank) +
                                          " is not; set both, or neither");
  info.origin = v.origin;
  info.size = count_of(v.size, *size, "the number of processes in the job");
  info.rank = index_of(v.rank, *rank, "the rank of this process");
  if (info.rank >= info.size)
    throw error(errc::invalid_config, assignment(v.rank, *rank) + " is not below " + assignment(v.size, *size));

  // Without a word from the launcher, a process is taken to be alone on its host; with
  // a local rank but no local size, the smallest size that fits it is taken.
  const auto local_rank = variable(v.local_rank);
  const auto local_size = v.local_size ? variable(v.local_size) : std::nullopt;
  if (!local_rank) {
    if (local_size)
      throw error(errc::invalid_config, std::string(v.local_size) + " is set but " + v.local_rank + " is not");
    return;
  }
  info.local_rank = index_of(v.local_rank, *local_rank, "the rank of this process on its host");
  info.local_size = info.local_rank + 1;
  if (local_size) {
    info.local_size = count_of(v.local_size, *local_size, "the number of processes of the job on this host");
    if (info.local_rank >= info.local_size)
      throw error(errc::invalid_config,
                  assignment(v.local_rank, *local_rank) + " is not below " + assignment(v.local_size, *local_size));
    if (info.local_size > info.size)
      throw error(errc::invalid_config,
                  assignment(v.local_size, *local_size) + " is larger than " + assignment(v.size, *size));
  } else if (v.local_size == nullptr) {
    // Slurm: an explicit --ntasks-per-node first, then the step's actual layout.
    const auto per_node = variable("SLURM_NTASKS_PER_NODE");
    int tasks = 0;
    if (per_node && std::from_chars(per_node->data(), per_node->data() + per_node->size(), tasks).ptr ==
                        per_node->data() + per_node->size()) {
      info.local_size = std::max(tasks, info.local_size);
    } else if (const auto on_node = slurm_tasks_on_this_node()) {
      info.local_size = std::max(*on_node, info.local_size);
    }
  }
}

// torchrun marks its workers with TORCHELASTIC_RUN_ID. With its default (static)
// rendezvous its agent already serves a TCPStore on MASTER_PORT, and says so.
inline void read_torchrun(launch_info& info) {
  const auto run_id = variable("TORCHELASTIC_RUN_ID");
  if (!run_id) return;
  info.origin = "torchrun";
  if (variable("TORCHELASTIC_USE_AGENT_STORE") != "True") return;
  const auto restarts = variable("TORCHELASTIC_RESTART_COUNT");
  if (!restarts)
    throw error(errc::invalid_config, "TORCHELASTIC_USE_AGENT_STORE=True is set but TORCHELASTIC_RESTART_COUNT is "
                                      "not (both come from torchrun)");
  const int restart = index_of("TORCHELASTIC_RESTART_COUNT", *restarts, "torchrun's count of restarts");
  info.launcher_store_prefix = "collectives/torchrun/" + *run_id + "/" + std::to_string(restart) + "/";
}

}  // namespace detail

// The variables by which each launcher gives a process its rank, in the order they are
// tried. Hydra comes before Slurm because under Slurm it is Hydra's variables that
// describe the processes it starts, while the Slurm ones it inherits describe the
// step that started it.
inline constexpr detail::launcher_variables launchers[] = {
    {"torchrun-style environment", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"Hydra (MPICH, Intel MPI)", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
};

// Whether a launcher gave this process a rank: one variable of a launcher's pair is
// enough (detect_launch then names the one missing). PMIX_RANK counts too, though no
// PMIx launcher's size is read without its own variables (detect_launch says so).
inline bool rank_variables_set() {
  for (const auto& launcher : launchers)
    if (detail::variable(launcher.rank) || detail::variable(launcher.size)) return true;
  return detail::variable("PMIX_RANK").has_value();
}

// A variable, as NAME=value, that a launcher sets in the processes it starts, when one
// is set although no launcher gave this process a rank (rank_variables_set() is false):
// the process was most likely started by a launcher whose ranks the library does not
// see, or one started in a job's shell, and running alone is then probably a mistake.
inline std::optional<std::string> launcher_without_ranks() {
  if (rank_variables_set()) return std::nullopt;
  for (const char* name : {"PMI_FD", "PMI_PORT", "PMI_ID", "MPI_LOCALRANKID", "PMIX_NAMESPACE", "PMIX_SERVER_URI2",
                           "OMPI_MCA_ess_base_jobid", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_UNIVERSE_SIZE",
                           "SLURM_JOB_ID", "SLURM_STEP_ID", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
                           "LOCAL_RANK", "GROUP_RANK"})
    if (const auto value = detail::variable(name)) return detail::assignment(name, *value);
  return std::nullopt;
}

namespace detail {

// Where the ranks meet when neither MASTER_ADDR and MASTER_PORT nor COLLECTIVES_STORE_DIR
// say it: on this host, in a private directory, when the launcher puts every rank here
// and names the job; under Slurm, at the first host of the step and a port from the job
// id. `address` and `port` are those the environment gives, if any.
inline void derive_rendezvous(launch_info& info, const std::optional<std::string>& address,
                              const std::optional<std::string>& port) {
  // A batch script's own shell has Slurm's ranks (0 of N) too, and no step: deriving there
  // would have it wait for N - 1 ranks that never come.
  if (info.origin == "Slurm" && !variable("SLURM_STEP_NODELIST"))
    throw error(errc::invalid_config,
                "SLURM_PROCID is set but SLURM_STEP_NODELIST is not: this process is not a task of an srun step "
                "(a batch script itself?); start the ranks with srun, or set MASTER_ADDR and MASTER_PORT");
  const bool one_host = info.local_size == info.size;
  if (!address && !port && one_host) {
    if (auto job = job_name_on_this_host(info.origin)) {
      info.job_on_this_host = std::move(*job);
      return;
    }
  }
  if (info.origin == "Slurm") {
    if (address) info.master_addr = *address;
    else if (auto host = slurm_first_host()) info.master_addr = std::move(*host);
    if (!port)
      if (const auto derived = slurm_store_port()) {
        info.master_port = *derived;
        info.derived_port_of_job = job_name_on_this_host(info.origin).value_or("");
      }
    if (!info.master_addr.empty() && (port || info.master_port != 0)) return;
  }
  const char* missing = address ? "MASTER_PORT" : "MASTER_ADDR";
  std::string why = info.origin == "torchrun-style environment" ? " needs MASTER_ADDR and MASTER_PORT"
                    : one_host ? " names no job that its ranks could meet under on this host, so it needs MASTER_ADDR and MASTER_PORT"
                               : std::string(" puts the job's ranks on more than one host (") + std::to_string(info.local_size) +
                                     " of " + std::to_string(info.size) + " here) and " +
                                     (info.origin == "Slurm" ? "gives no node list (SLURM_STEP_NODELIST) or no job id "
                                                               "(SLURM_JOB_ID) to find rank 0's store by"
                                                             : "says nowhere where rank 0 runs") +
                                     ", so it needs MASTER_ADDR and MASTER_PORT";
  throw error(errc::invalid_config, std::string(missing) + " is not set: a job started by " + info.origin + why +
                                        ", the host and port where rank 0 serves the job's TCP store (or "
                                        "COLLECTIVES_STORE_DIR, a directory all ranks share)");
}

}  // namespace detail

// Whether this process should warn when the job has only the public default token: once
// per job, so rank 0 does; and not when the ranks meet in a private directory of this
// host, where the token is not what keeps others out (the tcp transport agrees on a
// fresh one there, and shm's segments are the user's alone).
inline bool warns_of_default_token(const launch_info& launch) {
  return launch.rank == 0 && launch.job_on_this_host.empty();
}

// Reads this process's place in its job from the environment, trying in turn the
// torchrun-style variables, Open MPI's, Hydra's and Slurm's. The ranks meet at the TCP
// store rank 0 serves at MASTER_ADDR:MASTER_PORT, or in a file store when
// COLLECTIVES_STORE_DIR names a shared directory. Without either, the launcher's own
// variables decide where (derive_rendezvous above). Any problem is errc::invalid_config,
// naming the variable, its value and what was expected.
inline launch_info detect_launch() {
  using detail::variable;
  launch_info info;
  for (const auto& launcher : launchers) {
    if (!variable(launcher.rank) && !variable(launcher.size)) continue;
    // srun --mpi=pmi2 sets PMI_RANK too, but not Hydra's local ranks: Slurm's say more.
    if (launcher.local_rank == std::string_view("MPI_LOCALRANKID") && !variable("MPI_LOCALRANKID") &&
        variable("SLURM_PROCID"))
      continue;
    detail::read_ranks(launcher, info);
    if (&launcher == &launchers[0]) detail::read_torchrun(info);
    break;
  }
  if (info.origin.empty() && variable("PMIX_RANK"))
    throw error(errc::invalid_config,
                "PMIX_RANK is set, but no variable says how many processes the job has (OMPI_COMM_WORLD_SIZE, "
                "PMI_SIZE, SLURM_NTASKS or WORLD_SIZE); start the job with mpirun or srun, or set RANK and WORLD_SIZE");
  if (info.origin.empty())
    throw error(errc::invalid_config,
                "no launcher environment found (RANK, OMPI_COMM_WORLD_RANK, PMI_RANK and SLURM_PROCID are all unset); "
                "start the processes in one of these ways: with collectives-run (collectives-run -n 4 ./program), "
                "with mpirun (Open MPI), mpiexec (MPICH, Intel MPI) or srun (Slurm), or with the torchrun-style "
                "variables RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set for each process");

  const bool file_store = settings::text("COLLECTIVES_STORE_DIR").has_value();
  const auto address = variable("MASTER_ADDR"), port = variable("MASTER_PORT");
  if (address) info.master_addr = *address;
  if (port)
    info.master_port =
        static_cast<std::uint16_t>(detail::whole_number("MASTER_PORT", *port, 1, 65535, "a TCP port, 1 to 65535"));
  if (!file_store && !(address && port)) detail::derive_rendezvous(info, address, port);
  if (log::enabled(log::level::info))  // the first line a job's INFO log has
    log::info(std::string("collectives ") + COLLECTIVES_VERSION_STRING + ": rank " + std::to_string(info.rank) + " of " +
              std::to_string(info.size) + " (" + std::to_string(info.local_rank) + " of " +
              std::to_string(info.local_size) + " on this host), from the variables of " + info.origin);
  // The machine under the rank, once per process, though a process may detect its launch
  // more than once (each communicator it creates does): reading it costs milliseconds.
  static std::atomic<bool> topology_shown{false};
  if (log::enabled(log::level::info) && !topology_shown.exchange(true))
    log::info("rank " + std::to_string(info.rank) + ": " + summary(read_topology()));
  return info;
}

}  // namespace collectives::bootstrap
