// Shrink: randomized trials of a job that loses ranks and goes on. Each trial runs
// `collectives-run -n P --keep-going --transport T shrink_worker MODE RANK DELAY_US SEED`
// (shrink_worker.cpp) with P from 2 to 8 and MODE one of
//   kill      a rank dies at a random point of a loop of all-reduces;
//   kill-two  and another dies during the shrink (or just after it), P >= 3;
//   revoke    a rank revokes while the others are blocked in a call.
// Every survivor must end with the same group, exactly the ranks that did not die,
// having checked its results against the serial sum over that group; no rank may
// print a wrong result or another failure, the launcher must exit 0 (--keep-going
// tolerates the ranks killed), and nothing may be left in /dev/shm.
//
// T is COLLECTIVES_TRANSPORT (tcp unless set). COLLECTIVES_SHRINK_TRIALS sets the
// number of trials (20 by default; bench/soak-shrink runs 100), COLLECTIVES_SHRINK_SEED
// repeats a run. The test prints each trial, then the time from a failure to each
// survivor's error ("revoke") and each shrink's time, by rank count.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "trial_job.hpp"

namespace {

using namespace fault_tests;

constexpr auto trial_limit = std::chrono::seconds(75);

struct rank_lines {
  std::vector<long long> killing_at, revoking_at, failed_at;
  std::vector<long long> shrink_us;
  std::vector<std::string> done, problems;
};

long long number_after(std::string_view text, std::string_view key) {
  const std::size_t at = text.find(key);
  return at == std::string_view::npos ? -1 : std::atoll(std::string(text.substr(at + key.size())).c_str());
}

std::map<int, rank_lines> parse(const std::string& output) {
  std::map<int, rank_lines> ranks;
  for_each_rank_line(output, [&](int rank, std::string_view text) {
    rank_lines& r = ranks[rank];
    if (text.starts_with("killing at ")) r.killing_at.push_back(number_after(text, "at "));
    else if (text.starts_with("revoking at ")) r.revoking_at.push_back(number_after(text, "at "));
    else if (text.starts_with("failed at ")) r.failed_at.push_back(number_after(text, "at "));
    else if (text.starts_with("shrunk at ")) r.shrink_us.push_back(number_after(text, "took="));
    else if (text.starts_with("done ")) r.done.emplace_back(text.substr(5));
    else if (text.starts_with("WRONG") || text.starts_with("FAILED")) r.problems.emplace_back(text);
  });
  return ranks;
}

}  // namespace

TEST_CASE("survivors of lost ranks shrink to the same group and go on with exact results") {
  const trial_settings run_as = read_trial_settings("shrink_test", COLLECTIVES_RUN_PATH, "COLLECTIVES_SHRINK_WORKER",
                                                    SHRINK_WORKER_PATH, "COLLECTIVES_SHRINK_TRIALS", "COLLECTIVES_SHRINK_SEED");
  const int trials = run_as.count;
  clear_launch_environment("3");

  std::mt19937_64 rng(run_as.seed);
  std::map<int, std::vector<double>> revoke_s, shrink_s;  // by rank count
  int failed_trials = 0;
  for (int t = 0; t < trials; ++t) {
    const int ranks = 2 + int(rng() % 7);
    const std::string mode = ranks >= 3 ? std::array{"kill", "kill-two", "revoke"}[rng() % 3]
                                        : std::array{"kill", "revoke"}[rng() % 2];
    const int chosen = int(rng() % std::uint64_t(ranks));
    const long long delay_us = static_cast<long long>(rng() % 300001);
    const std::uint64_t job_seed = rng() >> 1;
    const std::string token = new_job_token();
    const std::vector<std::string> args{run_as.launcher, "-n", std::to_string(ranks), "--keep-going", "--transport",
                                        run_as.transport, "--timeout", "60", run_as.worker, mode, std::to_string(chosen),
                                        std::to_string(delay_us), std::to_string(job_seed)};

    std::set<int> dead;
    if (mode != "revoke") dead.insert(chosen);
    if (mode == "kill-two") dead.insert((chosen + 1) % ranks);
    std::string expected = "size=" + std::to_string(ranks - int(dead.size())) + " ranks=";
    for (int r = 0, first_one = 1; r < ranks; ++r)
      if (!dead.contains(r)) expected.append(std::exchange(first_one, 0) ? "" : ",").append(std::to_string(r));

    const outcome out = run(args, trial_limit);
    const auto lines = parse(out.output);
    std::vector<std::string> problems;
    auto problem = [&](std::string s) { problems.push_back(std::move(s)); };
    // A rank killed while it laid out a shrunk group's segment leaves its private copy,
    // named after its pid (collectives-run removes it at the end of a job).
    std::vector<std::string> killed_pids;
    for (std::size_t at = 0; (at = out.output.find(" (pid ", at)) != std::string::npos; ++at)
      if (out.output.find(" was killed by signal", at) == out.output.find(')', at) + 1)
        killed_pids.push_back(out.output.substr(at + 6, out.output.find(')', at) - at - 6));
    for (const auto& path : remove_shm_leftovers(token)) {
      const std::string suffix = path.substr(path.rfind('.') + 1);
      if (std::find(killed_pids.begin(), killed_pids.end(), suffix) == killed_pids.end())
        problem("the job left " + path + " in /dev/shm");
    }
    if (out.hung) problem("the launcher was still running after " + std::to_string(trial_limit.count()) + " s; killed it");
    else if (out.status != 0) problem("the launcher exited " + std::to_string(out.status) + ", expected 0");

    // The first failure: the first death, or the revoke.
    long long first = -1;
    for (const auto& [rank, r] : lines)
      for (long long at : mode == "revoke" ? r.revoking_at : r.killing_at)
        if (first < 0 || at < first) first = at;
    if (first < 0) problem("no rank printed that it died or revoked");

    for (int rank = 0; rank < ranks; ++rank) {
      const std::string who = "rank " + std::to_string(rank) + ": ";
      const auto it = lines.find(rank);
      if (it == lines.end()) {
        problem(who + "printed nothing");
        continue;
      }
      const rank_lines& r = it->second;
      for (const auto& p : r.problems) problem(who + p);
      if (dead.contains(rank)) {
        if (!r.done.empty()) problem(who + "was to die, yet finished: " + r.done.front());
        continue;
      }
      if (r.done.size() != 1) problem(who + "did not finish");
      else if (r.done.front() != expected) problem(who + "ended with " + r.done.front() + ", expected " + expected);
      if (!r.failed_at.empty() && first >= 0) revoke_s[ranks].push_back(double(r.failed_at.front() - first) * 1e-6);
      if (!r.shrink_us.empty()) shrink_s[ranks].push_back(double(r.shrink_us.front()) * 1e-6);
    }

    std::printf("trial %2d: %d ranks, %-8s rank %d after %5.1f ms; exit %d after %.2f s%s\n", t, ranks, mode.c_str(),
                chosen, double(delay_us) / 1e3, out.status, out.seconds, problems.empty() ? "" : "  FAILED");
    std::fflush(stdout);
    if (!problems.empty()) {
      ++failed_trials;
      fail_trial(t, command_of(args, "3"), problems, out.output);
    }
  }

  std::printf("shrink_test: %d of %d trials failed over %s\n", failed_trials, trials, run_as.transport.c_str());
  std::printf("ranks  survivors' errors after the failure (median, max)  first shrink (median, max)\n");
  for (const auto& [ranks, v] : shrink_s) {
    const auto& rv = revoke_s[ranks];
    std::printf("%5d  %14s %14s                      %10s %10s\n", ranks, ms(median(rv)).c_str(),
                ms(rv.empty() ? 0 : *std::max_element(rv.begin(), rv.end())).c_str(), ms(median(v)).c_str(),
                ms(*std::max_element(v.begin(), v.end())).c_str());
  }
  std::fflush(stdout);
  CHECK(failed_trials == 0);
}
