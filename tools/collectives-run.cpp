// collectives-run: starts the ranks of a job on this host and supervises them.
//
// Each rank learns its place in the job from its environment (RANK, WORLD_SIZE,
// MASTER_ADDR, ...). Its output comes back through pipes and is printed whole line
// by whole line behind a "[RANK] " prefix. When one rank fails, the others get a
// grace period to notice the lost peer and exit, then SIGTERM, then SIGKILL.
// docs/launcher.md describes the options, the environment and the exit statuses.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <collectives/bootstrap/topology.hpp>
#include <collectives/config.hpp>
#include <collectives/settings.hpp>
#include <collectives/transport/selection.hpp>

#include "output_stream.hpp"
#include "shm_leftovers.hpp"
#include "trace_parts.hpp"

namespace {

using collectives_run::output_stream;
using collectives_run::write_all;

using steady = std::chrono::steady_clock;

constexpr int exit_usage = 2;
constexpr int exit_timed_out = 124;
constexpr int exit_cannot_run = 127;
constexpr auto sigterm_to_sigkill = std::chrono::seconds(2);
constexpr std::array handled_signals{SIGINT, SIGTERM, SIGHUP, SIGCHLD};

constexpr std::string_view usage_text = R"(usage: collectives-run [options] [--] program [args...]

Starts N ranks of program on this host, prefixes their output lines with
"[RANK] ", and stops the whole job when one rank fails.

  -n, --nproc N        ranks on this host (default 1); also -nN, -np N, --np N
  --nnodes M           hosts in the job, each running its own launcher (default 1)
  --node-rank K        this host's place among them, 0 <= K < M (default 0)
  --master-addr A      rendezvous address (default $MASTER_ADDR, else 127.0.0.1
                       on a single host)
  --master-port P      rendezvous port (default $MASTER_PORT, else a free port
                       on a single host)
  --grace SECONDS      after a rank fails, time the others get to exit by
                       themselves before SIGTERM (default 3)
  --timeout SECONDS    stop the job after this long and exit 124 (default 0: none)
  --keep-going         a rank killed by a signal does not stop the others, for
                       programs that shrink their communicator and go on; the
                       job then succeeds when every other rank exits with 0
                       (and at least one does)
  --transport T        auto, shm, tcp or rdma: sets COLLECTIVES_TRANSPORT for the ranks
                       (default: as the environment has it; unset means auto)
  --bind-to core|none  core: each local rank runs only on a physical core of its
                       own among those this launcher may use, taking the NUMA
                       nodes in turn; none: the scheduler places them (default)
  --topology           print this machine's packages, NUMA nodes, cores and
                       hardware threads (and, with --bind-to core, each local
                       rank's cpu) and exit without running a program
  --no-prefix          print output lines as they are
  -h, --help           show this text
  --version            show the version of collectives

Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
MASTER_ADDR, MASTER_PORT and COLLECTIVES_JOB_TOKEN; its stdin is /dev/null.
When the job ends, shared-memory segments it left in /dev/shm are removed
(COLLECTIVES_RUN_KEEP_SHM=1 keeps them). With COLLECTIVES_TRACE=FILE, the
ranks' traces are merged into FILE when the job ends (see docs/trace.md).
)";

// ---- Messages ---------------------------------------------------------------

void say(const std::string& message) { write_all(STDERR_FILENO, "collectives-run: " + message + "\n"); }

[[noreturn]] void fail(const std::string& message) {
  say(message);
  std::exit(1);
}

[[noreturn]] void print_usage() {
  write_all(STDOUT_FILENO, usage_text);
  std::exit(0);
}

[[noreturn]] void print_version() {
  write_all(STDOUT_FILENO, "collectives-run (collectives) " COLLECTIVES_VERSION_STRING "\n");
  std::exit(0);
}

[[noreturn]] void usage_error(const std::string& message) {
  say(message + " (see collectives-run --help)");
  std::exit(exit_usage);
}

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

std::string format_seconds(double seconds) {
  std::array<char, 32> text{};
  return std::string(text.data(), std::to_chars(text.data(), text.data() + text.size(), seconds).ptr) + " s";
}

std::string signal_name(int signal_number) {
  switch (signal_number) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGKILL: return "SIGKILL";
    default: return "signal " + std::to_string(signal_number);
  }
}

// ---- Options ----------------------------------------------------------------

struct options {
  int nproc = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;  // empty: $MASTER_ADDR, or a default
  std::string master_port;  // empty: $MASTER_PORT, or a default
  double grace_s = 3;
  double timeout_s = 0;  // 0: no limit
  std::string transport;  // empty: the ranks inherit COLLECTIVES_TRANSPORT, if set
  bool bind_to_core = false;
  std::vector<int> rank_cpus;  // with --bind-to core, local rank i's cpu
  bool show_topology = false;
  bool keep_going = false;
  bool prefix = true;
  std::vector<std::string> command;
};

constexpr int no_limit = std::numeric_limits<int>::max();
constexpr double longest_wait_s = 1e9;  // far off, yet within steady_clock's range

// An option's value as a number within [min, max], or a usage error naming what it should be.
template <typename number>
number parse_number(const std::string& option, std::string_view text, number min, number max, const char* wanted) {
  number value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || !(min <= value && value <= max))
    usage_error(option + " wants " + wanted + ", not '" + std::string(text) + "'");
  return value;
}

// The same names the library accepts in COLLECTIVES_TRANSPORT.
std::string parse_transport(const std::string& option, std::string_view text) {
  if (!collectives::parse_transport_selection(text))
    usage_error(option + " wants " + std::string(collectives::transport_selection_values) + ", not '" +
                std::string(text) + "'");
  return std::string(text);
}

bool parse_binding(const std::string& option, std::string_view text) {
  if (text != "core" && text != "none") usage_error(option + " wants core or none, not '" + std::string(text) + "'");
  return text == "core";
}

options parse_options(int argc, char** argv) {
  options opts;
  int next = 1;
  while (next < argc && argv[next][0] == '-' && argv[next][1] != '\0') {  // "-" alone is a program
    std::string_view arg = argv[next++];
    if (arg == "--") break;
    // mpirun's and mpiexec's spellings of the rank count: -np N, --np N, and -nN, -npN.
    if (arg == "-np" || arg == "--np") arg = "-n";
    std::string_view attached_count;
    if (arg.starts_with("-n") && !arg.starts_with("--") && arg.size() > 2) {
      attached_count = arg.substr(arg.starts_with("-np") ? 3 : 2);
      arg = "-n";
    }
    // "--name=value" carries its value; otherwise it is the next argument.
    const auto equals = arg.starts_with("--") ? arg.find('=') : std::string_view::npos;
    const std::string name(arg.substr(0, equals));
    const bool attached = equals != std::string_view::npos || !attached_count.empty();
    const auto value = [&]() -> std::string_view {
      if (!attached_count.empty()) return attached_count;
      if (attached) return arg.substr(equals + 1);
      if (next >= argc) usage_error(name + " needs a value");
      return argv[next++];
    };
    if (name == "-n" || name == "--nproc" || name == "--np") opts.nproc = parse_number(name, value(), 1, no_limit, "a count >= 1");
    else if (name == "--nnodes") opts.nnodes = parse_number(name, value(), 1, no_limit, "a count >= 1");
    else if (name == "--node-rank") opts.node_rank = parse_number(name, value(), 0, no_limit, "a number >= 0");
    else if (name == "--master-addr") opts.master_addr = value();
    else if (name == "--master-port")
      opts.master_port = std::to_string(parse_number(name, value(), 1, 65535, "a port from 1 to 65535"));
    else if (name == "--grace") opts.grace_s = parse_number(name, value(), 0.0, longest_wait_s, "seconds >= 0");
    else if (name == "--timeout") opts.timeout_s = parse_number(name, value(), 0.0, longest_wait_s, "seconds >= 0");
    else if (name == "--transport") opts.transport = parse_transport(name, value());
    else if (name == "--bind-to") opts.bind_to_core = parse_binding(name, value());
    else if (name == "--topology" && !attached) opts.show_topology = true;
    else if (name == "--no-prefix" && !attached) opts.prefix = false;
    else if (name == "--keep-going" && !attached) opts.keep_going = true;
    else if ((name == "-h" || name == "--help") && !attached) print_usage();
    else if (name == "--version" && !attached) print_version();
    else usage_error("unknown option " + std::string(arg));
  }
  opts.command.assign(argv + next, argv + argc);
  if (opts.command.empty() && !opts.show_topology) usage_error("no program to run");
  if (opts.node_rank >= opts.nnodes) usage_error("--node-rank must be less than --nnodes");
  if (static_cast<long long>(opts.nnodes) * opts.nproc > no_limit) usage_error("--nnodes * --nproc is too large");
  if (opts.bind_to_core) {  // decided here, once: a rank's child process only applies it
    opts.rank_cpus = collectives::bootstrap::binding_cpus(collectives::bootstrap::read_topology());
    if (static_cast<std::size_t>(opts.nproc) > opts.rank_cpus.size())
      usage_error("--bind-to core gives each rank a core of its own, and " + std::to_string(opts.nproc) +
                  " ranks outnumber the " + std::to_string(opts.rank_cpus.size()) + " cores this launcher may use");
    opts.rank_cpus.resize(static_cast<std::size_t>(opts.nproc));
  }
  return opts;
}

// --topology: the summary a rank logs at COLLECTIVES_DEBUG=INFO, each NUMA node's cpus
// and, with --bind-to core, where each local rank would run.
[[noreturn]] void print_topology(const options& opts) {
  const auto topology = collectives::bootstrap::read_topology();
  std::string text = summary(topology) + "\n";
  for (const auto& node : topology.nodes)
    text += "NUMA node " + std::to_string(node.index) + ": cpus " + (node.cpus.empty() ? "none" : node.cpus) + "\n";
  for (std::size_t i = 0; i < opts.rank_cpus.size(); ++i)
    text += "local rank " + std::to_string(i) + ": cpu " + std::to_string(opts.rank_cpus[i]) + "\n";
  write_all(STDOUT_FILENO, text);
  std::exit(0);
}

// ---- The job: what every rank is told ---------------------------------------

struct job {
  options opts;
  std::string master_addr;
  std::string master_port;
  std::string token;
  bool keep_shm = false;  // COLLECTIVES_RUN_KEEP_SHM: leave the job's /dev/shm segments
  std::string trace;      // COLLECTIVES_TRACE: where the ranks' traces are merged ("": none)
};

// The option if given, else the environment variable if set, else "".
std::string given_or_environment(const std::string& given, const char* variable) {
  const char* value = std::getenv(variable);
  return !given.empty() ? given : value != nullptr ? value : "";
}

// Asks the kernel for a port nobody uses now and keeps it bound (not listening) until
// the launcher exits: the kernel gives a bound port to no other bind(0) or connect(),
// so no other job can take it before rank 0 listens there. SO_REUSEADDR on both
// sockets lets rank 0's listener share it.
std::string free_local_port() {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  const int reuse = 1;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof reuse) != 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0)
    fail(errno_text("cannot find a free port on 127.0.0.1"));
  return std::to_string(ntohs(address.sin_port));  // fd stays open: the port stays held
}

// 32 random bytes as 64 hex digits: with it, ranks prove to each other that they
// belong to this job.
std::string fresh_job_token() {
  std::array<unsigned char, 32> bytes{};
  for (std::size_t filled = 0; filled < bytes.size();) {
    const ssize_t got = getrandom(bytes.data() + filled, bytes.size() - filled, 0);
    if (got < 0 && errno != EINTR) fail(errno_text("cannot make a job token: getrandom"));
    if (got > 0) filled += static_cast<std::size_t>(got);
  }
  constexpr std::string_view hex_digits = "0123456789abcdef";
  std::string token;
  for (const unsigned char byte : bytes) token.append({hex_digits[byte >> 4], hex_digits[byte & 0xf]});
  return token;
}

// The library's own variables, read by its rules; a value they refuse stops the launch.
template <typename read>
auto setting(read reader) {
  try {
    return reader();
  } catch (const collectives::error& e) {
    usage_error(e.what());
  }
}

job resolve_job(options opts) {
  const bool one_host = opts.nnodes == 1;
  job result{.opts = {},
             .master_addr = given_or_environment(opts.master_addr, "MASTER_ADDR"),
             .master_port = given_or_environment(opts.master_port, "MASTER_PORT"),
             .token = setting([] { return collectives::settings::text("COLLECTIVES_JOB_TOKEN").value_or(""); }),
             .keep_shm = setting([] { return collectives::settings::flag("COLLECTIVES_RUN_KEEP_SHM").value_or(false); }),
             .trace = setting([] { return collectives::settings::text("COLLECTIVES_TRACE").value_or(""); })};
  result.opts = std::move(opts);
  if (!one_host && result.master_addr.empty())
    usage_error("--nnodes > 1 needs --master-addr (or MASTER_ADDR): an address of node 0 that all hosts reach");
  if (!one_host && result.master_port.empty())
    usage_error("--nnodes > 1 needs --master-port (or MASTER_PORT): the same port on every host");
  // The launchers of a multi-host job cannot agree on a fresh token, so it is given.
  if (!one_host && result.token.empty())
    usage_error("--nnodes > 1 needs the same COLLECTIVES_JOB_TOKEN exported on every host, "
                "for example export COLLECTIVES_JOB_TOKEN=$(openssl rand -hex 32)");
  if (result.master_addr.empty()) result.master_addr = "127.0.0.1";
  if (result.master_port.empty()) result.master_port = free_local_port();
  if (result.token.empty()) result.token = fresh_job_token();
  return result;
}

// ---- Signals reach the event loop through a pipe ----------------------------

std::array<int, 2> signal_pipe{-1, -1};  // the handler writes to [1]; poll() watches [0]

void note_signal(int signal_number) {
  const int saved_errno = errno;
  const auto byte = static_cast<unsigned char>(signal_number);
  if (write(signal_pipe[1], &byte, 1) < 0) {
    // The pipe is full, so poll() wakes up anyway.
  }
  errno = saved_errno;
}

void install_signal_handlers() {
  if (pipe2(signal_pipe.data(), O_CLOEXEC | O_NONBLOCK) != 0) fail(errno_text("pipe"));
  struct sigaction action {};
  action.sa_handler = note_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  for (const int signal_number : handled_signals) {
    struct sigaction before {};
    sigaction(signal_number, nullptr, &before);
    // Under nohup, SIGHUP stays ignored, for the ranks too.
    if (signal_number != SIGHUP || before.sa_handler != SIG_IGN) sigaction(signal_number, &action, nullptr);
  }
  signal(SIGPIPE, SIG_IGN);  // a closed stdout loses output, not the job
}

// In a new child, before it can run note_signal() on the launcher's pipe.
void restore_default_signals() {
  for (const int signal_number : handled_signals) {
    struct sigaction current {};
    sigaction(signal_number, nullptr, &current);
    if (current.sa_handler == note_signal) signal(signal_number, SIG_DFL);
  }
  signal(SIGPIPE, SIG_DFL);
}

sigset_t handled_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  for (const int signal_number : handled_signals) sigaddset(&set, signal_number);
  return set;
}

// ---- The supervisor ---------------------------------------------------------

struct rank_process {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  bool running = false;
  int wait_status = 0;
  output_stream out;
  output_stream err;
};

bool exited_cleanly(int wait_status) { return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0; }

// The status a shell would report: the exit status, or 128 + the signal.
int shell_status(int wait_status) {
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
}

steady::duration seconds(double count) {
  return std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(count));
}

// Why the job is being stopped; the first reason decides the exit status.
enum class stop_reason { none, rank_failed, launcher_signalled, timed_out };

class supervisor {
 public:
  explicit supervisor(job j) : job_(std::move(j)), launcher_pid_(getpid()) {
    for (const auto& word : job_.opts.command) argv_.push_back(const_cast<char*>(word.c_str()));
    argv_.push_back(nullptr);
    ranks_.resize(static_cast<std::size_t>(job_.opts.nproc));  // never resized again: first_failure_ points in
    for (int local = 0; local < job_.opts.nproc; ++local) {
      rank_process& rank = ranks_[static_cast<std::size_t>(local)];
      rank.local_rank = local;
      rank.rank = job_.opts.node_rank * job_.opts.nproc + local;
      // (Not "[" + ...: that trips a false -Wrestrict in GCC 12.)
      const auto prefix = job_.opts.prefix ? std::string("[").append(std::to_string(rank.rank)).append("] ") : "";
      rank.out = {.fd = -1, .destination = STDOUT_FILENO, .prefix = prefix, .pending = {}};
      rank.err = {.fd = -1, .destination = STDERR_FILENO, .prefix = prefix, .pending = {}};
    }
    if (job_.opts.timeout_s > 0) job_deadline_ = steady::now() + seconds(job_.opts.timeout_s);
  }

  int run() {
    const int first_rank = job_.opts.node_rank * job_.opts.nproc;
    if (!job_.trace.empty()) collectives_run::remove_trace_parts(job_.trace, first_rank, job_.opts.nproc);
    start_ranks();
    if (!start_failures_.empty()) return give_up_start();
    while (any_running()) {
      wait_for_events();
      handle_launcher_signals();
      reap_exited_ranks();
      stop_if_timed_out();
      send_due_signals();
    }
    for (auto& rank : ranks_) {
      for (output_stream* stream : {&rank.out, &rank.err}) {
        stream->drain();  // a child of the rank may still hold the pipe open: take what is there
        stream->finish();
      }
    }
    for (const auto& rank : ranks_) {
      if (!exited_cleanly(rank.wait_status)) say("rank " + std::to_string(rank.rank) + " " + outcome(rank));
    }
    if (const auto leftovers = collectives_run::clean_shm_leftovers(job_.token, job_.keep_shm); !leftovers.empty())
      say(leftovers);
    if (!job_.trace.empty()) say(collectives_run::merge_trace_parts(job_.trace, first_rank, job_.opts.nproc));
    return exit_status();
  }

 private:
  // Every rank is started, so that a failure to start is reported once for all the
  // ranks it stops (give_up_start); the ranks started meanwhile are then killed.
  void start_ranks() {
    for (auto& rank : ranks_) start_rank(rank);
  }

  void start_rank(rank_process& rank) {
    const auto what_failed = "cannot start rank " + std::to_string(rank.rank) + ": ";
    std::array<int, 2> out{}, err{}, started{};
    if (pipe2(out.data(), O_CLOEXEC) != 0 || pipe2(err.data(), O_CLOEXEC) != 0 || pipe2(started.data(), O_CLOEXEC) != 0)
      fail(errno_text(what_failed + "pipe"));
    // Blocked until the child has restored the default handlers.
    const sigset_t handled = handled_signal_set();
    sigset_t old_mask;
    sigprocmask(SIG_BLOCK, &handled, &old_mask);
    const pid_t pid = fork();
    if (pid == 0) become_rank(rank, out[1], err[1], started[1], old_mask);
    if (pid < 0) fail(errno_text(what_failed + "fork"));
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    setpgid(pid, pid);  // the child does it too: whoever comes first, kill(-pid) finds the group
    for (const int fd : {out[1], err[1], started[1]}) close(fd);
    // The child closes its end by exec (O_CLOEXEC) or writes why it could not start.
    std::string why;
    std::array<char, 512> buffer{};
    for (ssize_t got; (got = read(started[0], buffer.data(), buffer.size())) != 0;) {
      if (got > 0) why.append(buffer.data(), static_cast<std::size_t>(got));
      else if (errno != EINTR) break;
    }
    close(started[0]);
    if (!why.empty()) start_failures_[why].push_back(rank.rank);
    for (const int fd : {out[0], err[0]}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    rank.pid = pid;
    rank.running = true;
    rank.out.fd = out[0];
    rank.err.fd = err[0];
  }

  // The child's side of fork(): move into a process group of its own (so that a
  // terminal's Ctrl-C reaches only the launcher, which passes it on), and become
  // the program.
  [[noreturn]] void become_rank(const rank_process& rank, int out_fd, int err_fd, int started_fd,
                                const sigset_t& mask) const {
    restore_default_signals();
    sigprocmask(SIG_SETMASK, &mask, nullptr);
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // if the launcher dies, even by SIGKILL, the rank goes too
    if (getppid() != launcher_pid_) _exit(exit_cannot_run);  // it died before prctl()
    dup2(open("/dev/null", O_RDONLY | O_CLOEXEC), STDIN_FILENO);
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    for (const auto& [name, value] : rank_environment(rank)) setenv(name.c_str(), value.c_str(), 1);
    if (job_.opts.bind_to_core) bind_to_core(job_.opts.rank_cpus.at(std::size_t(rank.local_rank)), started_fd);
    execvp(argv_[0], argv_.data());
    write_all(started_fd, errno_text("cannot run " + job_.opts.command[0]));
    _exit(exit_cannot_run);
  }

  static void bind_to_core(int cpu, int started_fd) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
      write_all(started_fd, errno_text("cannot bind a rank to cpu " + std::to_string(cpu)));
      _exit(exit_cannot_run);
    }
  }

  // Some rank could not start (every rank, when the program is not there): each reason
  // is said once, with the ranks it stopped, and the ranks that did start are killed.
  int give_up_start() {
    for (const auto& [why, ranks] : start_failures_) say(why + " (" + rank_list(ranks) + ")");
    for (auto& rank : ranks_) {
      if (!rank.running) continue;
      kill(-rank.pid, SIGKILL);
      waitpid(rank.pid, &rank.wait_status, 0);
      rank.running = false;
    }
    for (auto& rank : ranks_) {
      for (output_stream* stream : {&rank.out, &rank.err}) {
        stream->drain();
        stream->finish();
      }
    }
    // The ranks killed during their start-up are the ones that leave segments behind.
    if (const auto leftovers = collectives_run::clean_shm_leftovers(job_.token, job_.keep_shm); !leftovers.empty())
      say(leftovers);
    return exit_cannot_run;
  }

  // "rank 3", "ranks 0-3", "ranks 0, 2-4 and 7".
  static std::string rank_list(const std::vector<int>& ranks) {
    std::vector<std::string> runs;
    for (std::size_t i = 0; i < ranks.size();) {
      std::size_t j = i;
      while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
      runs.push_back(std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : ""));
      i = j + 1;
    }
    std::string text = ranks.size() == 1 ? "rank " : "ranks ";
    for (std::size_t i = 0; i < runs.size(); ++i)
      text.append(i == 0 ? "" : i + 1 == runs.size() ? " and " : ", ").append(runs[i]);
    return text;
  }

  std::vector<std::pair<std::string, std::string>> rank_environment(const rank_process& rank) const {
    const options& o = job_.opts;
    std::vector<std::pair<std::string, std::string>> variables{{"RANK", std::to_string(rank.rank)},
                                                               {"WORLD_SIZE", std::to_string(o.nnodes * o.nproc)},
                                                               {"LOCAL_RANK", std::to_string(rank.local_rank)},
                                                               {"LOCAL_WORLD_SIZE", std::to_string(o.nproc)},
                                                               {"GROUP_RANK", std::to_string(o.node_rank)},
                                                               {"MASTER_ADDR", job_.master_addr},
                                                               {"MASTER_PORT", job_.master_port},
                                                               {"COLLECTIVES_JOB_TOKEN", job_.token}};
    if (!o.transport.empty()) variables.emplace_back(collectives::transport_selection_variable, o.transport);
    return variables;
  }

  bool any_running() const {
    return std::any_of(ranks_.begin(), ranks_.end(), [](const rank_process& rank) { return rank.running; });
  }

  // Sleeps until output arrives, a signal comes in, or the next deadline passes.
  void wait_for_events() {
    std::vector<pollfd> watched{{.fd = signal_pipe[0], .events = POLLIN, .revents = 0}};
    std::vector<output_stream*> streams{nullptr};
    for (auto& rank : ranks_) {
      for (output_stream* stream : {&rank.out, &rank.err}) {
        if (stream->fd < 0) continue;
        watched.push_back({.fd = stream->fd, .events = POLLIN, .revents = 0});
        streams.push_back(stream);
      }
    }
    if (poll(watched.data(), watched.size(), milliseconds_to_next_deadline()) <= 0) return;
    for (std::size_t i = 1; i < watched.size(); ++i) {
      if (watched[i].revents != 0) streams[i]->read_chunk();  // one chunk each: fair to all ranks
    }
  }

  int milliseconds_to_next_deadline() const {
    std::optional<steady::time_point> next = job_deadline_;
    if (!pending_signals_.empty() && (!next || pending_signals_.begin()->first < *next))
      next = pending_signals_.begin()->first;
    if (!next) return -1;
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(*next - steady::now()).count();
    return static_cast<int>(std::clamp<decltype(wait)>(wait, 0, 60'000));
  }

  void handle_launcher_signals() {
    std::array<unsigned char, 64> received;
    for (ssize_t count; (count = read(signal_pipe[0], received.data(), received.size())) > 0;) {
      for (const int signal_number : std::span(received).first(static_cast<std::size_t>(count))) {
        if (signal_number != SIGCHLD) pass_on(signal_number);  // SIGCHLD only wakes the loop up
      }
    }
  }

  void pass_on(int signal_number) {
    say("received " + signal_name(signal_number) + "; passing it on to the ranks");
    if (begin_stop(stop_reason::launcher_signalled)) received_signal_ = signal_number;
    schedule(steady::now(), signal_number);
    schedule(steady::now() + seconds(job_.opts.grace_s), SIGKILL);
  }

  void reap_exited_ranks() {
    for (auto& rank : ranks_) {
      int status = 0;
      if (!rank.running || waitpid(rank.pid, &status, WNOHANG) != rank.pid) continue;
      rank.running = false;
      rank.wait_status = status;
      rank.out.drain();  // its last words come before the news of its end
      rank.err.drain();
      if (exited_cleanly(status)) continue;
      if (job_.opts.keep_going && WIFSIGNALED(status) && stop_reason_ == stop_reason::none) {
        if (!first_killed_) first_killed_ = &rank;
        if (any_running())
          say("rank " + std::to_string(rank.rank) + " (pid " + std::to_string(rank.pid) + ") " + outcome(rank) +
              "; the others go on (--keep-going)");
        continue;
      }
      if (begin_stop(stop_reason::rank_failed)) stop_after_failure(rank);
    }
  }

  void stop_after_failure(const rank_process& rank) {
    first_failure_ = &rank;
    std::string news =
        "rank " + std::to_string(rank.rank) + " (pid " + std::to_string(rank.pid) + ") " + outcome(rank);
    if (any_running()) news += "; stopping the other ranks in " + format_seconds(job_.opts.grace_s);
    say(news);
    const auto sigterm_at = steady::now() + seconds(job_.opts.grace_s);
    schedule(sigterm_at, SIGTERM);
    schedule(sigterm_at + sigterm_to_sigkill, SIGKILL);
  }

  void stop_if_timed_out() {
    if (!job_deadline_ || steady::now() < *job_deadline_) return;
    job_deadline_.reset();
    say("the job timed out after " + format_seconds(job_.opts.timeout_s) + "; stopping the ranks");
    begin_stop(stop_reason::timed_out);
    schedule(steady::now(), SIGTERM);
    schedule(steady::now() + sigterm_to_sigkill, SIGKILL);
  }

  // Records the reason unless the job is already stopping; true if it was recorded.
  bool begin_stop(stop_reason reason) {
    if (stop_reason_ != stop_reason::none) return false;
    stop_reason_ = reason;
    return true;
  }

  void schedule(steady::time_point when, int signal_number) { pending_signals_.emplace(when, signal_number); }

  void send_due_signals() {
    while (!pending_signals_.empty() && pending_signals_.begin()->first <= steady::now()) {
      const int signal_number = pending_signals_.begin()->second;
      pending_signals_.erase(pending_signals_.begin());
      sent_signals_.insert(signal_number);
      for (const auto& rank : ranks_) {
        if (rank.running) kill(-rank.pid, signal_number);  // the rank's whole process group
      }
    }
  }

  std::string outcome(const rank_process& rank) const {
    const int status = rank.wait_status;
    if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
    const int signal_number = WTERMSIG(status);
    if (sent_signals_.contains(signal_number)) return "stopped by collectives-run (" + signal_name(signal_number) + ")";
    return "was killed by signal " + std::to_string(signal_number) + " (" + strsignal(signal_number) + ")";
  }

  int exit_status() const {
    switch (stop_reason_) {
      case stop_reason::none:  // with --keep-going, ranks killed while others went on count if none exited
        return first_killed_ && std::all_of(ranks_.begin(), ranks_.end(), [](const rank_process& r) { return WIFSIGNALED(r.wait_status); })
                   ? shell_status(first_killed_->wait_status)
                   : 0;
      case stop_reason::rank_failed: return shell_status(first_failure_->wait_status);
      case stop_reason::launcher_signalled: return 128 + received_signal_;
      case stop_reason::timed_out: return exit_timed_out;
    }
    return 1;
  }

  job job_;
  pid_t launcher_pid_;
  std::vector<char*> argv_;  // execvp's view of job_.opts.command
  std::vector<rank_process> ranks_;
  std::optional<steady::time_point> job_deadline_;
  std::multimap<steady::time_point, int> pending_signals_;  // to send to the running ranks, by time
  std::set<int> sent_signals_;
  stop_reason stop_reason_ = stop_reason::none;
  const rank_process* first_failure_ = nullptr;
  const rank_process* first_killed_ = nullptr;  // with --keep-going
  std::map<std::string, std::vector<int>> start_failures_;  // why a rank could not start -> those ranks
  int received_signal_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  options opts = parse_options(argc, argv);
  if (opts.show_topology) print_topology(opts);
  job the_job = resolve_job(std::move(opts));
  install_signal_handlers();
  return supervisor(std::move(the_job)).run();
}
