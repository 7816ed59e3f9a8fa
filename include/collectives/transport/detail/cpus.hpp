// What a rank's busy-wait needs to know of its cores, for the transports that poll
// before they sleep (shm, tcp).
#pragma once

#include <sched.h>
#include <unistd.h>

#include <algorithm>

namespace collectives::transport_detail {

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
// core, every process runs on it and none has it alone). Such a rank keeps its core
// while it polls: a yield could hand it to another process for a whole time slice.
inline bool bound_to_one_cpu() { return usable_cpus() == 1 && sysconf(_SC_NPROCESSORS_ONLN) > 1; }

}  // namespace collectives::transport_detail
