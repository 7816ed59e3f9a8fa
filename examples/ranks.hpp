// How an example gets its ranks: the one piece of code the examples share.
//
// Every example runs the same per-rank code in two ways:
//
//   started directly       build/examples/01_ring_all_reduce [ranks = 4] [elements]
//                          The ranks are threads of this one process, joined by the
//                          in-process transport (collectives::run_ranks).
//   under a launcher       collectives-run -n 4 build/examples/01_ring_all_reduce [elements]
//                          Each process is one rank, joined to the others over TCP
//                          (collectives::communicator<collectives::tcp>::from_env()).
//                          mpirun and srun work too (see docs/launcher.md).
//
// The per-rank code is a generic lambda, `[&](auto& comm) { ... }`, compiled once
// for each communicator type: coll::all_reduce(comm, ...) reads the same either way.
//
// Under a launcher the rank count is the launcher's (-n 4), so there is no ranks
// argument: an example's own arguments start at argv[1]. Started directly, argv[1]
// is the rank count and the example's own arguments follow.
#pragma once

#include <collectives/collectives.hpp>
#include <collectives/transport/tcp.hpp>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <initializer_list>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace examples {

// An example's check of its own result: a wrong one ends it with the rank and what.
inline void expect(bool ok, int rank, const std::string& what) {
  if (!ok) throw std::runtime_error("rank " + std::to_string(rank) + ": " + what);
}

// Whether a launcher started this process as one rank of a job: collectives-run and
// torchrun-style launchers set RANK and WORLD_SIZE, mpirun (Open MPI)
// OMPI_COMM_WORLD_RANK and _SIZE, mpiexec (Hydra: MPICH, Intel MPI) PMI_RANK and
// PMI_SIZE, srun SLURM_PROCID and SLURM_NTASKS. One variable of a pair is enough to
// count: the library then names the one that is missing, rather than the example
// quietly running as threads. When none is set but a launcher's other variables are,
// the example says so loudly before it runs its ranks as threads.
inline bool launched() {
  if (collectives::bootstrap::rank_variables_set()) return true;
  if (const auto sign = collectives::bootstrap::launcher_without_ranks())
    collectives::log::warn(*sign + " says a launcher started this process, but it gave no rank (RANK, "
                           "OMPI_COMM_WORLD_RANK, PMI_RANK and SLURM_PROCID are unset): running the ranks as threads "
                           "of this one process");
  return false;
}

// An example's command line, with the rank count taken off when there is one.
struct command_line {
  std::string program;                     // argv[0] without its directory, for messages
  bool launched = false;                   // see launched() above
  int threads = 4;                         // started directly: argv[1], the rank count; unused under a launcher
  std::vector<std::string_view> arguments;  // the example's own arguments

  command_line(int argc, char** argv) : launched(examples::launched()) {
    program = argc > 0 ? argv[0] : "example";
    program.erase(0, program.find_last_of('/') + 1);  // npos + 1 == 0: nothing to erase
    int first = 1;
    if (!launched && argc > 1) {
      const long long count = parse(argv[first++]);
      threads = count <= std::numeric_limits<int>::max() ? int(count) : -1;
    }
    arguments.assign(argv + std::min(first, argc), argv + argc);
  }

  // Own argument i as a whole number, `fallback` when it was not given, and -1 when it
  // is not a number at all (which each example's range check then rejects).
  long long number(std::size_t i, long long fallback) const {
    return i < arguments.size() ? parse(arguments[i]) : fallback;
  }

  // True unless the rank count is not a positive number or more than `own` own
  // arguments were given (such as `collectives-run -n 4 01_ring_all_reduce 4 1003`:
  // under a launcher, the rank count goes to the launcher).
  bool well_formed(std::size_t own) const { return (launched || threads >= 1) && arguments.size() <= own; }

  // Says how to start the example, both ways, on stderr; `own` describes its own
  // arguments. Under a launcher only rank 0 says it, not every process of the job.
  // Returns 2, the exit status for a bad command line.
  int usage(std::string_view own) const {
    if (launched && !is_first_rank()) return 2;
    const std::string space = own.empty() ? "" : " ";
    std::cerr << "usage: " << program << " [ranks >= 1]" << space << own << "    (ranks as threads of one process)\n"
              << "   or: collectives-run -n RANKS " << program << space << own << "    (ranks as processes)\n";
    if (launched) std::cerr << "(under a launcher the rank count is the launcher's -n, not an argument)\n";
    return 2;
  }

 private:
  static long long parse(std::string_view text) {
    long long value = -1;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    return ec == std::errc{} && end == text.data() + text.size() ? value : -1;
  }

  static bool is_first_rank() {
    try {
      return collectives::bootstrap::detect_launch().rank == 0;
    } catch (const collectives::error&) {
      return true;  // the environment is broken: every process may as well say so
    }
  }
};

// Runs the per-rank code `fn(comm)` of an example, and returns main's exit status.
//
// Under a launcher, fn runs once, for this process's rank, with a
// communicator<tcp> built from the launcher's environment; started directly, it runs
// on command.threads threads, each with its communicator<inproc>.
//
// When a rank throws, whether a check of its result failed or the library reported a
// collectives::error (a timeout, a lost peer, a bad argument: what() names the call and
// the rank), the error is printed and the status is 1. With threads, run_ranks stops
// the other ranks and passes on the first rank's error; with processes, this process
// exits, its peers see it go, and the launcher fails the job with this status.
template <class Fn>
int run_example(const command_line& command, Fn fn) {
  try {
    if (command.launched) {
      auto comm = collectives::communicator<collectives::tcp>::from_env();
      fn(comm);
    } else {
      collectives::run_ranks(command.threads, fn);
    }
    return 0;
  } catch (const std::exception& e) {  // collectives::error is a std::system_error
    std::cerr << command.program << ": FAILED: " << e.what() << '\n';
    return 1;
  }
}

// Whether this rank prints the example's summary: rank 0 does, in either way of
// running, so that a job prints it once, as a single process of threads does.
//
// Every rank calls it, after checking its own results, and waits here until all ranks
// have (a barrier). A rank whose check failed never arrives, and the others get an
// error instead of an answer, so nothing is printed for a failed run.
template <class Comm>
bool prints_summary(Comm& comm) {
  collectives::barrier(comm);
  return comm.rank() == 0;
}

}  // namespace examples
