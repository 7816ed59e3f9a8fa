// A property a fuzz target checks: when it does not hold, the target stops at once
// (libFuzzer then saves the input that broke it), in every build type.
#pragma once

#include <cstdio>
#include <cstdlib>

inline void fuzz_check(bool holds, const char* property) {
  if (holds) return;
  std::fprintf(stderr, "property violated: %s\n", property);
  std::abort();
}
