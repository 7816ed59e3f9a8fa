// The host's copy limits, to quote beside all_reduce figures over shared memory (every
// byte an shm transport moves is copied at least once):
//   memcpy        memcpy of 64 MiB between two buffers already touched, timed several times;
//   two at once   the same in two threads on two cores at once (do they share a limit?);
//   between cores bytes written by one core and read by another, through a ring of
//                 slots as shm's FIFOs are (8 of 64 KiB), from and into buffers that
//                 stay in cache: one way, and both ways at once, which is what a
//                 2-rank all_reduce's two ranks do (each sends half and receives half).
//
// usage: memcpy_bandwidth [repetitions = 9] [bytes = 67108864]
// prints (GB/s: bytes copied per second; the memory traffic is twice that):
//   memcpy BYTES bytes: median TIME us, RATE GB/s (median of N)
//   two at once: RATE and RATE GB/s
//   between cores: one way RATE GB/s, both ways RATE GB/s each way
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace {

using seconds = std::chrono::duration<double>;

// `together`, where given: the threads copying at once, which start timing only once
// each has its buffers (touching 128 MiB takes as long as several copies).
double median_copy_seconds(int repetitions, std::size_t bytes, std::atomic<int>* together = nullptr) {
  std::vector<unsigned char> from(bytes, 1), to(bytes, 0);  // touched: no page faults inside the timing
  if (together) {
    together->fetch_sub(1);
    while (together->load() > 0) {
    }
  }
  std::vector<double> times;
  for (int i = 0; i < repetitions + 1; ++i) {  // the first copy warms up, and is not counted
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(to.data(), from.data(), bytes);
    asm volatile("" : : "g"(to.data()) : "memory");  // the copy counts as used: no compiler may drop it
    if (i > 0) times.push_back(seconds(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Runs `work` on the given core (where the host has it), or wherever the scheduler puts it.
template <class Work>
std::thread on_core(int core, Work work) {
  return std::thread([core, work] {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // best effort: a refusal leaves it unbound
    work();
  });
}

// One direction between two cores: a producer fills slots, a consumer empties them.
struct slot_ring {
  static constexpr std::size_t slot_bytes = 64 << 10, slots = 8;
  alignas(64) std::atomic<std::size_t> filled{0};
  alignas(64) std::atomic<std::size_t> emptied{0};
  alignas(64) unsigned char data[slots][slot_bytes];

  void put(std::size_t n, const unsigned char* from) {
    while (n - emptied.load(std::memory_order_acquire) >= slots) {
    }
    std::memcpy(data[n % slots], from, slot_bytes);
    filled.store(n + 1, std::memory_order_release);
  }
  void take(std::size_t n, unsigned char* into) {
    while (filled.load(std::memory_order_acquire) <= n) {
    }
    std::memcpy(into, data[n % slots], slot_bytes);
    emptied.store(n + 1, std::memory_order_release);
  }
};

// Bytes per second each way between cores 0 and 1, one way or both ways at once; the
// private buffers are 4 slots long, so that only the crossing leaves the core's cache.
double between_cores(std::size_t bytes, bool both_ways) {
  constexpr std::size_t room = 4 * slot_ring::slot_bytes;
  auto to_one = std::make_unique<slot_ring>(), to_zero = std::make_unique<slot_ring>();
  std::vector<unsigned char> out0(room, 1), out1(room, 1), in0(room, 0), in1(room, 0);
  const std::size_t pieces = bytes / slot_ring::slot_bytes;
  const auto at = [](std::vector<unsigned char>& b, std::size_t n) { return b.data() + (n % 4) * slot_ring::slot_bytes; };
  const auto start = std::chrono::steady_clock::now();
  std::thread zero = on_core(0, [&] {
    for (std::size_t n = 0; n < pieces; ++n) {
      to_one->put(n, at(out0, n));
      if (both_ways) to_zero->take(n, at(in0, n));
    }
  });
  std::thread one = on_core(1, [&] {
    for (std::size_t n = 0; n < pieces; ++n) {
      if (both_ways) to_zero->put(n, at(out1, n));
      to_one->take(n, at(in1, n));
    }
  });
  zero.join();
  one.join();
  return double(pieces * slot_ring::slot_bytes) / seconds(std::chrono::steady_clock::now() - start).count();
}

double median_of_three(double a, double b, double c) { return std::max(std::min(a, b), std::min(std::max(a, b), c)); }

}  // namespace

int main(int argc, char** argv) {
  const int repetitions = argc > 1 ? std::max(1, std::atoi(argv[1])) : 9;
  const std::size_t bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : std::size_t(64) << 20;
  const double alone = median_copy_seconds(repetitions, bytes);
  std::printf("memcpy %zu bytes: median %.1f us, %.2f GB/s (median of %d)\n", bytes, alone * 1e6,
              double(bytes) / alone * 1e-9, repetitions);
  std::fflush(stdout);

  double both[2] = {};
  std::atomic<int> ready{2};
  std::thread first = on_core(0, [&] { both[0] = median_copy_seconds(repetitions, bytes, &ready); });
  std::thread second = on_core(1, [&] { both[1] = median_copy_seconds(repetitions, bytes, &ready); });
  first.join();
  second.join();
  std::printf("two at once: %.2f and %.2f GB/s\n", double(bytes) / both[0] * 1e-9, double(bytes) / both[1] * 1e-9);

  const std::size_t crossing = std::max(bytes, std::size_t(slot_ring::slot_bytes));
  const double one_way = median_of_three(between_cores(crossing, false), between_cores(crossing, false),
                                         between_cores(crossing, false));
  const double each_way = median_of_three(between_cores(crossing, true), between_cores(crossing, true),
                                          between_cores(crossing, true));
  std::printf("between cores: one way %.2f GB/s, both ways %.2f GB/s each way\n", one_way * 1e-9, each_way * 1e-9);
}
