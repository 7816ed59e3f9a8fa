// The device tests' ranks: the processes of a collectives-run job over device_ipc,
// with the device runtime the test's backend chose (backend.hpp of standin/ or
// cuda/, found through the include path like the collective grids' ranks.hpp).
#pragma once

#include <string>
#include <vector>

#include <collectives/collectives.hpp>
#include <collectives/transport/device_ipc.hpp>
#include <doctest/doctest.h>

#include "../collectives/job.hpp"
#include "backend.hpp"

namespace testing {

using comm = collectives::communicator<collectives::device_ipc<device_runtime>>;

// The job's size: the only rank count a process-based run can check.
inline const std::vector<int> rank_counts{collectives::bootstrap::detect_launch().size};

inline comm& world() {
  static comm c = join_job<comm>();
  return c;
}

// Not a template, as the grids' (grid/ranks.hpp).
inline void on_ranks(int p, rank_case<comm> fn) { check_this_rank(world(), p, fn); }

}  // namespace testing
