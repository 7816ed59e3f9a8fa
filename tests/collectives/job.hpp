// What every process-based ranks.hpp shares, whatever its transport: this process is
// one rank of a job that collectives-run (or mpirun, or srun) started, every process
// runs the same test cases in the same order, and each checks its own rank's answer.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <collectives/bootstrap/environment.hpp>
#include <doctest/doctest.h>

namespace testing {

// A call of a job's tests may take this long: ranks that outnumber the cores wait
// their turn, and a grid's large case takes seconds.
inline constexpr std::chrono::seconds job_timeout{60};

// This process's communicator for the job, with the tests' timeout.
template <class Comm>
Comm join_job() {
  auto made = Comm::from_env();
  made.set_timeout(job_timeout);
  return made;
}

// Runs fn(world) -> std::string (empty when right) on this rank and checks it.
template <class Comm, class Fn>
void check_this_rank(Comm& world, int p, const Fn& fn) {
  REQUIRE(p == world.size());
  const std::string problem = fn(world);
  INFO("rank ", world.rank());
  CHECK_MESSAGE(problem.empty(), problem);
}

}  // namespace testing
