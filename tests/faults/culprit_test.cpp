// Faults: the right culprit. One rank fails (its program throws, its reduce op throws
// mid-call, or its op calls std::exit mid-call), and every other rank leaves as soon
// as its own call fails. Each survivor's error must name the rank that failed first,
// never a survivor that left because of it, and come within the per-call deadline;
// no result may be wrong; the launcher must exit non-zero; nothing may be left in
// /dev/shm.
//
// Each trial runs `collectives-run -n P --transport T culprit_worker MODE CULPRIT STEP
// SEED` (see culprit_worker.cpp). T is COLLECTIVES_TRANSPORT (ctest runs the test once
// for tcp, once for shm). COLLECTIVES_CULPRIT_SEED=N repeats a run,
// COLLECTIVES_CULPRIT_TRIALS changes the number of trials (default 20);
// COLLECTIVES_RUN and COLLECTIVES_CULPRIT_WORKER override the programs' paths.
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <doctest/doctest.h>

#include "trial_job.hpp"

namespace {

using namespace fault_tests;

constexpr double call_timeout_s = 3;  // the workers' per-call deadline (COLLECTIVES_TIMEOUT)
constexpr auto trial_limit = std::chrono::seconds(60);

struct rank_lines {
  std::vector<long long> failing_at;
  std::vector<error_line> failures;
  std::vector<std::string> other;  // WRONG, FAILED, unparsable
};

std::map<int, rank_lines> parse(const std::string& output) {
  std::map<int, rank_lines> ranks;
  for_each_rank_line(output, [&](int rank, std::string_view text) {
    rank_lines& r = ranks[rank];
    if (text.starts_with("failing at ")) {
      r.failing_at.push_back(std::atoll(std::string(text.substr(11)).c_str()));
    } else if (text.starts_with("failed at ")) {
      if (const auto line = parse_error_line(text, 10)) r.failures.push_back(*line);
      else r.other.push_back("unparsable: " + std::string(text));
    } else if (text.starts_with("WRONG") || text.starts_with("FAILED")) {
      r.other.emplace_back(text);
    }
  });
  return ranks;
}

}  // namespace

TEST_CASE("a rank fails and the others leave at once: every survivor names the rank that failed first") {
  const trial_settings run_as = read_trial_settings("culprit_test", COLLECTIVES_RUN_PATH, "COLLECTIVES_CULPRIT_WORKER",
                                                    CULPRIT_WORKER_PATH, "COLLECTIVES_CULPRIT_TRIALS", "COLLECTIVES_CULPRIT_SEED");
  const int trials = run_as.count;
  clear_launch_environment("3");

  std::mt19937_64 rng(run_as.seed);
  std::vector<double> latencies;
  int failed_trials = 0;
  for (int t = 0; t < trials; ++t) {
    const int ranks = 2 + int(rng() % 5);
    const int culprit = int(rng() % std::uint64_t(ranks));
    const char* mode = std::array{"throw", "op-throws", "op-exits"}[rng() % 3];
    const int step = int(rng() % 12);
    const std::uint64_t job_seed = rng() >> 1;
    const std::string token = new_job_token();
    const std::vector<std::string> args{run_as.launcher, "-n", std::to_string(ranks), "--transport", run_as.transport,
                                        "--grace", "10", "--timeout", "45", run_as.worker, mode, std::to_string(culprit),
                                        std::to_string(step), std::to_string(job_seed)};

    const outcome out = run(args, trial_limit);
    const auto lines = parse(out.output);
    std::vector<std::string> problems;
    auto problem = [&](std::string s) { problems.push_back(std::move(s)); };

    for (const auto& path : remove_shm_leftovers(token)) problem("the job left " + path + " in /dev/shm");
    if (out.hung) problem("the launcher was still running after " + std::to_string(trial_limit.count()) + " s; killed it");
    else if (out.status == 0) problem("the launcher exited 0");

    long long failed_at = 0;
    for (const auto& [rank, r] : lines) {
      for (const auto& o : r.other) problem("rank " + std::to_string(rank) + ": " + o);
      if (rank != culprit && !r.failing_at.empty()) problem("rank " + std::to_string(rank) + " is not the culprit but failed on purpose");
    }
    if (auto it = lines.find(culprit); it != lines.end() && it->second.failing_at.size() == 1)
      failed_at = it->second.failing_at.front();
    else
      problem("the culprit, rank " + std::to_string(culprit) + ", did not print one 'failing at'");

    std::string named;
    double worst = 0;
    for (int rank = 0; rank < ranks; ++rank) {
      if (rank == culprit) continue;
      const std::string who = "rank " + std::to_string(rank) + ": ";
      const auto it = lines.find(rank);
      if (it == lines.end() || it->second.failures.size() != 1) {
        problem(who + "reported " + std::to_string(it == lines.end() ? 0 : it->second.failures.size()) + " failures, expected 1");
        continue;
      }
      const auto& f = it->second.failures.front();
      const int blamed = rank_named(f.what, rank);
      named += " " + std::to_string(blamed);
      if (f.code != "peer lost") problem(who + "code=" + f.code + " (expected peer lost): " + f.what);
      if (blamed != culprit) problem(who + "named rank " + std::to_string(blamed) + ", not the culprit: " + f.what);
      if (failed_at != 0) {
        const double latency = double(f.at - failed_at) * 1e-6;
        if (latency > call_timeout_s) problem(who + "reported " + ms(latency) + " after the failure: " + f.what);
        worst = std::max(worst, latency);
      }
    }
    latencies.push_back(worst);

    std::printf("trial %2d: %d ranks, rank %d fails at step %d (%s); exit %d after %.2f s; survivors named%s; last error after %s%s\n",
                t, ranks, culprit, step, mode, out.status, out.seconds, named.c_str(), ms(worst).c_str(),
                problems.empty() ? "" : "  FAILED");
    std::fflush(stdout);
    if (!problems.empty()) {
      ++failed_trials;
      fail_trial(t, command_of(args, "3"), problems, out.output);
    }
  }
  std::printf("culprit_test: %d of %d trials failed; last survivor's error after the failure: median %s\n", failed_trials,
              trials, ms(median(latencies)).c_str());
  std::fflush(stdout);
  CHECK(failed_trials == 0);
}
