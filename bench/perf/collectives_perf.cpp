// collectives_perf: nccl-tests-style timing and checking of this library's
// collectives. One binary; all_reduce_perf, all_gather_perf, ... are links to it that
// name the collective (or name it as the first argument: collectives_perf all_reduce).
//
//   collectives-run -n 4 --transport shm build/bench/all_reduce_perf -b 8 -e 64M -f 2
//
// Run without a launcher, it is a job of one rank. bench/mpi_perf.cpp is its Open MPI
// twin: same flags, columns, JSON lines and checks (bench/perf/harness.hpp).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "ours.hpp"

namespace {

using namespace perf;

// The variables by which a launcher says a process is one rank of a job (those
// bootstrap::detect_launch reads); none set means a job of one.
bool started_by_launcher() {
  for (const char* v : {"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"})
    if (const char* value = std::getenv(v); value != nullptr && *value != '\0') return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::string_view program = argv[0];
  if (const auto slash = program.rfind('/'); slash != std::string_view::npos) program.remove_prefix(slash + 1);
  auto which = collective_named(program);
  int first_flag = 1;
  if (!which && argc > 1) {
    which = collective_named(argv[1]);
    if (which) first_flag = 2;
  }
  const parse_result parsed = parse_options(argc, argv, first_flag, program::collectives);
  if (parsed.help) {
    print_usage(stdout, program::collectives);
    return 0;
  }
  const std::string name = which ? std::string(name_of(*which)) + "_perf" : std::string(program);
  auto refuse = [&](const std::string& why) {
    std::fprintf(stderr, "%s: %s (%s -h for help)\n", name.c_str(), why.c_str(), name.c_str());
    return 2;
  };
  if (!which)
    return refuse(argc > 1 ? "'" + std::string(argv[1]) + "' is not a collective" : "name the collective to time");
  if (!parsed.error.empty()) return refuse(parsed.error);
  options o = parsed.opts;
  o.which = *which;
  if (!algorithm_implements(algorithm_named(o.algorithm), o.which))
    return refuse("--algo " + o.algorithm + " has no " + std::string(name_of(o.which)) + " (direct and auto have all)");

  if (o.transport == "tcp" && !started_by_launcher())
    return refuse("--transport tcp needs a launcher: collectives-run -n 1 --transport tcp " + name + " ...");

  try {
    std::string how_joined;
    auto join = [&]() -> communicator {
      if (started_by_launcher()) {
        // from_env follows COLLECTIVES_TRANSPORT; --transport sets it for this process
        // (every rank gets the same flags, so every rank makes the same choice).
        if (!o.transport.empty()) ::setenv("COLLECTIVES_TRANSPORT", o.transport.c_str(), 1);
        return communicator::from_env();
      }
      how_joined = "no launcher: one rank in this process, nothing crosses a transport";
      return communicator(coll::automatic_transport(coll::shm(0, 1, "")));
    };
    communicator comm = join();
    if (has_root(o.which) && o.root >= comm.size()) {  // every rank stops; rank 0 says why
      if (comm.rank() == 0) refuse("-r " + std::to_string(o.root) + " is not a rank of " + std::to_string(comm.size()));
      return 2;
    }
    library_backend backend(comm, o.algorithm, how_joined);
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
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), e.what());
    return 1;
  }
  return 1;
}
