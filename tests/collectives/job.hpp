// What every process-based ranks.hpp shares, whatever its transport: this process is
// one rank of a job that collectives-run (or mpirun, or srun) started, every process
// runs the same test cases in the same order, and each checks its own rank's answer.
#pragma once

#include <chrono>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
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

// What on_ranks runs on each rank, fn(comm) -> std::string (empty when right): a
// reference to the caller's callable, which lives through the call. Not a
// std::function, which compiles a manager (copy, destroy, type) beside each of a grid's
// hundreds of cases; this compiles one small function each.
template <class Comm>
class rank_case {
 public:
  template <class Fn>
    requires(!std::is_same_v<std::remove_cvref_t<Fn>, rank_case> && std::is_invocable_r_v<std::string, Fn&, Comm&>)
  rank_case(Fn&& fn) noexcept  // implicit, as std::function's: on_ranks(p, [&](comm& c) { ... })
      : fn_(const_cast<void*>(static_cast<const void*>(&fn))),
        call_([](void* f, Comm& c) -> std::string { return (*static_cast<std::remove_reference_t<Fn>*>(f))(c); }) {}
  std::string operator()(Comm& c) const { return call_(fn_, c); }

 private:
  void* fn_;
  std::string (*call_)(void*, Comm&);
};

// INFO(text) with its text made first, for the grids' templates: one scope type for
// every case, where INFO's lambda makes a type (and its code) per instantiation.
struct said {
  std::string text;
  void operator()(std::ostream* s) const { *s << text; }
};
inline doctest::detail::ContextScope<said> case_info(std::string text) {
  return doctest::detail::ContextScope<said>(said{std::move(text)});
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
