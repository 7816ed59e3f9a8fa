// run_ranks: a group of ranks on threads of this process, over the inproc transport,
// for tests, examples and programs that want several ranks without processes.
#pragma once

#include <chrono>
#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

#include "communicator.hpp"
#include "error.hpp"
#include "transport/inproc.hpp"

namespace collectives {

// Runs fn(communicator<inproc>&) on `size` threads, one per rank, and waits for all.
// If a rank throws, the group is aborted so the others stop waiting, and the first
// rank's own error (not the "aborted" that followed it) is rethrown.
template <class Fn>
void run_ranks(int size, Fn&& fn, std::chrono::milliseconds timeout = default_timeout) {
  inproc_group group(size);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  {
    std::vector<std::jthread> threads;
    threads.reserve(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r)
      threads.emplace_back([&, r] {
        try {
          communicator<inproc> comm(group.transport(r), timeout);
          fn(comm);
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
          group.abort();
        }
      });
  }
  auto is_echo = [](const std::exception_ptr& e) {
    try {
      std::rethrow_exception(e);
    } catch (const error& x) {
      return x.code() == errc::aborted;
    } catch (...) {
      return false;
    }
  };
  std::exception_ptr first;
  for (auto& e : errors)
    if (e && !is_echo(e)) { first = e; break; }
  for (auto& e : errors)
    if (!first && e) first = e;
  if (first) std::rethrow_exception(first);
}

#if defined(COLLECTIVES_SEPARATE_COMPILATION)
// Compiled in the library (impl/src.hpp).
extern template class executor_core<inproc>;
extern template class communicator<inproc>;
#endif

}  // namespace collectives
