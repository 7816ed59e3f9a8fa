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
#include <exception>
#include <string>

#include "ours_device.hpp"
#include "program.hpp"

int main(int argc, char** argv) {
  using namespace perf;
  const command_line line = read_command_line(
      argc, argv, "_perf_cuda",
      "<collective>_perf_cuda: the flags of <collective>_perf, on device buffers over cuda_ipc\n"
      "  run: collectives-run -n 4 all_reduce_perf_cuda -b 8 -e 1G -f 2   (--transport is not taken)");
  if (line.finished) return *line.finished;
  const options& o = line.opts;
  if (!o.transport.empty()) return refuse(line.name, "--transport " + o.transport + ": this program always runs over cuda_ipc");

  // Before joining, on every rank alike, so no rank waits for one that left.
  if (coll::device::device_count() == 0) {
    std::printf("%s: SKIPPED: no CUDA device in this process\n", line.name.c_str());
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
    device_backend backend(comm, o.algorithm, how_joined);
    return run_collective(backend, line);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", line.name.c_str(), e.what());
    return 1;
  }
}
