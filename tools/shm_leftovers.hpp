// collectives-run: shared-memory segments a job left in /dev/shm.
//
// The shm transport unlinks its segment as soon as every rank has attached to it, so
// a finished job leaves nothing, even one whose ranks crashed later; only a rank that
// died during start-up can leave /dev/shm/collectives-<T>-* behind, where <T>
// fingerprints the job token. The launcher knows the token, so once every rank has
// exited it removes what matches that prefix, and only that: other jobs' segments
// have other tokens.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include <collectives/transport/shm/segment_name.hpp>

namespace collectives_run {

inline constexpr const char* shm_directory = "/dev/shm";

// The names in /dev/shm that start with the job's segment prefix, sorted.
inline std::vector<std::string> shm_leftovers(const std::string& token) {
  const std::string prefix = collectives::shm_detail::segment_prefix(token);
  std::vector<std::string> names;
  DIR* directory = opendir(shm_directory);
  if (directory == nullptr) return names;  // no /dev/shm: nothing can be left there
  while (const dirent* entry = readdir(directory)) {
    const std::string name = entry->d_name;
    if (name.starts_with(prefix)) names.push_back(name);
  }
  closedir(directory);
  std::sort(names.begin(), names.end());
  return names;
}

// Reports the job's leftovers (a line for `say`), and removes them unless `keep`:
// tests that check the library itself leaves nothing behind keep them, so that the
// launcher's clean-up cannot hide a leak. Empty when the job left nothing.
inline std::string clean_shm_leftovers(const std::string& token, bool keep) {
  const auto names = shm_leftovers(token);
  if (names.empty()) return "";
  std::string failures;
  std::size_t removed = 0;
  for (const auto& name : names) {
    if (keep) break;
    const std::string path = std::string(shm_directory) + "/" + name;
    if (unlink(path.c_str()) == 0 || errno == ENOENT) ++removed;
    else failures += "; cannot remove " + path + ": " + std::strerror(errno);
  }
  const auto segments = [](std::size_t n) {
    return std::to_string(n) + " shared-memory segment" + (n == 1 ? "" : "s");
  };
  const std::string where = std::string(shm_directory) + "/" + collectives::shm_detail::segment_prefix(token) + "*";
  if (keep)
    return "warning: the job left " + segments(names.size()) + " (" + where + "); kept (COLLECTIVES_RUN_KEEP_SHM)";
  return "warning: removed " + segments(removed) + " the job left (" + where +
         "); only a rank that ends during start-up leaves them" + failures;
}

}  // namespace collectives_run
