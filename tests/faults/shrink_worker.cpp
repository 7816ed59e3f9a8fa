// One rank of the shrink test (shrink_test.cpp), run under collectives-run --keep-going:
//
//   collectives-run -n P --keep-going shrink_worker MODE RANK DELAY_US SEED
//
// Every rank loops over all-reduces whose sizes SEED picks, checking each, until one
// fails; then the survivors shrink and go on with a few more, checked against the
// serial sum over the ranks that are left. MODE says what goes wrong:
//   kill      rank RANK kills itself with SIGKILL DELAY_US after start-up;
//   kill-two  the same, and rank (RANK + 1) % P dies too, DELAY_US / 100 after it
//             starts to shrink (so during the agreement, or just after it);
//   revoke    nobody dies: at the step DELAY_US picks, rank RANK waits 50 ms, while
//             the others are blocked in the all-reduce it skipped, then revokes.
// A shrunk group whose first calls fail (a rank died during the shrink) shrinks again.
// At the end the survivors split their group in two halves, and each sums in its half.
//
// What each rank prints (one flushed line each; times are steady_clock microseconds):
//   killing at T                             the rank about to die
//   revoking at T                            the revoking rank
//   failed at T code=CODE what=WHAT          a survivor caught the failure
//   shrunk at T size=N took=US               a shrink returned
//   done size=N ranks=A,B,C                  the survivors' group, by their old ranks
//   WRONG ... / FAILED ...                   a wrong result (exit 4) or anything else (exit 5)
// The per-call timeout is COLLECTIVES_TIMEOUT (3 s unless set); the whole run gives up
// after 40 s. The transport is automatic_transport: collectives-run --transport picks,
// rdma too where libfabric was found (the build defines FAULT_WORKER_WITH_RDMA).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <collectives/collectives.hpp>
#include <collectives/transport/automatic.hpp>
#ifdef FAULT_WORKER_WITH_RDMA
#include <collectives/transport/rdma.hpp>  // offers rdma to automatic_transport
#endif

#include "worker_lines.hpp"

namespace {

namespace coll = collectives;
using comm_t = coll::communicator<coll::automatic_transport>;
using namespace fault_workers;

long long now_us() { return now_ns() / 1000; }

[[noreturn]] void die() {
  say("killing at " + std::to_string(now_us()));
  ::raise(SIGKILL);
  std::abort();
}

// Small integers, so that every sum is exact in float.
float value(int old_rank, std::size_t i, std::uint64_t step) { return float((old_rank + 1) * 64 + int((i + step) % 61)); }

struct wrong {
  std::string what;
};

// One all-reduce of a size the step picks; `members` are the group's old ranks.
template <class Comm>
void one_step(Comm& comm, const std::vector<int>& members, int old_rank, std::uint64_t step, std::vector<float>& data) {
  splitmix64 rng{step * 7919};
  const std::size_t n = std::size_t(rng.next() % 4 == 0 ? rng.next() % (1 << 20) : rng.next() % 5000);
  data.resize(n);
  for (std::size_t i = 0; i < n; ++i) data[i] = value(old_rank, i, step);
  coll::all_reduce(comm, std::span<float>(data), coll::sum{});
  for (std::size_t i = 0; i < n; i += 1 + n / 64) {
    float want = 0;
    for (int m : members) want += value(m, i, step);
    if (data[i] != want)
      throw wrong{"step " + std::to_string(step) + " of " + std::to_string(n) + " floats: element " + std::to_string(i) +
                  " is " + std::to_string(data[i]) + ", expected " + std::to_string(want)};
  }
}

// The old ranks of the group's members, in the group's order, and the step they go on
// from: past the furthest any of them came (they may have failed at different steps).
std::vector<int> members_of(comm_t& comm, int old_rank, std::uint64_t& step) {
  const std::size_t n = std::size_t(comm.size());
  std::vector<std::int64_t> all(2 * n);
  const std::int64_t mine[2] = {old_rank, std::int64_t(step)};
  coll::all_gather(comm, std::span<const std::int64_t>(mine, 2), std::span<std::int64_t>(all));
  std::vector<int> members;
  for (std::size_t i = 0; i < n; ++i) {
    members.push_back(int(all[2 * i]));
    step = std::max(step, std::uint64_t(all[2 * i + 1]));
  }
  ++step;
  return members;
}

std::string code_name(const coll::error& e) { return e.code().message(); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s kill|kill-two|revoke RANK DELAY_US SEED\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  const int chosen = std::atoi(argv[2]);
  const long long delay_us = std::atoll(argv[3]);
  const std::uint64_t seed = std::strtoull(argv[4], nullptr, 10);
  const auto give_up = steady::now() + std::chrono::seconds(40);
  try {
    std::optional<comm_t> comm(comm_t::from_env());
    const int old_rank = comm->rank(), old_size = comm->size();
    if (!std::getenv("COLLECTIVES_TIMEOUT")) comm->set_timeout(std::chrono::seconds(3));
    const int second = (chosen + 1) % old_size;
    if (mode != "revoke" && old_rank == chosen)
      std::thread([delay_us] {
        std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
        die();
      }).detach();

    std::vector<int> members(static_cast<std::size_t>(old_size));
    for (int r = 0; r < old_size; ++r) members[std::size_t(r)] = r;
    std::vector<float> data;
    std::uint64_t step = seed * 1000;
    const std::uint64_t revoke_step = step + std::uint64_t(delay_us) % 20;
    for (bool shrunk = false;;) {
      try {
        for (int after = 0; !shrunk || after < 5; ++step, ++after) {
          if (steady::now() > give_up) throw std::runtime_error("no failure came within 40 s");
          if (mode == "revoke" && old_rank == chosen && step == revoke_step) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            say("revoking at " + std::to_string(now_us()));
            comm->revoke();
          }
          one_step(*comm, members, old_rank, step, data);
        }
        break;
      } catch (const coll::error& e) {
        say("failed at " + std::to_string(now_us()) + " code=" + code_name(e) + " what=" + e.what());
      }
      for (;;) {  // until the shrunk group answers: a rank may die during a shrink
        if (mode == "kill-two" && old_rank == second)
          std::thread([delay_us] {
            std::this_thread::sleep_for(std::chrono::microseconds(delay_us / 100));
            die();
          }).detach();
        const long long t0 = now_us();
        comm.emplace(comm->shrink());
        say("shrunk at " + std::to_string(now_us()) + " size=" + std::to_string(comm->size()) +
            " took=" + std::to_string(now_us() - t0));
        if (mode == "kill-two" && old_rank == second) std::this_thread::sleep_for(std::chrono::seconds(60));
        try {
          members = members_of(*comm, old_rank, step);
          break;
        } catch (const coll::error& e) {
          say("failed at " + std::to_string(now_us()) + " code=" + code_name(e) + " what=" + e.what());
        }
      }
      shrunk = true;
    }
    // A shrunk group splits like any other: halves by rank, each summing its own.
    auto half = comm->split(comm->rank() % 2, comm->rank());
    std::vector<int> half_members;
    for (std::size_t i = std::size_t(comm->rank() % 2); i < members.size(); i += 2) half_members.push_back(members[i]);
    one_step(*half, half_members, old_rank, step + 1, data);
    std::string ranks;
    for (int m : members) ranks += (ranks.empty() ? "" : ",") + std::to_string(m);
    say("done size=" + std::to_string(comm->size()) + " ranks=" + ranks);
    return 0;
  } catch (const wrong& w) {
    say("WRONG " + w.what);
    return 4;
  } catch (const std::exception& e) {
    say(std::string("FAILED ") + e.what());
    return 5;
  }
}
