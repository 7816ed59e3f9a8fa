// The collective grids' ranks, chosen when the test starts, so that one build of each
// grid checks every way ranks can run:
//
//   under a launcher          this process is one rank of the job (collectives-run, mpirun,
//                             srun), over automatic_transport: COLLECTIVES_TRANSPORT
//                             (collectives-run --transport) picks shm, tcp or rdma;
//   GRID_RANKS=faulty         threads of this process over faulty<inproc>, benign faults only;
//   otherwise                 threads of this process over inproc.
//
// Every way, a rank holds a communicator<any_transport> (any_transport.hpp), so the
// grid's calls are compiled once. Each rank's answer is checked; under a launcher
// every process runs the same cases in the same order, so their calls line up.
//
// With faults, the benign ones of benign_faults.hpp: every result must be exact. Each
// group draws its plan from a seed drawn once per run and printed on failure;
// COLLECTIVES_FAULTY_SEED=N replays it.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <collectives/collectives.hpp>
#include <collectives/transport/automatic.hpp>
#include <collectives/transport/faulty.hpp>
#if GRIDS_OVER_RDMA  // offers COLLECTIVES_TRANSPORT=rdma
#include <collectives/transport/rdma.hpp>
#endif
#include <doctest/doctest.h>

#include "../../benign_faults.hpp"
#include "../job.hpp"
#include "any_transport.hpp"

namespace testing {

using comm = collectives::communicator<any_transport>;

enum class ranks_run { as_threads, as_threads_with_faults, as_processes };

inline ranks_run how_ranks_run() {
  static const ranks_run how = [] {
    if (collectives::bootstrap::rank_variables_set()) return ranks_run::as_processes;
    const char* asked = std::getenv("GRID_RANKS");
    const std::string_view name = asked ? asked : "threads";
    if (name == "faulty") return ranks_run::as_threads_with_faults;
    if (name != "threads") {
      MESSAGE("GRID_RANKS=", name, ": expected threads or faulty");
      std::exit(2);
    }
    return ranks_run::as_threads;
  }();
  return how;
}
inline bool ranks_are_processes() { return how_ranks_run() == ranks_run::as_processes; }

inline const std::vector<int> rank_counts =
    ranks_are_processes() ? std::vector<int>{collectives::bootstrap::detect_launch().size} : std::vector<int>{1, 2, 3, 4, 5, 8};

// This process's communicator for the job, when it is one rank of a job.
inline comm& world() {
  static comm c = [] {
    auto chosen = collectives::automatic_transport::from_env();
    // The test's name promises a transport: make sure it is the one that runs.
    if (const char* asked = std::getenv("COLLECTIVES_TRANSPORT"); asked != nullptr && std::string(asked) != "auto")
      REQUIRE(chosen.name() == asked);
    return comm(any_transport(std::move(chosen)), job_timeout);
  }();
  return c;
}

// Runs fn(comm) -> std::string (empty when right) on P ranks and checks every rank's answer.
// Not a template: a grid instantiates its cases for every algorithm, type and op, and
// the threads, the fault plan and the checks below are compiled once, not in each.
inline void on_ranks(int p, rank_case<comm> fn) {
  if (ranks_are_processes()) return check_this_rank(world(), p, fn);
  namespace coll = collectives;
  static std::atomic<std::uint64_t> groups{0};
  const bool with_faults = how_ranks_run() == ranks_run::as_threads_with_faults;
  const coll::fault_plan plan = benign_faults(faulty_seed() + 1000003 * groups++);
  coll::inproc_group group(p);
  auto transport_of = [&](int r) {
    if (with_faults) return any_transport(coll::faulty<coll::inproc>(group.transport(r), plan));
    return any_transport(group.transport(r));
  };
  std::vector<std::string> problems(static_cast<std::size_t>(p));
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < p; ++r)
      threads.emplace_back([&, r] {
        try {
          comm c(transport_of(r), std::chrono::seconds(30));
          problems[std::size_t(r)] = fn(c);
        } catch (const std::exception& e) {
          problems[std::size_t(r)] = std::string("threw: ") + e.what();
          group.abort();
        }
      });
  }
  const std::string faults = with_faults ? " with faults from " + plan.describe() + " (COLLECTIVES_FAULTY_SEED=" +
                                                std::to_string(faulty_seed()) + " replays this run)"
                                          : "";
  for (int r = 0; r < p; ++r) {
    INFO("rank ", r, faults);
    CHECK_MESSAGE(problems[std::size_t(r)].empty(), problems[std::size_t(r)]);
  }
}

// A counter all ranks share, for tests that watch the ranks from outside. Threads
// share an int of this process; the processes of a job map a small file named after
// the job's port and the counter, so jobs never share one.
class shared_counter {
 public:
  explicit shared_counter(const std::string& name) {
    int fd = -1;
    if (ranks_are_processes()) {
      const char* port = std::getenv("MASTER_PORT");
      path_ = "/tmp/collectives-test-" + std::string(port ? port : "0") + "-" + name;
      fd = ::open(path_.c_str(), O_RDWR | O_CREAT, 0600);
      REQUIRE(fd >= 0);
      REQUIRE(::ftruncate(fd, sizeof(int)) == 0);  // a new file reads as zero
    }
    void* at = ::mmap(nullptr, sizeof(int), PROT_READ | PROT_WRITE, fd < 0 ? MAP_SHARED | MAP_ANONYMOUS : MAP_SHARED, fd, 0);
    if (fd >= 0) ::close(fd);
    REQUIRE(at != MAP_FAILED);
    value_ = static_cast<int*>(at);
  }
  ~shared_counter() {
    ::munmap(value_, sizeof(int));
    if (!path_.empty()) ::unlink(path_.c_str());  // the others keep their mapping
  }
  shared_counter(const shared_counter&) = delete;
  shared_counter& operator=(const shared_counter&) = delete;

  int fetch_add(int n) { return std::atomic_ref<int>(*value_).fetch_add(n); }
  int load() const { return std::atomic_ref<int>(*value_).load(); }

 private:
  std::string path_;
  int* value_ = nullptr;
};

}  // namespace testing
