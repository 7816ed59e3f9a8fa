// Times all_reduce (float sum, automatic algorithm) for a few sizes, the same way
// bench/mpi_all_reduce_time.cpp times MPI_Allreduce, so that bench/compare_all_reduce.sh
// can put the two side by side. Run under collectives-run; the transport is
// automatic_transport, so COLLECTIVES_TRANSPORT (collectives-run --transport) picks
// shm or tcp.
//
// usage: all_reduce_time [iterations = 20] [bytes ...]   (default sizes 8 and 64 MiB)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <collectives/collectives.hpp>
#include <collectives/transport/automatic.hpp>

namespace coll = collectives;

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 20;
  std::vector<std::size_t> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  if (sizes.empty()) sizes = {8, std::size_t(64) << 20};
  try {
    auto comm = coll::communicator<coll::automatic_transport>::from_env();
    for (std::size_t bytes : sizes) {
      std::vector<float> data(bytes / sizeof(float), 1.0f);
      const int warm_up = std::max(2, iterations / 10);
      std::vector<double> times;
      for (int i = 0; i < warm_up + iterations; ++i) {
        coll::barrier(comm);
        const auto start = std::chrono::steady_clock::now();
        coll::all_reduce(comm, std::span{data}, coll::sum{});
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
        if (i >= warm_up) times.push_back(us);
      }
      // The slowest rank's time is the call's time; report the median over iterations.
      coll::all_reduce(comm, std::span{times}, coll::max{});
      std::sort(times.begin(), times.end());
      const double median = times[times.size() / 2];
      const int p = comm.size();
      const double busbw = double(bytes) / (median * 1e3) * 2.0 * (p - 1) / p;  // GB/s
      if (comm.rank() == 0) std::printf("collectives %d %zu %.2f %.3f\n", p, bytes, median, busbw);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "all_reduce_time: %s\n", e.what());
    return 1;
  }
}
