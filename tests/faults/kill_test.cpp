// Faults: a rank killed with SIGKILL at a random point of a loop of collectives.
// Every survivor must report the lost peer (errc::peer_lost, naming the victim)
// within the per-call deadline + 2 s, none may hang or compute a wrong result, and
// the launcher must exit non-zero (137: the victim, killed by SIGKILL, fails first),
// and the job must leave nothing in /dev/shm.
//
// Each trial runs `collectives-run -n P --transport T --grace 5 --timeout 60
// fault_worker VICTIM DELAY_US SEED` (see fault_worker.cpp) and reads its output. T is
// COLLECTIVES_TRANSPORT (tcp unless set; ctest runs the test once for tcp, once for
// shm). Each trial gets a fresh job token, so that its shared-memory segments have a
// name of their own to look for, and COLLECTIVES_RUN_KEEP_SHM, so that the launcher
// leaves what the library left for this test to see. The trials are random
// but reproducible: the test prints its seed, and COLLECTIVES_FAULT_SEED=N repeats
// a run; COLLECTIVES_FAULT_TRIALS changes the number of trials (default 20).
// COLLECTIVES_RUN and COLLECTIVES_FAULT_WORKER override the programs' paths that
// CMake compiled in.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <doctest/doctest.h>

#include "trial_job.hpp"

namespace {

using namespace fault_tests;

constexpr double call_timeout_s = 3;  // the workers' per-call deadline (COLLECTIVES_TIMEOUT)
constexpr double allowed_s = call_timeout_s + 2;  // how late a survivor may report the loss
constexpr int grace_s = 5;                        // collectives-run --grace
constexpr int launcher_timeout_s = 60;            // collectives-run --timeout
constexpr auto trial_limit = std::chrono::seconds(launcher_timeout_s + 15);  // then we kill the launcher

struct rank_lines {
  std::vector<long long> killing_at;
  std::string killed_during;  // what the victim was doing
  std::vector<error_line> losses;
  std::vector<std::string> wrong, failed;
};

// "[R] text" lines by rank.
std::map<int, rank_lines> parse(const std::string& output) {
  std::map<int, rank_lines> ranks;
  for_each_rank_line(output, [&](int rank, std::string_view text) {
    auto starts = [&](std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; };
    rank_lines& r = ranks[rank];
    if (starts("killing at ")) {
      r.killing_at.push_back(std::atoll(std::string(text.substr(11)).c_str()));
      if (const std::size_t note = text.find(" ("); note != std::string_view::npos) r.killed_during = text.substr(note + 1);
    } else if (starts("lost at ")) {
      if (const auto line = parse_error_line(text, 8)) r.losses.push_back(*line);
      else r.failed.push_back("unparsable: " + std::string(text));
    } else if (starts("WRONG")) {
      r.wrong.emplace_back(text);
    } else if (starts("FAILED")) {
      r.failed.emplace_back(text);
    }
  });
  return ranks;
}

}  // namespace

TEST_CASE("a rank killed at a random point: every survivor reports the lost peer in time") {
  const trial_settings run_as = read_trial_settings("kill_test", COLLECTIVES_RUN_PATH, "COLLECTIVES_FAULT_WORKER",
                                                    FAULT_WORKER_PATH, "COLLECTIVES_FAULT_TRIALS", "COLLECTIVES_FAULT_SEED");
  const int trials = run_as.count;
  char timeout_text[32];
  std::snprintf(timeout_text, sizeof timeout_text, "%g", call_timeout_s);
  clear_launch_environment(timeout_text);
  ::setenv("COLLECTIVES_FAULT_MAX_S", "30", 1);

  std::mt19937_64 rng(run_as.seed);
  std::vector<double> trial_latencies, all_latencies;
  int failed_trials = 0;
  for (int t = 0; t < trials; ++t) {
    const int ranks = std::array{2, 3, 4, 4}[rng() % 4];
    const int victim = int(rng() % std::uint64_t(ranks));
    const long long delay_us = static_cast<long long>(rng() % 400001);
    const std::uint64_t job_seed = rng() >> 1;
    const std::string token = new_job_token();
    const std::vector<std::string> args{run_as.launcher, "-n", std::to_string(ranks), "--transport", run_as.transport,
                                        "--grace", std::to_string(grace_s), "--timeout", std::to_string(launcher_timeout_s),
                                        run_as.worker, std::to_string(victim), std::to_string(delay_us),
                                        std::to_string(job_seed)};

    const outcome out = run(args, trial_limit);
    const auto lines = parse(out.output);
    std::vector<std::string> problems;
    auto problem = [&](std::string s) { problems.push_back(std::move(s)); };

    for (const auto& path : remove_shm_leftovers(token)) problem("the job left " + path + " in /dev/shm");
    if (out.hung) problem("the launcher was still running after " + std::to_string(trial_limit.count()) + " s; killed it");
    else if (out.status == 0) problem("the launcher exited 0");
    else if (out.status != 137) problem("the launcher exited " + std::to_string(out.status) + ", expected 137");

    std::optional<long long> killed_at;
    std::string killed_during;
    if (auto it = lines.find(victim); it != lines.end() && it->second.killing_at.size() == 1) {
      killed_at = it->second.killing_at.front();
      if (!it->second.killed_during.empty()) killed_during = " " + it->second.killed_during;
    } else problem("the victim, rank " + std::to_string(victim) + ", did not print one 'killing at'");

    double worst = 0;
    std::string per_rank;
    for (const auto& [rank, r] : lines) {
      for (const auto& w : r.wrong) problem("rank " + std::to_string(rank) + ": " + w);
      for (const auto& f : r.failed) problem("rank " + std::to_string(rank) + ": " + f);
      if (rank == victim && !r.losses.empty()) problem("the victim reported a loss: " + r.losses.front().what);
      if (rank != victim && !r.killing_at.empty()) problem("rank " + std::to_string(rank) + " is not the victim but printed 'killing at'");
    }
    for (int rank = 0; rank < ranks; ++rank) {
      if (rank == victim) continue;
      const std::string who = "rank " + std::to_string(rank) + ": ";
      const auto it = lines.find(rank);
      if (it == lines.end() || it->second.losses.empty()) {
        problem(who + "reported no loss (hung until the launcher stopped it?)");
        continue;
      }
      if (it->second.losses.size() > 1) problem(who + "reported " + std::to_string(it->second.losses.size()) + " losses");
      const auto& loss = it->second.losses.front();
      if (loss.code != "peer lost") problem(who + "code=" + loss.code + " (expected peer lost): " + loss.what);
      else if (rank_named(loss.what, rank) != victim)
        problem(who + "the error does not name the victim, rank " + std::to_string(victim) + ": " + loss.what);
      if (killed_at) {
        const double latency = double(loss.at - *killed_at) * 1e-9;
        if (latency < 0) problem(who + "reported the loss " + ms(-latency) + " before the kill: " + loss.what);
        if (latency > allowed_s) problem(who + "reported the loss " + ms(latency) + " after the kill, more than " + ms(allowed_s));
        worst = std::max(worst, latency);
        all_latencies.push_back(latency);
        per_rank += " " + std::to_string(rank) + ":" + ms(latency);
      }
    }
    if (killed_at) trial_latencies.push_back(worst);

    std::printf("trial %2d: %d ranks, victim %d killed after %5.1f ms%s; exit %d after %.2f s; detected after max %s (%s )%s\n",
                t, ranks, victim, double(delay_us) / 1e3, killed_during.c_str(), out.status, out.seconds,
                ms(worst).c_str(), per_rank.c_str(), problems.empty() ? "" : "  FAILED");
    std::fflush(stdout);
    if (!problems.empty()) {
      ++failed_trials;
      fail_trial(t, command_of(args, timeout_text), problems, out.output);
    }
  }

  std::printf("kill_test: %d of %d trials failed; detection latency, worst survivor of each trial: median %s, max %s; "
              "all survivors: median %s, max %s; allowed %s\n",
              failed_trials, trials, ms(median(trial_latencies)).c_str(),
              ms(trial_latencies.empty() ? 0 : *std::max_element(trial_latencies.begin(), trial_latencies.end())).c_str(),
              ms(median(all_latencies)).c_str(),
              ms(all_latencies.empty() ? 0 : *std::max_element(all_latencies.begin(), all_latencies.end())).c_str(),
              ms(allowed_s).c_str());
  std::fflush(stdout);
  CHECK(failed_trials == 0);
}
