// One rank of the kill test (kill_test.cpp), run under collectives-run:
//
//   collectives-run -n P fault_worker VICTIM DELAY_US SEED
//
// Every rank loops over collectives that SEED picks (the same sequence on every
// rank: all-reduces from 1 float to 4 MiB, all-gathers, broadcasts, barriers,
// reduce-scatters, all-to-alls) and checks each result cheaply. Rank VICTIM kills
// itself with SIGKILL DELAY_US microseconds after its communicator is ready, so the
// kill lands at a random point, often in the middle of a collective.
//
// What each rank prints (one flushed line each; times are steady_clock nanoseconds,
// which is CLOCK_MONOTONIC and so comparable across the processes of one host):
//   the victim      killing at T (step S: CALL, N floats)  then dies by SIGKILL
//   a survivor      lost at T code=MESSAGE what=WHAT      for the collectives::error
//                                                         it caught; exits 3 a second later
//                   WRONG ...                             a result was wrong; exits 4
//                   FAILED ...                            anything else; exits 5
// The loop gives up after COLLECTIVES_FAULT_MAX_S seconds (default 30) with FAILED,
// so no rank can run forever. The per-call timeout is COLLECTIVES_TIMEOUT (seconds,
// as for any communicator), 3 s unless set. The transport is automatic_transport, so
// COLLECTIVES_TRANSPORT (collectives-run --transport) picks shm or tcp, or rdma where
// libfabric was found (the build defines FAULT_WORKER_WITH_RDMA).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
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

// A count from 1 to `max` floats, spread evenly over the orders of magnitude.
std::size_t pick_count(splitmix64& rng, std::size_t max) {
  std::size_t bits = 0;
  while ((std::size_t{2} << bits) <= max) ++bits;  // 2^bits <= max
  const std::size_t top = std::size_t{1} << rng.below(bits + 1);
  return std::min(max, top + rng.below(top));
}

// What the loop is doing, for the victim's last line.
std::atomic<std::uint64_t> current_step{0};
std::atomic<const char*> current_call{"start-up"};
std::atomic<std::size_t> current_count{0};
void doing(const char* call, std::size_t count) {
  current_count.store(count);
  current_call.store(call);
}

// Small integers, so every sum below is exact in float.
float value(int rank, std::size_t i, std::uint64_t step) { return float((rank + 1) * 64 + int((i + step) % 61)); }

struct wrong {
  std::string what;
};

void expect(bool ok, const char* call, std::uint64_t step, std::size_t count, std::size_t at, float got, float want) {
  if (!ok)
    throw wrong{std::string(call) + " step " + std::to_string(step) + " count " + std::to_string(count) + ": element " +
                std::to_string(at) + " is " + std::to_string(got) + ", expected " + std::to_string(want)};
}

// Checks the first, last and a few positions in between: cheap, and enough to see a
// shifted, truncated or unreduced buffer.
template <class Want>
void check_some(const char* call, std::uint64_t step, std::span<const float> got, Want want) {
  const std::size_t n = got.size();
  if (n == 0) return;
  for (std::size_t k = 0; k < 9; ++k) {
    const std::size_t i = std::min(n - 1, k * (n - 1) / 8);
    expect(got[i] == want(i), call, step, n, i, got[i], want(i));
  }
}

constexpr std::size_t max_all_reduce = 1 << 20;  // 4 MiB of floats
constexpr std::size_t max_per_rank = 1 << 16;     // per-rank blocks of the gathering calls

void one_step(comm_t& comm, splitmix64& rng, std::uint64_t step, std::vector<float>& a, std::vector<float>& b) {
  const int p = comm.size(), r = comm.rank();
  const std::size_t ranks = std::size_t(p);
  int sum_of_ranks = 0;  // sum over ranks of (rank + 1) * 64
  for (int q = 0; q < p; ++q) sum_of_ranks += (q + 1) * 64;
  switch (rng.below(8)) {
    case 0:
    case 1:
    case 2: {  // all_reduce, the most common call
      const std::size_t n = pick_count(rng, max_all_reduce);
      std::span<float> data(a.data(), n);
      for (std::size_t i = 0; i < n; ++i) data[i] = value(r, i, step);
      doing("all_reduce", n);
      coll::all_reduce(comm, data, coll::sum{});
      check_some("all_reduce", step, data, [&](std::size_t i) { return float(sum_of_ranks + p * int((i + step) % 61)); });
      return;
    }
    case 3: {  // all_gather
      const std::size_t n = pick_count(rng, max_per_rank);
      std::span<float> in(a.data(), n), out(b.data(), n * ranks);
      for (std::size_t i = 0; i < n; ++i) in[i] = value(r, i, step);
      doing("all_gather", n);
      coll::all_gather(comm, std::span<const float>(in), out);
      check_some("all_gather", step, out, [&](std::size_t i) { return value(int(i / n), i % n, step); });
      return;
    }
    case 4: {  // broadcast from a rank the seed picks
      const std::size_t n = pick_count(rng, max_all_reduce);
      const int root = int(rng.below(ranks));
      std::span<float> data(a.data(), n);
      for (std::size_t i = 0; i < n; ++i) data[i] = r == root ? value(root, i, step) : -1.0f;
      doing("broadcast", n);
      coll::broadcast(comm, data, root);
      check_some("broadcast", step, data, [&](std::size_t i) { return value(root, i, step); });
      return;
    }
    case 5:
      doing("barrier", 0);
      coll::barrier(comm);
      return;
    case 6: {  // reduce_scatter: block q of the sum lands on rank q
      const std::size_t n = pick_count(rng, max_per_rank);
      std::span<float> in(a.data(), n * ranks), out(b.data(), n);
      for (std::size_t i = 0; i < n * ranks; ++i) in[i] = value(r, i, step);
      doing("reduce_scatter", n);
      coll::reduce_scatter(comm, std::span<const float>(in), out, coll::sum{});
      check_some("reduce_scatter", step, out,
                 [&](std::size_t i) { return float(sum_of_ranks + p * int((std::size_t(r) * n + i + step) % 61)); });
      return;
    }
    default: {  // all_to_all: block q of rank s lands as block s on rank q
      const std::size_t n = pick_count(rng, max_per_rank);
      std::span<float> in(a.data(), n * ranks), out(b.data(), n * ranks);
      for (std::size_t i = 0; i < n * ranks; ++i) in[i] = value(r, i, step);
      doing("all_to_all", n);
      coll::all_to_all(comm, std::span<const float>(in), out);
      check_some("all_to_all", step, out,
                 [&](std::size_t i) { return value(int(i / n), std::size_t(r) * n + i % n, step); });
      return;
    }
  }
}

double seconds_from_env(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  return end != v && *end == '\0' && s > 0 ? s : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s VICTIM_RANK KILL_DELAY_US SEED\n", argv[0]);
    return 2;
  }
  const int victim = std::atoi(argv[1]);
  const long long delay_us = std::atoll(argv[2]);
  const std::uint64_t seed = std::strtoull(argv[3], nullptr, 10);
  const auto max_run = std::chrono::duration<double>(seconds_from_env("COLLECTIVES_FAULT_MAX_S", 30));
  const auto started = steady::now();

  // Outlives the handlers below: a survivor keeps its connections open while it
  // waits, so the others see the victim's loss first, not this rank's farewell.
  std::optional<comm_t> comm;
  try {
    comm.emplace(comm_t::from_env());
    if (std::getenv("COLLECTIVES_TIMEOUT") == nullptr) comm->set_timeout(std::chrono::seconds(3));

    if (comm->rank() == victim) {
      std::thread([delay_us] {
        std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
        const long long at = now_ns();
        say("killing at " + std::to_string(at) + " (step " + std::to_string(current_step.load()) + ": " +
            current_call.load() + ", " + std::to_string(current_count.load()) + " floats a rank)");
        ::kill(::getpid(), SIGKILL);
      }).detach();
    }

    splitmix64 rng{seed};
    std::vector<float> a(max_all_reduce), b(std::max(max_all_reduce, max_per_rank * std::size_t(comm->size())));
    for (std::uint64_t step = 0;; ++step) {
      if (steady::now() - started > max_run) {
        say("FAILED still running after " + std::to_string(max_run.count()) + " s (step " + std::to_string(step) +
            "); was nobody killed?");
        return 5;
      }
      current_step.store(step);
      one_step(*comm, rng, step, a, b);
    }
  } catch (const coll::error& e) {
    const long long at = now_ns();
    say("lost at " + std::to_string(at) + " code=" + e.code().message() + " what=" + e.what());
    std::this_thread::sleep_for(std::chrono::seconds(1));
    return 3;
  } catch (const wrong& w) {
    say("WRONG " + w.what);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    return 4;
  } catch (const std::exception& e) {
    say(std::string("FAILED ") + e.what());
    return 5;
  }
}
