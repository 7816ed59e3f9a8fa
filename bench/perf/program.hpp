// What collectives_perf and collectives_perf_cuda share around their backends: the
// collective the program's name (or first argument) names, the flags, the refusals
// (status 2), and the dispatch to the timing loop. Each program only joins its
// communicator and makes its backend.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <collectives/bootstrap/environment.hpp>
#include <collectives/log.hpp>

#include "harness.hpp"
#include "library_calls.hpp"

namespace perf {

// Whether a launcher gave this process a rank (the variables bootstrap::detect_launch
// reads); none set means a job of one, said loudly when a launcher's other variables
// are there (a launcher whose ranks the library does not see, or a job's shell).
inline bool started_by_launcher() {
  if (collectives::bootstrap::rank_variables_set()) return true;
  static std::once_flag said;
  std::call_once(said, [] {
    if (const auto sign = collectives::bootstrap::launcher_without_ranks())
      collectives::log::warn(*sign + " says a launcher started this process, but it gave no rank (RANK, "
                             "OMPI_COMM_WORLD_RANK, PMI_RANK and SLURM_PROCID are unset): running as a job of one");
  });
  return false;
}

struct command_line {
  options opts;
  std::string name;            // <collective><suffix>, for messages
  std::optional<int> finished;  // the exit status, when the command line alone decides it
};

inline int refuse(const std::string& name, const std::string& why) {
  std::fprintf(stderr, "%s: %s (%s -h for help)\n", name.c_str(), why.c_str(), name.c_str());
  return 2;
}

// `suffix` is what the links add to a collective's name: "_perf", "_perf_cuda".
inline command_line read_command_line(int argc, char** argv, std::string_view suffix, const char* extra_help = nullptr) {
  std::string_view program = argv[0];
  if (const auto slash = program.rfind('/'); slash != std::string_view::npos) program.remove_prefix(slash + 1);
  std::string_view collective_part = program;
  if (collective_part.ends_with(suffix)) collective_part.remove_suffix(suffix.size());
  auto which = collective_named(collective_part);
  int first_flag = 1;
  if (!which && argc > 1) {
    which = collective_named(argv[1]);
    if (which) first_flag = 2;
  }
  const parse_result parsed = parse_options(argc, argv, first_flag, program::collectives);
  command_line line{parsed.opts, which ? std::string(name_of(*which)).append(suffix) : std::string(program), {}};
  if (parsed.help) {
    if (extra_help) std::puts(extra_help);
    print_usage(stdout, program::collectives, algorithm_flags(" ", " "));
    line.finished = 0;
  } else if (!which) {
    line.finished = refuse(line.name, argc > 1 ? "'" + std::string(argv[1]) + "' is not a collective" : "name the collective to time");
  } else if (!parsed.error.empty()) {
    line.finished = refuse(line.name, parsed.error);
  } else {
    line.opts.which = *which;
    const auto algorithm = algorithm_named(line.opts.algorithm);
    if (!algorithm)
      line.finished = refuse(line.name, "--algo " + line.opts.algorithm + ": expected " + algorithm_flags());
    else if (!algorithm_implements(*algorithm, *which))
      line.finished = refuse(line.name, "--algo " + line.opts.algorithm + " has no " + std::string(name_of(*which)));
  }
  return line;
}

// Times and checks the collective on `backend`; run_reduction (a translation unit of
// its own, for build time) takes the reducing ones. A root that is no rank stops every
// rank, and rank 0 says why.
template <class Backend>
int run_collective(Backend& backend, const command_line& line) {
  const options& o = line.opts;
  if (has_root(o.which) && o.root >= backend.size()) {
    if (backend.rank() == 0) refuse(line.name, "-r " + std::to_string(o.root) + " is not a rank of " + std::to_string(backend.size()));
    return 2;
  }
  switch (o.which) {
    case collective::all_reduce:
    case collective::reduce_scatter:
    case collective::reduce: return run_reduction(backend, o);
    case collective::all_gather: return run_perf<collective::all_gather>(backend, o);
    case collective::broadcast: return run_perf<collective::broadcast>(backend, o);
    case collective::all_to_all: return run_perf<collective::all_to_all>(backend, o);
    case collective::gather: return run_perf<collective::gather>(backend, o);
    case collective::scatter: return run_perf<collective::scatter>(backend, o);
  }
  return 1;
}

// The reducing collectives, for a reductions translation unit to instantiate.
template <class Backend>
int run_reductions_of(Backend& backend, const options& o) {
  switch (o.which) {
    case collective::all_reduce: return run_perf<collective::all_reduce>(backend, o);
    case collective::reduce_scatter: return run_perf<collective::reduce_scatter>(backend, o);
    case collective::reduce: return run_perf<collective::reduce>(backend, o);
    default: return 2;
  }
}

}  // namespace perf
