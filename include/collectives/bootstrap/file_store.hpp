// A key-value store in a directory that every rank can see (NFS, Lustre, GPFS, or a
// local directory for the ranks of one host): each key is a file. For clusters where
// no rank can listen on a port the others reach, or where a shared directory is simply
// easier to arrange. Waiting is by polling, so it suits a bootstrap's few dozen keys,
// not a hot loop.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <openssl/evp.h>

#include "../concepts/transport.hpp"
#include "../error.hpp"
#include "store.hpp"

namespace collectives::bootstrap {

namespace detail {

inline std::string sha256_hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha256(), nullptr) != 1)
    throw error(errc::invalid_config, "OpenSSL could not compute a SHA-256 digest");
  static constexpr char hex[] = "0123456789abcdef";
  std::string text;
  for (unsigned int i = 0; i < length; ++i) {
    text.push_back(hex[digest[i] >> 4]);
    text.push_back(hex[digest[i] & 15]);
  }
  return text;
}

// The file name of a key: 'k', then letters, digits, '-' and '_' as they are and every
// other byte as %XX; a key whose name would be too long for a file system (255 bytes)
// is named 'h' and its SHA-256 instead. No name contains '/' or '.', so no key reaches
// outside the directory, and none is mistaken for the ".lock" and ".tmp" files beside it.
inline std::string key_file_name(const std::string& key) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string name = "k";
  for (const char c : key) {
    const auto byte = static_cast<unsigned char>(c);
    if ((byte >= 'a' && byte <= 'z') || (byte >= 'A' && byte <= 'Z') || (byte >= '0' && byte <= '9') || c == '-' ||
        c == '_') {
      name.push_back(c);
    } else {
      name.push_back('%');
      name.push_back(hex[byte >> 4]);
      name.push_back(hex[byte & 15]);
    }
    if (name.size() > 200) return sha256_hex(key).insert(0, 1, 'h');  // not "h" + ...: g++ 12 warns wrongly (-Wrestrict)
  }
  return name;
}

inline std::string errno_text(int e) { return std::system_category().message(e); }

// Sleeps `backoff` (or until `until`, if sooner) and doubles it up to `longest`.
inline void back_off(std::chrono::microseconds& backoff, std::chrono::microseconds longest, deadline until) {
  std::this_thread::sleep_for(std::min<clock::duration>(backoff, std::max<clock::duration>(until - clock::now(), {})));
  backoff = std::min(2 * backoff, longest);
}

}  // namespace detail

class file_store final : public key_value_store {
 public:
  // Uses `dir`, creating it if needed. `lock_limit` bounds how long an add waits for
  // another's lock (a rank that died holding one leaves its lock file behind).
  explicit file_store(std::filesystem::path dir, std::chrono::milliseconds lock_limit = std::chrono::seconds(60))
      : dir_(std::move(dir)), lock_limit_(lock_limit) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec || !std::filesystem::is_directory(dir_, ec))
      throw error(errc::invalid_config, "could not create the file store directory " + dir_.string() + ": " +
                                            (ec ? ec.message() : "it exists and is not a directory"));
  }

  const std::filesystem::path& directory() const noexcept { return dir_; }

  // Written to a temporary file and renamed over the key: rename is atomic, so a reader
  // sees the old value or the new one, never part of one.
  void set(const std::string& key, const std::string& value) override {
    check_store_sizes(key, value.size());
    write_atomically(path_of(key), value);
  }

  std::string get(const std::string& key, deadline until) override {
    check_store_sizes(key, 0);
    const auto started = clock::now();
    for (auto backoff = first_poll;;) {
      if (auto value = read(path_of(key))) return std::move(*value);
      if (clock::now() >= until) throw timed_out(key, started);
      detail::back_off(backoff, last_poll, until);
    }
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    check_store_sizes(key, 0);
    const auto path = path_of(key);
    const key_lock lock(*this, key, path.string() + ".lock");
    std::int64_t now = 0;
    if (const auto current = read(path)) {
      const auto parsed = detail::parse_counter(*current);
      if (!parsed)
        throw error(errc::protocol_error, "cannot add to key '" + key + "' in the file store at " + dir_.string() +
                                              ": its value is not an integer");
      now = *parsed;
    }
    now = detail::wrapping_add(now, delta);
    write_atomically(path, std::to_string(now));
    return now;
  }

  void wait(const std::vector<std::string>& keys, deadline until) override {
    for (const auto& key : keys) check_store_sizes(key, 0);
    const auto started = clock::now();
    for (const auto& key : keys) {
      for (auto backoff = first_poll; !exists(path_of(key));) {
        if (clock::now() >= until) throw timed_out(key, started);
        detail::back_off(backoff, last_poll, until);
      }
    }
  }

  bool check(const std::vector<std::string>& keys) override {
    for (const auto& key : keys) check_store_sizes(key, 0);
    return std::all_of(keys.begin(), keys.end(), [this](const auto& key) { return exists(path_of(key)); });
  }

 private:
  static constexpr std::chrono::microseconds first_poll{1000}, last_poll{50000};

  // One add at a time per key, across processes and hosts, by a lock file made with
  // open(O_CREAT | O_EXCL) rather than flock or fcntl locks: exclusive creation is
  // atomic on local file systems and on NFSv3 and later, Lustre and GPFS alike, while
  // flock is host-local or unsupported on some of them (Lustre without -o flock). The
  // price is a lock file left behind by a process that dies holding it; waiting for
  // one is bounded by the lock limit, and the error names the file to delete.
  class key_lock {
   public:
    key_lock(const file_store& store, const std::string& key, std::string path) : path_(std::move(path)) {
      const auto started = clock::now();
      const auto until = started + store.lock_limit_;
      for (auto backoff = std::chrono::microseconds(50);;) {
        const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) {
          ::close(fd);
          return;
        }
        if (errno != EEXIST) throw store.failed("creating the lock file " + path_, errno);
        if (clock::now() >= until)
          throw error(errc::timeout, "could not lock key '" + key + "' in the file store within " +
                                         std::to_string(store.lock_limit_.count()) + " ms: " + path_ +
                                         " is still there; if the rank that made it has died, delete it");
        detail::back_off(backoff, std::chrono::microseconds(5000), until);
      }
    }
    ~key_lock() { ::unlink(path_.c_str()); }
    key_lock(const key_lock&) = delete;
    key_lock& operator=(const key_lock&) = delete;

   private:
    std::string path_;
  };

  std::filesystem::path path_of(const std::string& key) const { return dir_ / detail::key_file_name(key); }

  error failed(const std::string& doing, int e) const {
    return error(errc::peer_lost,
                 "the file store at " + dir_.string() + ": " + doing + " failed: " + detail::errno_text(e));
  }

  error timed_out(const std::string& key, deadline started) const {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - started).count();
    return error(errc::timeout, "timed out after " + std::to_string(waited) + " ms waiting for key '" + key +
                                    "' in the file store at " + dir_.string());
  }

  bool exists(const std::filesystem::path& path) const {
    struct stat info {};
    if (::stat(path.c_str(), &info) == 0) return true;
    if (errno != ENOENT) throw failed("looking for " + path.string(), errno);
    return false;
  }

  // The file's contents, or nothing when there is no such file (yet).
  std::optional<std::string> read(const std::filesystem::path& path) const {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return std::nullopt;
      throw failed("opening " + path.string(), errno);
    }
    std::string contents;
    char buffer[65536];
    for (;;) {
      const ssize_t n = ::read(fd, buffer, sizeof buffer);
      if (n > 0) contents.append(buffer, static_cast<std::size_t>(n));
      if (n == 0) break;
      if (n < 0 && errno != EINTR) {
        const int e = errno;
        ::close(fd);
        throw failed("reading " + path.string(), e);
      }
    }
    ::close(fd);
    return contents;
  }

  void write_atomically(const std::filesystem::path& path, const std::string& value) const {
    // pid and a random number: unique among the processes of a host, and across hosts.
    thread_local std::mt19937_64 random{std::random_device{}()};
    std::string temporary;
    int fd = -1;
    do {
      temporary = path.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(random());
      fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    } while (fd < 0 && errno == EEXIST);
    if (fd < 0) throw failed("creating " + temporary, errno);
    for (std::size_t written = 0; written < value.size();) {
      const ssize_t n = ::write(fd, value.data() + written, value.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int e = errno;
        ::close(fd);
        ::unlink(temporary.c_str());
        throw failed("writing " + temporary, e);
      }
      written += static_cast<std::size_t>(n);
    }
    // A network file system may report a failed write only here.
    if (::close(fd) != 0 || ::rename(temporary.c_str(), path.c_str()) != 0) {
      const int e = errno;
      ::unlink(temporary.c_str());
      throw failed("storing " + path.string(), e);
    }
  }

  std::filesystem::path dir_;
  std::chrono::milliseconds lock_limit_;
};

}  // namespace collectives::bootstrap
