// The device tests' ranks: the processes of a collectives-run job over device_ipc,
// with the device runtime the test's backend chose (backend.hpp of standin/ or
// cuda/, found through the include path like the collective grids' ranks.hpp).
// Every process runs the same test cases in the same order and checks its own rank.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <collectives/collectives.hpp>
#include <collectives/transport/device_ipc.hpp>
#include <doctest/doctest.h>

#include "backend.hpp"

namespace testing {

using comm = collectives::communicator<collectives::device_ipc<device_runtime>>;

inline comm& world() {
  static comm c = [] {
    auto made = comm::from_env();
    made.set_timeout(std::chrono::seconds(60));
    return made;
  }();
  return c;
}

inline const std::vector<int> rank_counts{collectives::bootstrap::detect_launch().size};

template <class Fn>
void on_ranks(int p, Fn fn) {
  REQUIRE(p == world().size());
  const std::string problem = fn(world());
  INFO("rank ", world().rank());
  CHECK_MESSAGE(problem.empty(), problem);
}

}  // namespace testing
