// collectives_perf: nccl-tests-style timing and checking of this library's
// collectives. One binary; all_reduce_perf, all_gather_perf, ... are links to it that
// name the collective (or name it as the first argument: collectives_perf all_reduce).
//
//   collectives-run -n 4 --transport shm build/bench/all_reduce_perf -b 8 -e 64M -f 2
//   COLLECTIVES_FABRIC_PROVIDER=tcp collectives-run -n 4 --transport rdma build/bench/all_reduce_perf ...
//     (rdma: built where CMake found libfabric; the provider tcp or shm on one host)
//
// Run without a launcher, it is a job of one rank. bench/mpi_perf.cpp is its Open MPI
// twin: same flags, columns, JSON lines and checks (bench/perf/harness.hpp).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <collectives/transport/shm.hpp>

#include "ours.hpp"
#include "program.hpp"

int main(int argc, char** argv) {
  using namespace perf;
  const command_line line = read_command_line(argc, argv, "_perf");
  if (line.finished) return *line.finished;
  const options& o = line.opts;
  if ((o.transport == "tcp" || o.transport == "rdma") && !started_by_launcher())
    return refuse(line.name, "--transport " + o.transport + " needs a launcher: collectives-run -n 1 --transport " +
                                 o.transport + " " + line.name + " ...");

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
    library_backend backend(comm, o.algorithm, how_joined);
    return run_collective(backend, line);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", line.name.c_str(), e.what());
    return 1;
  }
}
