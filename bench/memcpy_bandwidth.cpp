// The host's copy limit, to quote beside all_reduce figures over shared memory (every
// byte an shm transport moves is copied at least once): memcpy of 64 MiB between two
// buffers already touched, timed several times.
//
// usage: memcpy_bandwidth [repetitions = 9] [bytes = 67108864]
// prints: memcpy BYTES bytes: median TIME us, COPY_RATE GB/s (bytes copied per second;
//         the memory traffic is twice that, a read and a write of each byte)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  const int repetitions = argc > 1 ? std::max(1, std::atoi(argv[1])) : 9;
  const std::size_t bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : std::size_t(64) << 20;
  std::vector<unsigned char> from(bytes, 1), to(bytes, 0);  // touched: no page faults inside the timing
  std::vector<double> seconds;
  for (int i = 0; i < repetitions + 1; ++i) {  // the first copy warms up, and is not counted
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(to.data(), from.data(), bytes);
    asm volatile("" : : "g"(to.data()) : "memory");  // the copy counts as used: no compiler may drop it
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i > 0) seconds.push_back(s);
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  std::printf("memcpy %zu bytes: median %.1f us, %.2f GB/s (median of %d)\n", bytes, median * 1e6,
              double(bytes) / median * 1e-9, repetitions);
}
