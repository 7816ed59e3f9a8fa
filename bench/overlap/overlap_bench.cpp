// overlap_bench: how much of a non-blocking all_reduce hides behind computation.
//
// Each rank times, as medians over the iterations (the slowest rank's figure):
//   comm      a blocking all_reduce of `bytes` floats alone;
//   compute   a compute loop sized to take about as long as `comm`;
//   blocking  compute, then the blocking all_reduce: one step without overlap;
//   overlap   iall_reduce, then the compute loop in `polls` slices with comm.progress()
//             between them (0: no progress call until the wait), then wait;
//   thread    the same with no progress call, and a progress thread moving the call;
//   turn      with the progress thread moving the call, how long the rank waits to
//             start a small call now and then during it (median and largest wait of
//             the slowest rank): the thread hands the transport over within a pass.
// hidden = (blocking - overlap) / comm: the fraction of the communication the compute
// covered (1: all of it). Every all_reduce's result is checked.
//
// usage: collectives-run -n 2 --transport shm|tcp overlap_bench [bytes = 16777216] [iterations = 10]

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <collectives/collectives.hpp>
#include <collectives/transport/automatic.hpp>

namespace coll = collectives;
using comm_t = coll::communicator<coll::automatic_transport>;
using seconds = std::chrono::duration<double>;

namespace {

// Work that stays in cache and that the compiler cannot drop: `units` rounds over 4 KiB.
float compute(long units, std::vector<float>& scratch) {
  for (long u = 0; u < units; ++u)
    for (auto& x : scratch) x = std::sqrt(x * 1.0001f + 0.5f);
  return scratch[0];
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The slowest rank's median of `step`, timed `iterations` times after one warm-up.
template <class Step>
double timed(comm_t& comm, int iterations, Step&& step) {
  std::vector<double> t;
  for (int i = 0; i <= iterations; ++i) {
    coll::barrier(comm);
    const auto start = std::chrono::steady_clock::now();
    step();
    if (i > 0) t.push_back(seconds(std::chrono::steady_clock::now() - start).count());
  }
  return coll::all_reduce(comm, median(t), coll::max{});
}

}  // namespace

int main(int argc, char** argv) {
  const long long bytes = argc > 1 ? std::atoll(argv[1]) : 16 << 20;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 10;
  if (bytes < 4 || iterations < 1) {
    std::cerr << "usage: overlap_bench [bytes = 16777216] [iterations = 10]\n";
    return 2;
  }
  auto comm = comm_t::from_env();
  const int p = comm.size();
  std::vector<float> data(std::size_t(bytes) / sizeof(float));
  std::vector<float> scratch(1024, 1.0f);
  float sink = 0;
  long checked_wrong = 0;
  auto fill = [&] { std::fill(data.begin(), data.end(), float(comm.rank() + 1)); };
  auto check = [&] { checked_wrong += data.back() != float(p * (p + 1) / 2); };

  const double t_comm = timed(comm, iterations, [&] { fill(); coll::all_reduce(comm, data, coll::sum{}); check(); });
  // Compute units for about t_comm, measured on rank 0 and used by every rank.
  const auto start = std::chrono::steady_clock::now();
  sink += compute(100, scratch);
  const double per_unit = seconds(std::chrono::steady_clock::now() - start).count() / 100;
  long units = std::max(1L, long(t_comm / per_unit));
  coll::broadcast(comm, std::span(&units, 1), 0);

  const double t_compute = timed(comm, iterations, [&] { sink += compute(units, scratch); });
  const double t_blocking = timed(comm, iterations, [&] {
    fill();
    sink += compute(units, scratch);
    coll::all_reduce(comm, data, coll::sum{});
    check();
  });
#if defined(COLLECTIVES_PROGRAMS_FOR_TESTS)
  if (comm.rank() == 0) std::cout << "(built for the tests at -O1, COLLECTIVES_PROGRAMS_FOR_TESTS: not for figures)\n";
#endif
  if (comm.rank() == 0)
    std::cout << comm.transport().name() << ", " << p << " ranks, " << bytes << " bytes: comm " << t_comm * 1e3
              << " ms, compute " << t_compute * 1e3 << " ms, compute then blocking all_reduce " << t_blocking * 1e3 << " ms\n";
  auto overlapped = [&](int polls) {
    return timed(comm, iterations, [&] {
      fill();
      auto h = coll::iall_reduce(comm, data, coll::sum{});
      const long slice = std::max(1L, units / std::max(1, polls));
      for (long done = 0; done < units; done += slice) {
        sink += compute(std::min(slice, units - done), scratch);
        if (polls > 0) comm.progress();
      }
      h.wait();
      check();
    });
  };
  auto report = [&](const std::string& how, double t_overlap) {
    if (comm.rank() == 0)
      std::cout << "  iall_reduce beside the compute, " << how << ": " << t_overlap * 1e3 << " ms, hidden "
                << int(std::lround(100 * (t_blocking - t_overlap) / t_comm)) << "% of comm\n";
  };
  for (int polls : {0, 4, 16, 64}) report(std::to_string(polls) + " progress calls", overlapped(polls));
  comm.start_progress_thread();
  report("a progress thread", overlapped(0));
  std::vector<double> waits;
  timed(comm, iterations, [&] {
    fill();
    auto h = coll::iall_reduce(comm, data, coll::sum{});
    constexpr int asks = 16;
    std::vector<int> small(asks, 1);
    std::vector<coll::call_handle<coll::automatic_transport>> next;
    for (int i = 0; i < asks; ++i) {
      sink += compute(std::max(1L, units / asks), scratch);
      const bool in_flight = !h.finished();
      const auto asked = std::chrono::steady_clock::now();
      next.push_back(coll::iall_reduce(comm, std::span(&small[std::size_t(i)], 1), coll::sum{}));
      if (in_flight) waits.push_back(seconds(std::chrono::steady_clock::now() - asked).count());
    }
    coll::wait_all(std::span(next));
    h.wait();
    check();
    checked_wrong += std::count(small.begin(), small.end(), p) != asks;
  });
  const double wait_median = coll::all_reduce(comm, waits.empty() ? 0.0 : median(waits), coll::max{});
  const double wait_most = coll::all_reduce(comm, waits.empty() ? 0.0 : *std::max_element(waits.begin(), waits.end()), coll::max{});
  const long asked_in_flight = coll::all_reduce(comm, long(waits.size()), coll::min{});
  if (comm.rank() == 0)
    std::cout << "  a small call started while the progress thread moves the iall_reduce waited for its turn: median "
              << wait_median * 1e6 << " us, at most " << wait_most * 1e6 << " us (" << asked_in_flight
              << " starts timed on each rank, at least)\n";
  comm.stop_progress_thread();
  if (sink == 42.0f) std::cout << "";  // keeps the compute
  if (checked_wrong != 0) {
    std::cerr << "rank " << comm.rank() << ": " << checked_wrong << " wrong all_reduce results\n";
    return 1;
  }
  return 0;
}
