// Sleeping and waking across processes, and telling whether a peer process lives.
//
// A rank that runs out of work sleeps on its doorbell, a futex word in the segment.
// The lost-wake-up race is closed the usual way: the sleeper reads the bell, says it
// is sleeping, looks for work once more and only then sleeps, and only if the bell
// still reads the same; a waker publishes its work, then rings (and calls the kernel)
// only if the sleeper says it sleeps. Both sides fence between their store and their
// load, so at least one of them sees the other.
#pragma once

#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <string>
#include <vector>

#include "segment.hpp"

namespace collectives::shm_detail {

// A polite busy-wait turn: tells the core it spins, so a sibling hyperthread runs.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// The cores this process may run on (1 when it is bound to one).
inline int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

// Whether this process was bound to one core of several (on a host with a single
// core, every process runs on it and none has it alone).
inline bool bound_to_one_cpu() { return usable_cpus() == 1 && sysconf(_SC_NPROCESSORS_ONLN) > 1; }

// After publishing work for `bell`'s rank: wakes it if it sleeps.
inline void ring_if_sleeping(doorbell& bell) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (shared(bell.sleeping).load(std::memory_order_relaxed) == 0) return;
  shared(bell.rings).fetch_add(1, std::memory_order_release);
  ::syscall(SYS_futex, &bell.rings, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// For news that must reach a rank however it waits (abort, departure).
inline void ring(doorbell& bell) {
  shared(bell.rings).fetch_add(1, std::memory_order_seq_cst);
  ::syscall(SYS_futex, &bell.rings, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Sleeps on the rank's own bell for at most `limit`, unless `has_news()` (checked
// after announcing the sleep) or a ring says there is something to look at.
template <class HasNews>
bool sleep_on(doorbell& bell, std::chrono::nanoseconds limit, HasNews&& has_news) {
  const std::uint32_t seen = shared(bell.rings).load(std::memory_order_acquire);
  shared(bell.sleeping).store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  bool news = has_news();
  if (!news && limit.count() > 0) {
    const auto ns = limit.count();
    timespec relative{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    ::syscall(SYS_futex, &bell.rings, FUTEX_WAIT, seen, &relative, nullptr, 0);  // returns early if rung
    news = shared(bell.rings).load(std::memory_order_acquire) != seen;
  }
  shared(bell.sleeping).store(0, std::memory_order_relaxed);
  return news;
}

// Watches the peers' processes: a pidfd per peer (it refers to that very process, so
// a reused pid can't fool it), or kill(pid, 0) where pidfds are unavailable. Peers in
// another pid namespace, or this process itself (ranks as threads), aren't watched:
// for them the deadline is the only guard.
class process_watch {
 public:
  struct peer {
    int rank = -1, pid = 0, fd = -1;
  };

  process_watch() = default;
  process_watch(const process_watch&) = delete;
  process_watch& operator=(const process_watch&) = delete;
  process_watch(process_watch&& o) noexcept : peers_(std::move(o.peers_)) {}
  process_watch& operator=(process_watch&& o) noexcept {
    std::swap(peers_, o.peers_);
    return *this;
  }
  ~process_watch() {
    for (const auto& p : peers_)
      if (p.fd >= 0) ::close(p.fd);
  }

  void watch(int rank, int pid) {
    if (pid <= 0 || pid == ::getpid()) return;
    peer p{rank, pid, static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))};
    peers_.push_back(p);
  }

  // The first watched peer that has exited without saying goodbye, or -1.
  template <class SaidGoodbye>
  int first_dead(SaidGoodbye&& said_goodbye) const {
    for (const auto& p : peers_) {
      if (said_goodbye(p.rank)) continue;  // an exit after closing its communicator is no loss
      if (exited(p)) return p.rank;
    }
    return -1;
  }

  // Whether the watched process of `rank` has exited; false for one not watched.
  bool dead(int rank) const {
    for (const auto& p : peers_)
      if (p.rank == rank) return exited(p);
    return false;
  }

  int pid_of(int rank) const {
    for (const auto& p : peers_)
      if (p.rank == rank) return p.pid;
    return 0;
  }

 private:
  static bool exited(const peer& p) {
    if (p.fd < 0) return !process_alive(p.pid);
    pollfd q{p.fd, POLLIN, 0};
    return ::poll(&q, 1, 0) > 0;  // a pidfd reads ready once its process has exited
  }

  std::vector<peer> peers_;
};

}  // namespace collectives::shm_detail
