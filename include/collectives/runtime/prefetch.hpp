// A hint to the processor: fetch the cache line at an address ahead of a read of it.
// For code that walks many objects in turn whose lines are cold (a simulated cluster's
// thousands of ranks), asking a few objects ahead overlaps the misses.
#pragma once

namespace collectives::detail {

// GCC takes a function whose only effect is __builtin_prefetch for one without effects
// and drops the calls to it; the empty asm statement is an effect, which keeps them.
inline void prefetch(const void* p) noexcept {
  __builtin_prefetch(p);
  asm volatile("");
}

}  // namespace collectives::detail
