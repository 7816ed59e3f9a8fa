// The machine's topology (bootstrap/topology.hpp): where --bind-to core puts ranks, on
// hand-written machines; and hwloc's figures against sysfs's, read in this process.
#include <collectives/bootstrap/topology.hpp>

#include <doctest/doctest.h>

#include <vector>

using collectives::bootstrap::binding_cpus;
using collectives::bootstrap::core_cpus;
using collectives::bootstrap::machine_topology;
using collectives::bootstrap::topology_detail::format_cpu_list;
using collectives::bootstrap::topology_detail::parse_cpu_list;
using cpus = std::vector<int>;

namespace {

// `count` cores on `node`, the first with cpu `first`, each with `threads` hardware
// threads numbered as Linux numbers them on x86: a core's second thread is `stride` on.
std::vector<core_cpus> cores_on(int node, int first, int count, int threads = 1, int stride = 0) {
  std::vector<core_cpus> cores;
  for (int c = 0; c < count; ++c) {
    core_cpus core{node, {}};
    for (int t = 0; t < threads; ++t) core.cpus.push_back(first + c + t * stride);
    cores.push_back(core);
  }
  return cores;
}

std::vector<core_cpus> joined(std::vector<core_cpus> a, const std::vector<core_cpus>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

cpus range(int first, int last) {
  cpus all;
  for (int c = first; c <= last; ++c) all.push_back(c);
  return all;
}

}  // namespace

TEST_CASE("cpu lists read and written as the kernel and hwloc write them") {
  CHECK(parse_cpu_list("0-3,8,10-11\n") == cpus{0, 1, 2, 3, 8, 10, 11});
  CHECK(parse_cpu_list("5") == cpus{5});
  CHECK(parse_cpu_list("") == cpus{});
  CHECK(format_cpu_list({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
  CHECK(format_cpu_list({}) == "");
  CHECK(format_cpu_list(parse_cpu_list("0-63")) == "0-63");
}

TEST_CASE("one NUMA node: the cores in order") {
  CHECK(binding_cpus(cores_on(0, 0, 4), range(0, 3)) == cpus{0, 1, 2, 3});
}

TEST_CASE("two NUMA nodes: ranks take the nodes in turn") {
  const auto machine = joined(cores_on(0, 0, 4), cores_on(1, 4, 4));
  CHECK(binding_cpus(machine, range(0, 7)) == cpus{0, 4, 1, 5, 2, 6, 3, 7});
  // Uneven nodes: once the smaller is used up, the larger goes on alone.
  CHECK(binding_cpus(joined(cores_on(0, 0, 1), cores_on(1, 4, 3)), cpus{0, 4, 5, 6}) == cpus{0, 4, 5, 6});
}

TEST_CASE("hyperthreads: one rank per physical core, on its first hardware thread") {
  // 4 cores with 2 threads each, core c holding cpus c and c + 4.
  const auto machine = cores_on(0, 0, 4, 2, 4);
  CHECK(binding_cpus(machine, range(0, 7)) == cpus{0, 1, 2, 3});
  // Two nodes of 2 such cores (cpus 0-1 + 4-5 and 2-3 + 6-7).
  const auto numa = joined(cores_on(0, 0, 2, 2, 4), cores_on(1, 2, 2, 2, 4));
  CHECK(binding_cpus(numa, range(0, 7)) == cpus{0, 2, 1, 3});
}

TEST_CASE("fewer allowed cpus: only cores with an allowed cpu, on an allowed cpu") {
  const auto machine = cores_on(0, 0, 4, 2, 4);  // core c: cpus c and c + 4
  CHECK(binding_cpus(machine, cpus{0, 4, 5}) == cpus{0, 5});  // core 0 once; core 1 by its second thread
  CHECK(binding_cpus(machine, cpus{6}) == cpus{6});
  CHECK(binding_cpus(machine, cpus{}) == cpus{});
  const auto numa = joined(cores_on(0, 0, 4), cores_on(1, 4, 4));
  CHECK(binding_cpus(numa, cpus{2, 3, 4}) == cpus{2, 4, 3});
}

TEST_CASE("the summary line") {
  machine_topology one;
  one.packages = one.numa_nodes = one.cores = one.hardware_threads = 1;
  one.bound_to = "0";
  one.source = "sysfs";
  CHECK(summary(one) == "topology (sysfs): 1 package, 1 NUMA node, 1 core, 1 hardware thread; bound to cpus 0");
  machine_topology two{2, 2, 8, 16, {}, {}, "0-15", "hwloc 2.9.0"};
  CHECK(summary(two) ==
        "topology (hwloc 2.9.0): 2 packages, 2 NUMA nodes, 8 cores, 16 hardware threads; bound to cpus 0-15");
}

TEST_CASE("sysfs: figures that hang together") {
  const auto t = collectives::bootstrap::read_topology_from_sysfs();
  INFO(summary(t));
  CHECK(t.source == "sysfs");
  CHECK(t.packages >= 1);
  CHECK(t.numa_nodes == static_cast<int>(t.nodes.size()));
  CHECK(t.numa_nodes >= 1);
  CHECK(t.cores >= t.packages);
  CHECK(t.hardware_threads >= t.cores);
  CHECK(!t.bound_to.empty());
  // Every allowed cpu is some core's, so binding finds at least one core.
  CHECK(!binding_cpus(t).empty());
}

#if COLLECTIVES_HAS_HWLOC
TEST_CASE("hwloc and sysfs agree on this machine") {
  const auto from_hwloc = collectives::bootstrap::read_topology_from_hwloc();
  REQUIRE(from_hwloc.has_value());
  const auto& h = *from_hwloc;
  const auto s = collectives::bootstrap::read_topology_from_sysfs();
  INFO(summary(h));
  INFO(summary(s));
  CHECK(h.source.starts_with("hwloc "));
  CHECK(collectives::bootstrap::read_topology().source == h.source);
  CHECK(h.packages == s.packages);
  CHECK(h.numa_nodes == s.numa_nodes);
  CHECK(h.cores == s.cores);
  CHECK(h.hardware_threads == s.hardware_threads);
  CHECK(h.bound_to == s.bound_to);
  REQUIRE(h.nodes.size() == s.nodes.size());
  for (std::size_t i = 0; i < h.nodes.size(); ++i) {
    CHECK(h.nodes[i].index == s.nodes[i].index);
    CHECK(h.nodes[i].cpus == s.nodes[i].cpus);
  }
  CHECK(binding_cpus(h) == binding_cpus(s));
}
#endif
