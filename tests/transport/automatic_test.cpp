// automatic_transport with ranks as threads of this process: COLLECTIVES_TRANSPORT
// read strictly, the choice between shm and tcp, every call forwarded to the chosen
// transport, the automatic algorithm given that transport's link costs, and the hosts
// the chosen transport knows.
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <collectives/collectives.hpp>
#include <collectives/transport/automatic.hpp>
#include <collectives/transport/shm.hpp>
#include <collectives/transport/tcp.hpp>
#include <doctest/doctest.h>

#include "../scoped_env.hpp"

namespace coll = collectives;
using namespace std::chrono_literals;

namespace {

const coll::auth::job_token token("automatic-test-token");


bool same_costs(const coll::link_costs& a, const coll::link_costs& b) {
  return a.latency_s == b.latency_s && a.per_message_s == b.per_message_s && a.seconds_per_byte == b.seconds_per_byte &&
         a.reduce_seconds_per_byte == b.reduce_seconds_per_byte;
}

coll::bootstrap::launch_info job(int rank, int size, int local_size) {
  return {.rank = rank, .size = size, .local_rank = rank % local_size, .local_size = local_size, .master_addr = {},
          .master_port = 0, .origin = "arguments", .launcher_store_prefix = {}, .job_on_this_host = {}, .derived_port_of_job = {}};
}

coll::automatic_options choosing(coll::transport_selection selection) {
  coll::automatic_options o;
  o.selection = selection;
  o.shm.startup_timeout = 20s;
  o.tcp.interface = "127.0.0.1";
  o.tcp.startup_timeout = 20s;
  return o;
}

// Runs fn(rank) on `size` threads; rethrows the first failure.
template <class Fn>
void on_threads(int size, Fn fn) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  {
    std::vector<std::jthread> ranks;
    for (int r = 0; r < size; ++r)
      ranks.emplace_back([&, r] {
        try {
          fn(r);
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
        }
      });
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// An all_reduce of 1 Mi ints (large enough for the ring and its fused receives) and
// one of 3 ints; checks both, and returns the costs the automatic algorithm saw.
coll::link_costs all_reduce_and_costs(coll::communicator<coll::automatic_transport>& comm) {
  const int p = comm.size();
  for (const std::size_t n : {std::size_t{1} << 20, std::size_t{3}}) {
    std::vector<int> data(n);
    std::iota(data.begin(), data.end(), comm.rank());
    coll::all_reduce(comm, data, coll::sum{});
    for (const std::size_t i : {std::size_t{0}, n / 2, n - 1})
      REQUIRE(data[i] == int(i) * p + p * (p - 1) / 2);
  }
  return coll::costs_of(comm.transport());
}

}  // namespace

TEST_CASE("COLLECTIVES_TRANSPORT is auto, shm, tcp or rdma, and nothing else") {
  {
    scoped_env unset("COLLECTIVES_TRANSPORT", nullptr);
    CHECK(coll::selected_transport() == coll::transport_selection::automatic);
  }
  for (const auto& [text, expected] : {std::pair{"", coll::transport_selection::automatic},
                                       std::pair{"auto", coll::transport_selection::automatic},
                                       std::pair{"shm", coll::transport_selection::shm},
                                       std::pair{"tcp", coll::transport_selection::tcp},
                                       std::pair{"rdma", coll::transport_selection::rdma}}) {
    scoped_env set("COLLECTIVES_TRANSPORT", text);
    CHECK(coll::selected_transport() == expected);
  }
  for (const char* wrong : {"SHM", "udp", "shm ", "tcp,shm"}) {
    scoped_env set("COLLECTIVES_TRANSPORT", wrong);
    try {
      (void)coll::selected_transport();
      FAIL("accepted COLLECTIVES_TRANSPORT=", wrong);
    } catch (const coll::error& e) {
      CHECK(e.code() == coll::errc::invalid_config);
      CHECK(std::string(e.what()).find(coll::settings::assignment("COLLECTIVES_TRANSPORT", wrong) +
                                       " is not a choice") != std::string::npos);
      CHECK(std::string(e.what()).find("auto, shm, tcp or rdma") != std::string::npos);
    }
  }
}

TEST_CASE("a job alone on its host gets shm from auto, and what it asks for otherwise") {
  coll::automatic_transport automatic = coll::automatic_transport::join(
      job(0, 1, 1), token, choosing(coll::transport_selection::automatic));
  CHECK(automatic.name() == "shm");
  CHECK(automatic.describe().starts_with("shm rank 0 of 1"));
  CHECK(same_costs(coll::costs_of(automatic), coll::shm::costs));

  coll::automatic_transport forced = coll::automatic_transport::join(job(0, 1, 1), token,
                                                                     choosing(coll::transport_selection::tcp));
  CHECK(forced.name() == "tcp");
  CHECK(forced.describe().starts_with("tcp rank 0 of 1"));
  CHECK(same_costs(coll::costs_of(forced), coll::tcp::costs));
}

TEST_CASE("shm is refused, before anything starts, for a job not all on this host") {
  try {
    (void)coll::automatic_transport::join(job(0, 4, 2), token, choosing(coll::transport_selection::shm));
    FAIL("joined over shm with half of the job on another host");
  } catch (const coll::error& e) {
    CHECK(e.code() == coll::errc::invalid_config);
    CHECK(std::string(e.what()).find("COLLECTIVES_TRANSPORT=shm, but the launcher (arguments) puts 2 of the job's 4 "
                                     "ranks on this host") != std::string::npos);
  }
}

TEST_CASE("rdma is refused, naming what is missing, in a program built without it") {
  // This test includes automatic.hpp alone: rdma.hpp, which plugs rdma in, is not here.
  try {
    (void)coll::automatic_transport::join(job(0, 2, 1), token, choosing(coll::transport_selection::rdma));
    FAIL("joined over rdma without the rdma transport");
  } catch (const coll::error& e) {
    CHECK(e.code() == coll::errc::invalid_config);
    CHECK(std::string(e.what()).find("COLLECTIVES_TRANSPORT=rdma, but this program was built without the rdma transport: "
                                     "include <collectives/transport/rdma.hpp> and link collectives::rdma") !=
          std::string::npos);
  }
}

TEST_CASE("auto takes tcp when the job spans hosts, and the automatic algorithm gets tcp's costs") {
  // Two "hosts" of one rank each, meeting through a file store in a directory of their own.
  const auto store = std::filesystem::temp_directory_path() / ("collectives-automatic-test-" + std::to_string(::getpid()));
  scoped_env store_dir("COLLECTIVES_STORE_DIR", store.c_str());
  on_threads(2, [&](int r) {
    coll::communicator<coll::automatic_transport> comm(
        coll::automatic_transport::join(job(r, 2, 1), token, choosing(coll::transport_selection::automatic)), 20s);
    CHECK(comm.transport().name() == "tcp");
    CHECK(same_costs(all_reduce_and_costs(comm), coll::tcp::costs));
    // tcp learned the hosts with the addresses (both threads run on this one).
    CHECK(coll::hosts_known_to(comm.transport()) == std::vector<int>{0, 0});
  });
  std::filesystem::remove_all(store);
}

TEST_CASE("over shm, every call goes through, and the automatic algorithm gets shm's costs") {
  const std::string segment = "collectives-automatic-test-" + std::to_string(::getpid());
  on_threads(3, [&](int r) {
    coll::shm_options options;
    options.startup_timeout = 20s;
    coll::communicator<coll::automatic_transport> comm(coll::automatic_transport(coll::shm(r, 3, segment, options)), 20s);
    CHECK(comm.transport().name() == "shm");
    CHECK(same_costs(all_reduce_and_costs(comm), coll::shm::costs));
    // Over shm the transport knows every rank is on this host: hierarchical's plan asks
    // no one (the call takes one call number, not one more for an exchange of hosts).
    CHECK(coll::hosts_known_to(comm.transport()) == std::vector<int>(3, 0));
    const std::uint64_t before = comm.next_call();
    std::vector<int> data(5, r);
    coll::all_reduce<coll::hierarchical<>>(comm, data, coll::sum{});
    CHECK(data == std::vector<int>(5, 3));
    CHECK(comm.next_call() == before + 2);
    coll::barrier(comm);
  });
}
