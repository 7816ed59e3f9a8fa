// A directory on this host that only this user can enter, shared by the processes of
// one job: where the ranks of a job that all run on this host meet, without a port
// (rendezvous.hpp). Its name is made of the user id and a digest of the launcher's name
// for the job, so every rank of the job finds it and no other job does.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>

#include "../error.hpp"
#include "../settings.hpp"
#include "file_store.hpp"

namespace collectives::bootstrap {

// /dev/shm where there is one (memory, emptied at boot), else $TMPDIR, else /tmp.
inline std::filesystem::path private_directory_parent() {
  std::error_code ec;
  if (std::filesystem::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK | X_OK) == 0) return "/dev/shm";
  if (const auto tmp = settings::value_of("TMPDIR")) return *tmp;
  return "/tmp";
}

// Where the directory of the job `job` (job_name_on_this_host) is, made or not.
inline std::filesystem::path private_directory_of(const std::string& job) {
  return private_directory_parent() /
         ("collectives-" + std::to_string(::getuid()) + "-" + detail::sha256_hex(job).substr(0, 24));
}

// The directory of the job `job` (job_name_on_this_host), made if it is not there yet.
// Every rank calls this; the first one makes it. One that exists already must be a
// directory (not a link) of this user, with no access for anyone else, or it is refused:
// in a directory every user may write to, someone else could have made it first.
inline std::filesystem::path open_private_directory(const std::string& job) {
  const auto path = private_directory_of(job);
  if (::mkdir(path.c_str(), 0700) == 0) {
    ::chmod(path.c_str(), 0700);  // whatever the umask took away: the checks below want exactly this
  } else if (errno != EEXIST) {
    throw error(errc::invalid_config, "cannot make the job's directory " + path.string() + " (for " + job +
                                          "): " + std::system_category().message(errno) +
                                          "; set COLLECTIVES_STORE_DIR, or MASTER_ADDR and MASTER_PORT");
  }
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode) || info.st_uid != ::getuid() ||
      (info.st_mode & 077) != 0)
    throw error(errc::invalid_config, "the job's directory " + path.string() + " (for " + job +
                                          ") is not a directory of this user that only it may enter; remove it, or "
                                          "set COLLECTIVES_STORE_DIR, or MASTER_ADDR and MASTER_PORT");
  return path;
}

}  // namespace collectives::bootstrap
