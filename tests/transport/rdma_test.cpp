// The rdma transport's own promises, with ranks as threads over libfabric's tcp
// provider: a clear error for a provider that is not there, registrations kept and
// reused, registrations dropped when their memory goes away, and automatic_transport
// taking rdma when asked. (What every transport promises is in conformance_test.cpp.)
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <collectives/bootstrap/file_store.hpp>
#include <collectives/collectives.hpp>
#include <collectives/transport/automatic.hpp>
#include <collectives/transport/rdma.hpp>
#include <doctest/doctest.h>

#include "../scoped_env.hpp"

namespace coll = collectives;
using namespace std::chrono_literals;

namespace {

// A directory for one group's file store, removed afterwards.
class store_dir {
 public:
  store_dir() : path_(std::filesystem::temp_directory_path() / ("collectives-rdma-test-" + std::to_string(::getpid()) + "-" +
                                                                 std::to_string(made_++))) {}
  ~store_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  static inline int made_ = 0;
  std::filesystem::path path_;
};

coll::rdma_options over(const char* provider) {
  coll::rdma_options o;
  o.provider = provider;
  o.startup_timeout = 20s;
  return o;
}

// Runs fn(communicator) on `ranks` threads, each a rank over rdma (tcp provider).
template <class Fn>
void on_ranks(int ranks, Fn fn) {
  store_dir dir;
  std::vector<std::exception_ptr> errors(std::size_t(ranks), nullptr);
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < ranks; ++r)
      threads.emplace_back([&, r] {
        try {
          coll::bootstrap::file_store store(dir.path());
          coll::communicator<coll::rdma> comm(coll::rdma(r, ranks, store, over("tcp"), false), 20s);
          fn(comm);
        } catch (...) {
          errors[std::size_t(r)] = std::current_exception();
        }
      });
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

template <class Fn>
void on_two_ranks(Fn fn) {
  on_ranks(2, fn);
}

// A message large enough to be announced and read, not sent whole.
constexpr std::size_t large = 1u << 20;

std::byte pattern_byte(std::size_t i, unsigned seed) { return std::byte((i * 7 + seed * 13 + (i >> 9)) & 0xff); }

}  // namespace

TEST_CASE("a provider that is not there is refused at start-up, by name") {
  try {
    (void)coll::rdma::join({.rank = 0, .size = 1, .local_rank = 0, .local_size = 1, .master_addr = {}, .master_port = 0,
                            .origin = "arguments", .launcher_store_prefix = {}, .job_on_this_host = {},
                            .derived_port_of_job = {}},
                           coll::auth::job_token("rdma-test"), over("no-such-provider"));
    FAIL("joined over a provider that does not exist");
  } catch (const coll::error& e) {
    CHECK(e.code() == coll::errc::invalid_config);
    CHECK(std::string(e.what()).find("rdma: libfabric has no provider \"no-such-provider\"") != std::string::npos);
    CHECK(std::string(e.what()).find("fi_info -l") != std::string::npos);
  }
  scoped_env wrong("COLLECTIVES_RDMA_EAGER_BYTES", "12");
  CHECK_THROWS_WITH_AS((void)coll::rdma_options::from_env(), doctest::Contains("COLLECTIVES_RDMA_EAGER_BYTES=12"), coll::error);
}

TEST_CASE("a group of one says which provider, fabric and domain it has") {
  store_dir dir;
  coll::bootstrap::file_store store(dir.path());
  const coll::rdma alone(0, 1, store, over("tcp"), false);
  CHECK(alone.provider().find("tcp") != std::string::npos);
  CHECK(alone.describe().starts_with("rdma rank 0 of 1 over libfabric provider tcp"));
  CHECK(alone.describe().find("larger ones read by their receiver") != std::string::npos);
  CHECK(coll::hosts_known_to(alone) == std::vector<int>{0});
}

TEST_CASE("the ranks learn their hosts with their addresses: a call that plans by hosts exchanges nothing for them") {
  on_two_ranks([](coll::communicator<coll::rdma>& comm) {
    CHECK(coll::hosts_known_to(comm.transport()) == std::vector<int>{0, 0});  // both threads on this host
  });
}

TEST_CASE("a buffer sent and received again is registered once") {
  on_two_ranks([](coll::communicator<coll::rdma>& comm) {
    std::vector<std::byte> buffer(large);
    const auto& counts = comm.transport().registrations();
    for (unsigned round = 0; round < 4; ++round) {
      if (comm.rank() == 0) {
        for (std::size_t i = 0; i < large; ++i) buffer[i] = pattern_byte(i, round);
        coll::send(comm, std::span<const std::byte>(buffer), 1, round);
      } else {
        coll::recv(comm, std::span<std::byte>(buffer), 0, round);
        for (std::size_t i = 0; i < large; i += 4093) REQUIRE(buffer[i] == pattern_byte(i, round));
      }
    }
    if (!comm.transport().keeps_registrations()) {
      MESSAGE("this kernel refuses the memory monitor (userfaultfd): each transfer registers its buffer");
      CHECK(counts.misses == 4);
      return;
    }
    CHECK(counts.misses == 1);  // the first transfer registers; the other three find it
    CHECK(counts.hits == 3);
  });
}

TEST_CASE("memory unmapped and mapped again at the same address is registered afresh") {
  on_two_ranks([](coll::communicator<coll::rdma>& comm) {
    const auto& counts = comm.transport().registrations();
    void* first = nullptr;
    for (unsigned round = 0; round < 3; ++round) {
      // Anonymous memory, as a large allocation gets; after the first round, at the address the last one had.
      void* at = ::mmap(first, large, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | (first ? MAP_FIXED_NOREPLACE : 0), -1, 0);
      REQUIRE(at != MAP_FAILED);  // MAP_FIXED_NOREPLACE: there, or not at all
      if (!first) first = at;
      std::span<std::byte> buffer(static_cast<std::byte*>(at), large);
      const auto before = counts;
      if (comm.rank() == 0) {
        for (std::size_t i = 0; i < large; ++i) buffer[i] = pattern_byte(i, round + 10);
        coll::send(comm, std::span<const std::byte>(buffer), 1, round);
      } else {
        coll::recv(comm, buffer, 0, round);
        for (std::size_t i = 0; i < large; i += 4093) REQUIRE(buffer[i] == pattern_byte(i, round + 10));
      }
      if (round > 0 && comm.transport().keeps_registrations()) {
        CHECK(counts.invalidated > before.invalidated);  // the unmapping dropped the old registration
        CHECK(counts.misses == before.misses + 1);       // and this round registered the new pages
      }
      REQUIRE(::munmap(at, large) == 0);
      coll::barrier(comm);  // both ranks' memory goes before the next round's
    }
    if (!comm.transport().keeps_registrations())
      MESSAGE("this kernel refuses the memory monitor (userfaultfd): each transfer registers its buffer");
  });
}

TEST_CASE("the survivors shrink to a group on new endpoints, which works and shrinks again") {
  std::vector<int> sizes(3, -1), sums(3, -1), again(3, -1);
  on_ranks(3, [&](coll::communicator<coll::rdma>& comm) {
    const auto r = std::size_t(comm.rank());
    if (r == 1) return;  // leaves: its door closes with it
    std::vector<int> x{comm.rank() + 1};
    CHECK_THROWS_AS(coll::all_reduce(comm, x, coll::sum{}), coll::error);
    auto shrunk = comm.shrink();
    sizes[r] = shrunk.size();
    std::vector<int> large_one(300'000, comm.rank() + 1);  // read, not sent whole, over the new endpoints
    coll::all_reduce(shrunk, large_one, coll::sum{});
    sums[r] = large_one.back();
    auto same = shrunk.shrink();  // nobody failed: every rank stays
    again[r] = coll::all_reduce(same, same.rank() + 10, coll::sum{});
  });
  CHECK(sizes == std::vector<int>{2, -1, 2});
  CHECK(sums == std::vector<int>{4, -1, 4});
  CHECK(again == std::vector<int>{21, -1, 21});
}

TEST_CASE("automatic_transport takes rdma when asked, and its calls go through") {
  store_dir dir;
  scoped_env store("COLLECTIVES_STORE_DIR", dir.path().c_str());
  scoped_env provider("COLLECTIVES_FABRIC_PROVIDER", "tcp");
  std::vector<std::exception_ptr> errors(3);
  {
    std::vector<std::jthread> ranks;
    for (int r = 0; r < 3; ++r)
      ranks.emplace_back([&, r] {
        try {
          coll::automatic_options o = coll::automatic_options::from_env();
          o.selection = coll::transport_selection::rdma;
          coll::communicator<coll::automatic_transport> comm(
              coll::automatic_transport::join({.rank = r, .size = 3, .local_rank = r, .local_size = 3, .master_addr = {},
                                               .master_port = 0, .origin = "arguments", .launcher_store_prefix = {},
                                               .job_on_this_host = {}, .derived_port_of_job = {}},
                                              coll::auth::job_token("rdma-test"), o),
              20s);
          CHECK(comm.transport().name() == "rdma");
          std::vector<double> v(100'003, comm.rank() + 1.0);
          coll::all_reduce(comm, std::span(v), coll::sum{});
          CHECK(v.front() == 6.0);
          CHECK(v.back() == 6.0);
        } catch (...) {
          errors[std::size_t(r)] = std::current_exception();
        }
      });
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}
