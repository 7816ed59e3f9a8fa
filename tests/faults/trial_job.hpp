// What the fault tests share: running one job under collectives-run and reading its
// output, a fresh job token per trial, what a job left in /dev/shm, and figures.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <collectives/transport/shm/segment_name.hpp>
#include <doctest/doctest.h>

namespace fault_tests {

using steady = std::chrono::steady_clock;

inline std::string from_env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

struct outcome {
  int status = -1;  // the launcher's exit status, 128 + signal if it was killed, -1 if we had to kill it
  bool hung = false;
  std::string output;  // stdout and stderr together
  double seconds = 0;
};

// Runs argv[0] with stdout and stderr into one pipe; reads until end of file or
// `trial_limit` (then kills it).
inline outcome run(const std::vector<std::string>& args, std::chrono::seconds trial_limit) {
  outcome out;
  const auto start = steady::now();
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::execv(argv[0], argv.data());
    const std::string msg = "fault test: cannot run " + args[0] + ": " + std::strerror(errno) + "\n";
    (void)!::write(2, msg.data(), msg.size());
    ::_exit(127);
  }
  ::close(fds[1]);
  char buffer[65536];
  for (;;) {
    const auto left = trial_limit - (steady::now() - start);
    if (left <= std::chrono::milliseconds(0)) {
      out.hung = true;
      ::kill(pid, SIGKILL);  // its ranks die with it (PR_SET_PDEATHSIG)
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, int(std::chrono::duration_cast<std::chrono::milliseconds>(left).count()) + 1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.output.append(buffer, std::size_t(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (out.hung) out.status = -1;
  else if (WIFEXITED(status)) out.status = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) out.status = 128 + WTERMSIG(status);
  out.seconds = std::chrono::duration<double>(steady::now() - start).count();
  return out;
}

// 32 random bytes as hex: a job token no other job has. Not drawn from the trials'
// generator, so that a seed repeats the same trials.
inline std::string fresh_token() {
  std::random_device random;
  std::string token;
  char digits[9];
  for (int i = 0; i < 8; ++i) {
    std::snprintf(digits, sizeof digits, "%08x", static_cast<unsigned>(random()));
    token += digits;
  }
  return token;
}

// Removes and names what a job with this token left in /dev/shm.
inline std::vector<std::string> remove_shm_leftovers(const std::string& token) {
  const std::string prefix = collectives::shm_detail::segment_prefix(token);
  std::vector<std::string> left;
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (const dirent* entry = ::readdir(dir))
      if (std::string_view(entry->d_name).starts_with(prefix)) left.push_back(std::string("/dev/shm/") + entry->d_name);
    ::closedir(dir);
  }
  for (const auto& path : left) ::unlink(path.c_str());
  return left;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

inline std::string ms(double seconds) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f ms", seconds * 1e3);
  return s;
}

// fn(rank, text) for each "[R] text" line of a job's output, in order; the launcher's
// own lines have no prefix.
template <class Fn>
void for_each_rank_line(const std::string& output, Fn&& fn) {
  std::size_t pos = 0;
  while (pos < output.size()) {
    std::size_t end = output.find('\n', pos);
    if (end == std::string::npos) end = output.size();
    const std::string_view line(output.data() + pos, end - pos);
    pos = end + 1;
    const std::size_t close = line.find("] ");
    if (line.empty() || line[0] != '[' || close == std::string_view::npos) continue;
    fn(std::atoi(std::string(line.substr(1, close - 1)).c_str()), line.substr(close + 2));
  }
}

// A trial job's own token, in the environment its launcher inherits.
inline std::string new_job_token() {
  std::string token = fresh_token();
  ::setenv("COLLECTIVES_JOB_TOKEN", token.c_str(), 1);
  return token;
}

// The command line that repeats a trial job, for its report.
inline std::string command_of(const std::vector<std::string>& args, const std::string& call_timeout_s) {
  std::string command = "COLLECTIVES_TIMEOUT=" + call_timeout_s;
  for (const auto& a : args) command += " " + a;
  return command;
}

// Fails trial t with its problems, how to repeat it, and what the job printed.
inline void fail_trial(int t, const std::string& command, const std::vector<std::string>& problems, const std::string& output) {
  std::string report = "trial " + std::to_string(t) + " (repeat with: " + command + "):\n";
  for (const auto& p : problems) report += "  " + p + "\n";
  report += "--- output:\n" + output.substr(0, 20000);
  FAIL_CHECK(report);
}

// A worker's line for an error it caught, "<prefix>T code=CODE what=WHAT" (prefix
// included in `text`): its time, code and text; nothing if the line doesn't parse.
struct error_line {
  long long at;
  std::string code, what;
};
inline std::optional<error_line> parse_error_line(std::string_view text, std::size_t prefix) {
  const std::size_t code = text.find(" code="), what = text.find(" what=");
  if (code == std::string_view::npos || what == std::string_view::npos || what < code || code < prefix) return std::nullopt;
  return error_line{std::atoll(std::string(text.substr(prefix, code - prefix)).c_str()),
                    std::string(text.substr(code + 6, what - code - 6)), std::string(text.substr(what + 6))};
}

// The rank an error names first: the first "rank N" after the reporter's own
// "rank R: " prefix ("rank 2: lost rank 1: it closed the connection ..." over tcp,
// "rank 2: lost rank 1: its process (pid 4242) died" over shm); -1 if none.
inline int rank_named(const std::string& what, int reporter) {
  const std::string own = "rank " + std::to_string(reporter) + ": ";
  const std::size_t from = what.starts_with(own) ? own.size() : 0;
  const std::size_t at = what.find("rank ", from);
  if (at == std::string::npos) return -1;
  const char* digits = what.c_str() + at + 5;
  char* end = nullptr;
  const long rank = std::strtol(digits, &end, 10);
  return end == digits ? -1 : int(rank);
}

// The trials' seed: `variable` if set (to repeat a run), else a fresh one; printed
// with how to repeat it.
inline std::uint64_t trial_seed(const char* test, const char* variable, int trials, const std::string& transport) {
  const std::uint64_t seed = std::getenv(variable) ? std::strtoull(std::getenv(variable), nullptr, 10)
                                                   : (std::uint64_t(std::random_device{}()) << 32 | std::random_device{}());
  std::printf("%s: seed %llu (%s=%llu repeats this run), %d trials over %s\n", test, static_cast<unsigned long long>(seed),
              variable, static_cast<unsigned long long>(seed), trials, transport.c_str());
  std::fflush(stdout);
  return seed;
}

// What a test's trials run: the launcher and the worker (COLLECTIVES_RUN and
// `worker_variable` override the paths CMake compiled in), how many trials
// (`count_variable`, 20 unless set), over which transport (COLLECTIVES_TRANSPORT, tcp
// unless set), from which seed (`seed_variable`, else a fresh one; printed).
struct trial_settings {
  std::string launcher, worker, transport;
  int count;
  std::uint64_t seed;
};
inline trial_settings read_trial_settings(const char* test, const char* launcher_path, const char* worker_variable,
                                          const char* worker_path, const char* count_variable, const char* seed_variable) {
  trial_settings s{from_env("COLLECTIVES_RUN", launcher_path), from_env(worker_variable, worker_path),
                   from_env("COLLECTIVES_TRANSPORT", "tcp"), std::atoi(from_env(count_variable, "20").c_str()), 0};
  s.seed = trial_seed(test, seed_variable, s.count, s.transport);
  return s;
}

// Each trial is a job of its own: a fresh port from the launcher, a fresh token per
// trial (set by the caller); nothing of this process's own launch leaks in. The
// launcher keeps what the job leaves in /dev/shm, for the test to see.
inline void clear_launch_environment(const char* call_timeout_s) {
  for (const char* name : {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                           "COLLECTIVES_JOB_TOKEN", "COLLECTIVES_CHECK_CALLS", "OMPI_COMM_WORLD_RANK",
                           "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"})
    ::unsetenv(name);
  ::setenv("COLLECTIVES_TIMEOUT", call_timeout_s, 1);
  ::setenv("COLLECTIVES_STARTUP_TIMEOUT", "20", 1);
  ::setenv("COLLECTIVES_RUN_KEEP_SHM", "1", 1);
}

}  // namespace fault_tests
