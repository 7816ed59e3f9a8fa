// One rank of the culprit test (culprit_test.cpp), run under collectives-run:
//
//   collectives-run -n P culprit_worker MODE CULPRIT STEP SEED
//
// Every rank loops over all-reduces whose sizes SEED picks (1 to 1M floats) with a
// user-defined sum, checking each. At step STEP rank CULPRIT fails; MODE says how:
//   throw      its program throws between two calls, out of the scope that holds its
//              communicator, and exits 1;
//   op-throws  its reduce op throws in the middle of the step's all-reduce (its
//              transfers are given up halfway), and the exception leaves the same way;
//   op-exits   its reduce op calls std::exit(2) in the middle of the all-reduce: no
//              destructor runs, so it says no goodbye.
// (If the op is never called on the culprit in that step, it throws after the call.)
// Every other rank leaves as soon as a call of its own fails, the way most programs
// do, which is what used to make a survivor blame another survivor: half of them (by
// SEED) let the error leave the scope of their communicator, the others return from
// it (exit 3 either way).
//
// What each rank prints (one flushed line each; times are steady_clock microseconds):
//   failing at T (HOW)                    the culprit, just before it fails
//   failed at T code=CODE what=WHAT       a survivor caught the failure; it leaves at once
//   WRONG ... / FAILED ...                a wrong result (exit 4) or anything else (exit 5)
// The per-call timeout is COLLECTIVES_TIMEOUT (3 s unless set); the loop gives up after
// 400 steps. The transport is automatic_transport: collectives-run --transport picks
// (rdma too where libfabric was found: the build defines FAULT_WORKER_WITH_RDMA).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <stdexcept>
#include <string>
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

enum class mode { throws, op_throws, op_exits };

// A sum that fails on the culprit's first call once armed.
struct failing_sum {
  static constexpr bool commutative = true;
  mode* how;
  bool* armed;
  float operator()(float a, float b) const {
    if (*armed) {
      *armed = false;
      say("failing at " + std::to_string(now_us()) + (*how == mode::op_exits ? " (op-exits)" : " (op-throws)"));
      if (*how == mode::op_exits) std::exit(2);
      throw std::runtime_error("the culprit's reduce op failed on purpose");
    }
    return a + b;
  }
};

float value(int rank, std::size_t i, int step) { return float((rank + 1) * 8 + int((i + std::size_t(step)) % 13)); }

int run(mode how, int culprit, int fail_step, std::uint64_t seed) {
  comm_t comm = comm_t::from_env();
  const int p = comm.size(), r = comm.rank();
  int base = 0;
  for (int q = 0; q < p; ++q) base += (q + 1) * 8;
  splitmix64 rng{seed};
  std::vector<float> data;
  bool armed = false;
  failing_sum op{&how, &armed};
  for (int step = 0; step < 400; ++step) {
    const std::size_t n = std::size_t(p) + (std::size_t{1} << rng.below(21));  // at least one float a rank
    const bool failing = r == culprit && step == fail_step;
    if (failing && how == mode::throws) {
      say("failing at " + std::to_string(now_us()) + " (throw)");
      throw std::runtime_error("the culprit's program failed on purpose");
    }
    data.resize(n);
    for (std::size_t i = 0; i < n; ++i) data[i] = value(r, i, step);
    armed = failing;
    try {
      coll::all_reduce(comm, std::span<float>(data), op);
    } catch (const coll::error& e) {
      say("failed at " + std::to_string(now_us()) + " code=" + e.code().message() + " what=" + e.what());
      if ((seed >> r) & 1) return 3;
      throw;
    }
    if (armed) {  // the op was never called here: fail anyway
      say("failing at " + std::to_string(now_us()) + " (throw)");
      throw std::runtime_error("the culprit's program failed on purpose");
    }
    for (std::size_t i : {std::size_t{0}, n / 2, n - 1})
      if (data[i] != float(base + p * int((i + std::size_t(step)) % 13))) {
        say("WRONG step " + std::to_string(step) + " element " + std::to_string(i));
        return 4;
      }
  }
  say("FAILED: 400 steps and no failure");
  return 5;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    say("FAILED usage: culprit_worker throw|op-throws|op-exits CULPRIT STEP SEED");
    return 5;
  }
  const std::string how = argv[1];
  const mode m = how == "op-throws" ? mode::op_throws : how == "op-exits" ? mode::op_exits : mode::throws;
  try {
    return run(m, std::atoi(argv[2]), std::atoi(argv[3]), std::strtoull(argv[4], nullptr, 10));
  } catch (const coll::error&) {
    return 3;  // reported above
  } catch (const std::runtime_error&) {
    return 1;  // the culprit
  }
}
