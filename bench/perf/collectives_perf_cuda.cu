// collectives_perf_cuda: collectives_perf on device buffers. The same flags, columns,
// JSON lines and #wrong check, over communicator<cuda_ipc>: each rank's input and
// output live in device memory (data made and checked on the host, copied to and
// from the device outside the timed loop; ours_device.hpp). One binary;
// all_reduce_perf_cuda, all_gather_perf_cuda, ... are links to it that name the
// collective (or name it as the first argument: collectives_perf_cuda all_reduce).
//
//   collectives-run -n 4 build/bench/all_reduce_perf_cuda -b 8 -e 1G -f 2
//
// All ranks on one host; rank i takes device i modulo the device count (several ranks
// may share one; COLLECTIVES_CUDA_DEVICE picks one). --transport is not taken: it is
// always cuda_ipc. Run without a launcher, it is a job of one rank. Without a CUDA
// device every rank prints a SKIPPED line and exits 77 (CTest's skip code).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "ours_device.hpp"

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
  // all_reduce_perf_cuda names all_reduce as all_reduce_perf does.
  std::string_view collective_part = program;
  if (collective_part.ends_with("_cuda")) collective_part.remove_suffix(5);
  auto which = collective_named(collective_part);
  int first_flag = 1;
  if (!which && argc > 1) {
    which = collective_named(argv[1]);
    if (which) first_flag = 2;
  }
  const parse_result parsed = parse_options(argc, argv, first_flag, program::collectives);
  if (parsed.help) {
    std::puts("<collective>_perf_cuda: the flags of <collective>_perf, on device buffers over cuda_ipc\n"
              "  run: collectives-run -n 4 all_reduce_perf_cuda -b 8 -e 1G -f 2   (--transport is not taken)");
    print_usage(stdout, program::collectives);
    return 0;
  }
  const std::string name = which ? std::string(name_of(*which)) + "_perf_cuda" : std::string(program);
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
  if (!o.transport.empty()) return refuse("--transport " + o.transport + ": this program always runs over cuda_ipc");

  // Before joining, on every rank alike, so no rank waits for one that left.
  if (coll::device::device_count() == 0) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    (void)cudaGetLastError();
    std::printf("%s: SKIPPED: no CUDA device (%s)\n", name.c_str(),
                e != cudaSuccess ? cudaGetErrorString(e) : "the runtime counts none");
    return 77;
  }

  try {
    std::string how_joined;
    auto join = [&]() -> device_communicator {
      if (started_by_launcher()) return device_communicator::from_env();
      how_joined = "no launcher: one rank in this process";
      return device_communicator(coll::cuda_ipc(coll::shm(0, 1, ""), coll::device::cuda_runtime::for_local_rank(0),
                                                coll::device_ipc_options::from_env(),
                                                coll::clock::now() + std::chrono::seconds(30)));
    };
    device_communicator comm = join();
    if (has_root(o.which) && o.root >= comm.size()) {  // every rank stops; rank 0 says why
      if (comm.rank() == 0) refuse("-r " + std::to_string(o.root) + " is not a rank of " + std::to_string(comm.size()));
      return 2;
    }
    device_backend backend(comm, o.algorithm, how_joined);
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
