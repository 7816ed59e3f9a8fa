// Who this process is in its job (rank, size, its place on the host) and where the
// job's store is, read from the variables the launcher set. The launchers people use
// already are understood as they are: torchrun-style RANK / WORLD_SIZE (which
// collectives-run sets too), Open MPI's mpirun and Slurm's srun. Parsing is strict: a
// value that is not entirely a number in range is an error naming the variable, since
// a half-understood rank makes a job hang instead of fail.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "../error.hpp"
#include "../settings.hpp"

namespace collectives::bootstrap {

struct launch_info {
  int rank = 0, size = 1;              // this process in the job
  int local_rank = 0, local_size = 1;  // this process among the job's processes on its host
  std::string master_addr;             // where rank 0 serves the TCP store (may be empty with a file store)
  std::uint16_t master_port = 0;
  std::string origin;  // "torchrun", "torchrun-style environment", "Open MPI", "Slurm" or "arguments"
  // Under torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True) MASTER_ADDR:MASTER_PORT
  // is torchrun's own store, and the job's keys go under this prefix, one per run and
  // restart; empty otherwise.
  std::string launcher_store_prefix;
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

// Reads this process's place in its job from the environment, trying in turn the
// torchrun-style variables, Open MPI's and Slurm's. MASTER_ADDR and MASTER_PORT (where
// rank 0 serves the TCP store) are required unless COLLECTIVES_STORE_DIR names a shared
// directory for a file store instead. Any problem is errc::invalid_config, naming the
// variable, its value and what was expected.
inline launch_info detect_launch() {
  using detail::variable;
  static constexpr detail::launcher_variables launchers[] = {
      {"torchrun-style environment", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
      {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
  };
  launch_info info;
  for (const auto& launcher : launchers) {
    if (!variable(launcher.rank) && !variable(launcher.size)) continue;
    detail::read_ranks(launcher, info);
    if (&launcher == &launchers[0]) detail::read_torchrun(info);
    break;
  }
  if (info.origin.empty())
    throw error(errc::invalid_config,
                "no launcher environment found (RANK, OMPI_COMM_WORLD_RANK and SLURM_PROCID are all unset); start the "
                "processes in one of three ways: with collectives-run (collectives-run -n 4 ./program), with the "
                "torchrun-style variables RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set for each process, or with "
                "mpirun (Open MPI) or srun (Slurm) while exporting MASTER_ADDR and MASTER_PORT");

  const bool file_store = settings::text("COLLECTIVES_STORE_DIR").has_value();
  const auto address = variable("MASTER_ADDR"), port = variable("MASTER_PORT");
  for (const auto& [name, value] : {std::pair{"MASTER_ADDR", &address}, std::pair{"MASTER_PORT", &port}})
    if (!*value && !file_store)
      throw error(errc::invalid_config,
                  std::string(name) + " is not set: a job started by " + info.origin +
                      " needs MASTER_ADDR and MASTER_PORT, the host and port where rank 0 serves the "
                      "job's TCP store (or COLLECTIVES_STORE_DIR, a directory all ranks share)");
  if (address) info.master_addr = *address;
  if (port)
    info.master_port =
        static_cast<std::uint16_t>(detail::whole_number("MASTER_PORT", *port, 1, 65535, "a TCP port, 1 to 65535"));
  return info;
}

}  // namespace collectives::bootstrap
