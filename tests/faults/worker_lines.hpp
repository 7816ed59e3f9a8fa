// What the fault tests' workers share: the time, a line on stdout that survives the
// process's death right after, and the same stream of numbers on every rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace fault_workers {

using steady = std::chrono::steady_clock;

inline long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now().time_since_epoch()).count();
}

// One whole line on stdout, flushed at once: the process may die right after.
inline void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

// The same stream of numbers on every rank, whatever the standard library.
struct splitmix64 {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::size_t below(std::size_t n) { return std::size_t(next() % n); }
};

}  // namespace fault_workers
