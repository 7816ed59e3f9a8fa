// This machine's processors as a job sees them: packages, NUMA nodes, physical cores
// and hardware threads (PUs), which cpus each NUMA node has, and the cpus this process
// may run on. COLLECTIVES_DEBUG=INFO shows it once per process and
// `collectives-run --topology` prints it (docs/topology.md).
//
// The figures come from hwloc where the program is built with it (the collectives::hwloc
// target defines COLLECTIVES_WITH_HWLOC), else from Linux's sysfs and sched_getaffinity,
// so header-only use needs no library. hwloc knows more machines (and the cpus a cgroup
// allows); on Linux both give the same counts.
//
// binding_cpus says where the launcher's `--bind-to core` puts local ranks: one
// hardware thread per physical core, so that two ranks never share a core's execution
// units, taking the NUMA nodes in turn, so that ranks spread over the memory controllers.
#pragma once

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../config.hpp"

#if COLLECTIVES_HAS_HWLOC
#include <hwloc.h>
#endif

namespace collectives::bootstrap {

// One physical core: the NUMA node it belongs to and its hardware threads, as the
// kernel numbers cpus, ascending.
struct core_cpus {
  int numa_node = 0;
  std::vector<int> cpus;
};

struct numa_node_cpus {
  int index = 0;     // the kernel's number for the node
  std::string cpus;  // as a list, "0-3,8-11"; empty for a node with memory only
};

struct machine_topology {
  int packages = 0, numa_nodes = 0, cores = 0, hardware_threads = 0;
  std::vector<numa_node_cpus> nodes;  // by index
  std::vector<core_cpus> core_list;   // every core, in the order of its first cpu
  std::string bound_to;               // the cpus this process may run on, as a list
  std::string source;                 // "hwloc 2.9.0" or "sysfs"
};

namespace topology_detail {

// "0-3,8,10-11" (the kernel's and hwloc's list format) -> {0,1,2,3,8,10,11}, sorted.
inline std::vector<int> parse_cpu_list(std::string_view text) {
  std::vector<int> cpus;
  while (!text.empty()) {
    const auto comma = text.find(',');
    const auto item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty() || item.front() < '0' || item.front() > '9') continue;
    const auto dash = item.find('-');
    const int first = std::atoi(std::string(item.substr(0, dash)).c_str());
    const int last = dash == std::string_view::npos ? first : std::atoi(std::string(item.substr(dash + 1)).c_str());
    for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

// The inverse: sorted cpus -> "0-3,8,10-11".
inline std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string text;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!text.empty()) text += ',';
    text += std::to_string(cpus[i]);
    if (j > i) text += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return text;
}

// A sysfs file's first line without its newline; empty when it cannot be read.
inline std::string first_line(const std::string& path) {
  std::string line;
  if (std::FILE* file = std::fopen(path.c_str(), "r")) {
    char buffer[4096];
    if (std::fgets(buffer, sizeof buffer, file) != nullptr) line = buffer;
    std::fclose(file);
  }
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

inline std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(static_cast<std::size_t>(cpu), &set)) cpus.push_back(cpu);
  return cpus;
}

}  // namespace topology_detail

// From /sys/devices/system/{cpu,node} and sched_getaffinity: what any Linux offers.
inline machine_topology read_topology_from_sysfs() {
  using namespace topology_detail;
  machine_topology t;
  t.source = "sysfs";
  t.bound_to = format_cpu_list(allowed_cpus());
  auto cpus = parse_cpu_list(first_line("/sys/devices/system/cpu/online"));
  if (cpus.empty()) cpus = parse_cpu_list(t.bound_to);  // no sysfs: the cpus we may use are those we know
  t.hardware_threads = static_cast<int>(cpus.size());

  std::map<int, int> node_of;  // cpu -> its NUMA node
  for (int node : parse_cpu_list(first_line("/sys/devices/system/node/online"))) {
    const auto list = first_line("/sys/devices/system/node/node" + std::to_string(node) + "/cpulist");
    t.nodes.push_back({node, list});
    for (int cpu : parse_cpu_list(list)) node_of[cpu] = node;
  }
  if (t.nodes.empty()) t.nodes.push_back({0, format_cpu_list(cpus)});  // a kernel without NUMA: one node
  t.numa_nodes = static_cast<int>(t.nodes.size());

  // A core is a (package, core_id) pair: core ids repeat from one package to the next.
  std::map<std::pair<int, int>, std::size_t> core_at;
  std::set<int> packages;
  for (int cpu : cpus) {
    const auto dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    const auto package_text = first_line(dir + "physical_package_id"), core_text = first_line(dir + "core_id");
    const int package = package_text.empty() ? 0 : std::atoi(package_text.c_str());
    const int core = core_text.empty() ? cpu : std::atoi(core_text.c_str());  // unknown: a core per cpu
    packages.insert(package);
    const auto [at, added] = core_at.try_emplace({package, core}, t.core_list.size());
    if (added) t.core_list.push_back({node_of.count(cpu) != 0 ? node_of[cpu] : t.nodes.front().index, {}});
    t.core_list[at->second].cpus.push_back(cpu);
  }
  t.packages = static_cast<int>(packages.size());
  t.cores = static_cast<int>(t.core_list.size());
  return t;
}

#if COLLECTIVES_HAS_HWLOC
// From hwloc; nothing when it cannot load this machine's topology.
inline std::optional<machine_topology> read_topology_from_hwloc() {
  hwloc_topology_t topology;
  if (hwloc_topology_init(&topology) != 0) return std::nullopt;
  if (hwloc_topology_load(topology) != 0) {
    hwloc_topology_destroy(topology);
    return std::nullopt;
  }
  const auto list = [](hwloc_const_bitmap_t set) {
    char* text = nullptr;
    std::string result;
    if (hwloc_bitmap_list_asprintf(&text, set) >= 0 && text != nullptr) result = text;
    std::free(text);
    return result;
  };
  const auto objects = [&](hwloc_obj_type_t type) {
    std::vector<hwloc_obj_t> found;
    const int count = hwloc_get_nbobjs_by_type(topology, type);
    for (int i = 0; i < count; ++i) found.push_back(hwloc_get_obj_by_type(topology, type, static_cast<unsigned>(i)));
    return found;
  };
  machine_topology t;
  t.source = std::string("hwloc ") + HWLOC_VERSION;
  t.packages = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PACKAGE);
  t.hardware_threads = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PU);
  for (hwloc_obj_t node : objects(HWLOC_OBJ_NUMANODE))
    t.nodes.push_back({static_cast<int>(node->os_index), list(node->cpuset)});
  t.numa_nodes = static_cast<int>(t.nodes.size());
  auto cores = objects(HWLOC_OBJ_CORE);
  if (cores.empty()) cores = objects(HWLOC_OBJ_PU);  // a machine whose cores hwloc does not know: a core per PU
  for (hwloc_obj_t core : cores) {
    const int node = hwloc_bitmap_first(core->nodeset);  // hwloc numbers nodesets by the nodes' os_index
    t.core_list.push_back({node < 0 ? 0 : node, topology_detail::parse_cpu_list(list(core->cpuset))});
  }
  t.cores = static_cast<int>(t.core_list.size());
  if (hwloc_bitmap_t bound = hwloc_bitmap_alloc()) {
    if (hwloc_get_cpubind(topology, bound, 0) == 0) t.bound_to = list(bound);
    hwloc_bitmap_free(bound);
  }
  hwloc_topology_destroy(topology);
  return t;
}
#endif

// This machine's topology: hwloc's where built with it and it loads, else sysfs's.
inline machine_topology read_topology() {
#if COLLECTIVES_HAS_HWLOC
  if (auto t = read_topology_from_hwloc()) return std::move(*t);
#endif
  return read_topology_from_sysfs();
}

// "topology (hwloc 2.9.0): 1 package, 1 NUMA node, 2 cores, 2 hardware threads; bound to cpus 0-1"
inline std::string summary(const machine_topology& t) {
  const auto counted = [](int n, const char* one, const char* many) {
    return std::to_string(n) + ' ' + (n == 1 ? one : many);
  };
  return "topology (" + t.source + "): " + counted(t.packages, "package", "packages") + ", " +
         counted(t.numa_nodes, "NUMA node", "NUMA nodes") + ", " + counted(t.cores, "core", "cores") + ", " +
         counted(t.hardware_threads, "hardware thread", "hardware threads") + "; bound to cpus " + t.bound_to;
}

// The cpus to bind local ranks to, local rank i to the i-th: of each core with an
// allowed cpu, its first allowed cpu (so no two ranks share a core, even where it has
// several hardware threads), taking one core of each NUMA node in turn, nodes in
// ascending order, cores in the order given. As many as there are such cores.
inline std::vector<int> binding_cpus(const std::vector<core_cpus>& cores, const std::vector<int>& allowed) {
  std::map<int, std::vector<int>> by_node;  // NUMA node -> a cpu of each of its cores
  for (const auto& core : cores) {
    const auto cpu = std::find_if(core.cpus.begin(), core.cpus.end(), [&](int c) {
      return std::find(allowed.begin(), allowed.end(), c) != allowed.end();
    });
    if (cpu != core.cpus.end()) by_node[core.numa_node].push_back(*cpu);
  }
  std::vector<int> order;
  for (std::size_t round = 0; order.size() < cores.size(); ++round) {
    const auto before = order.size();
    for (const auto& [node, cpus] : by_node)
      if (round < cpus.size()) order.push_back(cpus[round]);
    if (order.size() == before) break;  // every node is used up
  }
  return order;
}

inline std::vector<int> binding_cpus(const machine_topology& t) {
  return binding_cpus(t.core_list, topology_detail::parse_cpu_list(t.bound_to));
}

}  // namespace collectives::bootstrap
