// Which host this process runs on, as a string that every process of the host
// builds alike and no process of another host does: for groups by host (split.hpp).
#pragma once

#include <unistd.h>

#include <fstream>
#include <string>

namespace collectives::bootstrap {

// The host name, the kernel's boot id (two machines may share a name), and the
// network namespace: processes in different namespaces reach each other only over
// the network, as containers and the netns tests' hosts do, so they count as hosts
// of their own.
inline std::string host_identity() {
  char name[256] = {};
  std::string id = gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("?");
  std::string boot;
  if (std::ifstream in("/proc/sys/kernel/random/boot_id"); in) std::getline(in, boot);
  char ns[128] = {};
  const ssize_t n = readlink("/proc/self/ns/net", ns, sizeof ns - 1);
  return id + "|" + boot + "|" + (n > 0 ? std::string(ns, static_cast<std::size_t>(n)) : std::string());
}

}  // namespace collectives::bootstrap
