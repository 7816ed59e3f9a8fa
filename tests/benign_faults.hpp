// Benign faults for faulty<T>, as the grids and the conformance suite inject them: a
// fifth of the posts held back up to 300 us (streams to different peers overtake each
// other, receives come after their messages) and a sleep of up to 300 us before one post
// in fifty. Every message still arrives, so every result must be exact.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <random>

#include <collectives/transport/faulty.hpp>

namespace testing {

// Where a process's fault plans start: COLLECTIVES_FAULTY_SEED, to replay a run, or one
// drawn once per process. A test prints it with its failures.
inline std::uint64_t faulty_seed() {
  static const std::uint64_t seed = [] {
    if (const char* given = std::getenv("COLLECTIVES_FAULTY_SEED"))
      return static_cast<std::uint64_t>(std::strtoull(given, nullptr, 10));
    std::random_device random;
    return std::uint64_t(random()) << 32 | random();
  }();
  return seed;
}

inline collectives::fault_plan benign_faults(std::uint64_t seed) {
  return {.seed = seed, .delay_chance = 0.2, .max_delay = std::chrono::microseconds(300), .stall_chance = 0.02,
          .max_stall = std::chrono::microseconds(300)};
}

}  // namespace testing
