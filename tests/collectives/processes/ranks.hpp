// The collective tests' ranks as the processes of a job that collectives-run (or
// mpirun, or srun) started, over automatic_transport: COLLECTIVES_TRANSPORT
// (collectives-run --transport) picks shm, tcp or rdma, so one binary tests them all. This
// process is one rank, and every process runs the same test cases in the same order,
// so their collective calls line up. Each process checks its own rank's results; the
// launcher fails the job if any process fails.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <collectives/collectives.hpp>
#include <collectives/transport/automatic.hpp>
#if GRIDS_OVER_RDMA  // offers COLLECTIVES_TRANSPORT=rdma
#include <collectives/transport/rdma.hpp>
#endif
#include <doctest/doctest.h>

#include "../job.hpp"

namespace testing {

using comm = collectives::communicator<collectives::automatic_transport>;

inline comm& world() {
  static comm c = [] {
    auto made = join_job<comm>();
    // The test's name promises a transport: make sure it is the one that runs.
    if (const char* asked = std::getenv("COLLECTIVES_TRANSPORT"); asked != nullptr && std::string(asked) != "auto")
      REQUIRE(made.transport().name() == asked);
    return made;
  }();
  return c;
}

template <class Fn>
void on_ranks(int p, Fn fn) {
  check_this_rank(world(), p, fn);
}

// A counter all ranks share, for tests that watch the ranks from outside: an int in
// a small file that every process of the job maps (named after the job's port and
// the counter, so jobs never share one).
class shared_counter {
 public:
  explicit shared_counter(const std::string& name) {
    const char* port = std::getenv("MASTER_PORT");
    path_ = "/tmp/collectives-test-" + std::string(port ? port : "0") + "-" + name;
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, sizeof(int)) == 0);  // a new file reads as zero
    void* at = ::mmap(nullptr, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    REQUIRE(at != MAP_FAILED);
    value_ = static_cast<int*>(at);
  }
  ~shared_counter() {
    ::munmap(value_, sizeof(int));
    ::unlink(path_.c_str());  // the others keep their mapping
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
