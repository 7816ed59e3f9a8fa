// The MPI twin of bench/all_reduce_time.cpp: MPI_Allreduce (float sum), timed the
// same way. Run under mpirun; bench/compare_all_reduce.sh builds and runs both.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 20;
  std::vector<std::size_t> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  if (sizes.empty()) sizes = {8, std::size_t(64) << 20};
  for (std::size_t bytes : sizes) {
    const int count = int(bytes / sizeof(float));
    std::vector<float> data(std::size_t(count), 1.0f);
    const int warm_up = std::max(2, iterations / 10);
    std::vector<double> times;
    for (int i = 0; i < warm_up + iterations; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      const double us = (MPI_Wtime() - start) * 1e6;
      if (i >= warm_up) times.push_back(us);
    }
    MPI_Allreduce(MPI_IN_PLACE, times.data(), int(times.size()), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    const double busbw = double(bytes) / (median * 1e3) * 2.0 * (p - 1) / p;
    if (rank == 0) std::printf("openmpi %d %zu %.2f %.3f\n", p, bytes, median, busbw);
  }
  MPI_Finalize();
}
