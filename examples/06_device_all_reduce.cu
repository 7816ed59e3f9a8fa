// 06: all_reduce of device buffers with your own op, across processes on one host.
//
// Each rank is a process with its data in GPU memory. The ranks are joined by the
// cuda_ipc transport: every rank exports a device inbox (cudaIpcGetMemHandle), the
// others map it, and chunks move GPU to GPU with the copy engines; the reduction
// runs on the GPU as a CUB kernel with the op inlined. Nothing goes through the host
// but a few small notices. Several ranks may share one GPU (local rank i takes
// device i modulo the device count).
//
// The op is an arg-max over (score, index) pairs: for each of n candidates, every
// rank scores it, and all_reduce finds, per candidate, the best score and the rank
// that gave it. A user type and a user op, which NCCL cannot reduce; here it is a
// functor marked `__host__ __device__` (COLLECTIVES_HOST_DEVICE).
//
// A device call runs on the transport's stream (set_stream gives it yours): it is
// ordered after what is already queued there and returns once the result is in
// the output buffer.
//
// usage: collectives-run -n 4 06_device_all_reduce [candidates = 1000000]
// Without a CUDA device it says so and exits 77 (ctest: skipped).

#include <collectives/collectives.hpp>
#include <collectives/device/memory_ops.cuh>
#include <collectives/transport/cuda_ipc.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

namespace coll = collectives;

struct scored {
  float score;
  int rank;
};

// Higher score wins; a tie goes to the lower rank, so the result does not depend on
// the order ranks are combined in, and the op may say it is commutative.
struct best_score {
  static constexpr bool commutative = true;
  COLLECTIVES_HOST_DEVICE scored operator()(const scored& a, const scored& b) const {
    if (a.score != b.score) return a.score > b.score ? a : b;
    return a.rank < b.rank ? a : b;
  }
};

// Rank r's score for candidate i: a hash, so each rank wins some candidates.
float score_of(int rank, std::size_t i) {
  unsigned h = unsigned(i) * 2654435761u ^ unsigned(rank + 1) * 40503u;
  h ^= h >> 15;
  return float(h % 1000);
}

int main(int argc, char** argv) try {
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1'000'000;
  if (coll::device::device_count() == 0) {
    std::printf("06_device_all_reduce: SKIPPED: no CUDA device in this process\n");
    return 77;
  }
  auto comm = coll::communicator<coll::cuda_ipc>::from_env();
  const int rank = comm.rank(), size = comm.size();

  std::vector<scored> mine(n);
  for (std::size_t i = 0; i < n; ++i) mine[i] = {score_of(rank, i), rank};

  scored* data = nullptr;
  coll::device::check(cudaMalloc(&data, n * sizeof(scored)), "cudaMalloc");
  coll::device::check(cudaMemcpy(data, mine.data(), n * sizeof(scored), cudaMemcpyHostToDevice), "cudaMemcpy");
  // From pageable memory that copy may still be landing when cudaMemcpy returns, and
  // the call runs on a stream of its own: the input must be ready when it starts.
  coll::device::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

  coll::all_reduce(comm, coll::device_span{data, n}, best_score{});  // in place, on the GPU

  std::vector<scored> result(n);
  coll::device::check(cudaMemcpy(result.data(), data, n * sizeof(scored), cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(data);

  // Check against a serial reduction on the host.
  std::size_t wrong = 0;
  std::vector<std::size_t> wins(std::size_t(size), 0);
  for (std::size_t i = 0; i < n; ++i) {
    scored want{score_of(0, i), 0};
    for (int r = 1; r < size; ++r) want = best_score{}(want, scored{score_of(r, i), r});
    wrong += result[i].score != want.score || result[i].rank != want.rank;
    ++wins[std::size_t(want.rank)];
  }
  if (rank == 0) {
    std::printf("all_reduce of %zu (score, rank) pairs on %d ranks (%s)\n", n, size,
                comm.transport().runtime().describe().c_str());
    for (int r = 0; r < size; ++r) std::printf("  rank %d has the best score for %zu candidates\n", r, wins[std::size_t(r)]);
  }
  if (wrong != 0) {
    std::fprintf(stderr, "rank %d: %zu of %zu results differ from the serial reduction\n", rank, wrong, n);
    return 1;
  }
  if (rank == 0) std::printf("every rank's result matches the serial reduction\n");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "06_device_all_reduce: %s\n", e.what());
  return 1;
}
