#include <collectives/bootstrap/topology.hpp>

#include <cstdio>

// The hwloc part's target (or collectives-hwloc.pc) defines COLLECTIVES_WITH_HWLOC and
// links libhwloc: without the one this fails here, without the other at the link.
static_assert(COLLECTIVES_HAS_HWLOC, "built without COLLECTIVES_WITH_HWLOC");

int main() {
  const auto t = collectives::bootstrap::read_topology();
  std::printf("hwloc_consumer: %s\n", collectives::bootstrap::summary(t).c_str());
  return t.source.starts_with("hwloc ") && t.cores > 0 ? 0 : 1;  // not sysfs's fallback
}
