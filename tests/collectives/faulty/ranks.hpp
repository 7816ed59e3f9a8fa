// The collective tests' ranks as threads of this process over faulty<inproc>, with
// benign faults only: a fifth of the posts held back up to 300 us (so streams to
// different peers overtake each other and receives come after their messages), and
// a rank that sleeps up to 300 us before one post in fifty. Every message still
// arrives, so every result must be exact. Each group draws its plans from a seed
// drawn once per run and printed on failure; COLLECTIVES_FAULTY_SEED=N replays it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <collectives/collectives.hpp>
#include <collectives/transport/faulty.hpp>
#include <doctest/doctest.h>

#include "../threads/shared_counter.hpp"

namespace testing {

using comm = collectives::communicator<collectives::faulty<collectives::inproc>>;

inline const std::vector<int> rank_counts{1, 2, 3, 4, 5, 8};

inline std::uint64_t fault_seed() {
  static const std::uint64_t seed = [] {
    const char* given = std::getenv("COLLECTIVES_FAULTY_SEED");
    return given ? std::strtoull(given, nullptr, 10) : (std::uint64_t(std::random_device{}()) << 32 | std::random_device{}());
  }();
  return seed;
}

template <class Fn>
void on_ranks(int p, Fn fn) {
  static std::atomic<std::uint64_t> groups{0};
  const std::uint64_t seed = fault_seed() + 1000003 * groups++;
  collectives::fault_plan plan{.seed = seed, .delay_chance = 0.2, .max_delay = std::chrono::microseconds(300),
                               .stall_chance = 0.02, .max_stall = std::chrono::microseconds(300)};
  collectives::inproc_group group(p);
  std::vector<std::string> problems(static_cast<std::size_t>(p));
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < p; ++r)
      threads.emplace_back([&, r] {
        try {
          comm c(collectives::faulty<collectives::inproc>(group.transport(r), plan), std::chrono::seconds(30));
          problems[std::size_t(r)] = fn(c);
        } catch (const std::exception& e) {
          problems[std::size_t(r)] = std::string("threw: ") + e.what();
          group.abort();
        }
      });
  }
  for (int r = 0; r < p; ++r) {
    INFO("rank ", r, " with faults from ", plan.describe(), " (COLLECTIVES_FAULTY_SEED=", fault_seed(), " replays this run)");
    CHECK_MESSAGE(problems[std::size_t(r)].empty(), problems[std::size_t(r)]);
  }
}

}  // namespace testing
