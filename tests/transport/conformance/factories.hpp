// One factory per transport for the conformance suite. A factory names the transport,
// makes a group of its ranks (`group(size)`, then `join(rank)` on each rank's thread,
// or in a forked process where the transport's traits allow), and posts the suite's
// messages (device_ipc's through its device path). Adding a transport to the suite is
// adding a factory here and its type to the list in conformance_test.cpp.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <collectives/bootstrap/file_store.hpp>
#include <collectives/transport/device_ipc.hpp>
#include <collectives/transport/faulty.hpp>
#include <collectives/transport/inproc.hpp>
#include <collectives/transport/shm.hpp>
#include <collectives/transport/tcp.hpp>

#include "../../benign_faults.hpp"
#include "../../device/host_runtime.hpp"

namespace conformance {

namespace coll = collectives;
using namespace std::chrono_literals;

// Long enough for a loaded 2-core machine, short enough that a failure can't hang CI.
inline constexpr auto startup_limit = 10s;

// A name no other group, test or test process uses.
inline std::string fresh_name(const char* what) {
  static std::atomic<int> made{0};
  return std::string("collectives-conformance-") + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(made++);
}

// The plain post_send / post_recv of a host transport.
template <class T>
struct host_messages {
  using transport = T;
  using request = typename T::request;
  static request send(T& t, int peer, coll::message_tag tag, std::span<const std::byte> out) { return t.post_send(peer, tag, out); }
  static request recv(T& t, int peer, coll::message_tag tag, std::span<std::byte> in) { return t.post_recv(peer, tag, in); }
};

struct inproc_factory : host_messages<coll::inproc> {
  static constexpr const char* name = "inproc";
  class group {
   public:
    explicit group(int size) : group_(size) {}
    coll::inproc join(int rank) { return group_.transport(rank); }

   private:
    coll::inproc_group group_;
  };
};

// Small slots (1000 bytes, rounded up to 1024) and two of them: a message longer than
// 2 KiB waits for its receiver, and no element of 12 or 24 bytes fits a slot evenly.
inline coll::shm_options small_shm_fifos() {
  coll::shm_options o;
  o.slot_bytes = 1000;
  o.slots = 2;
  o.startup_timeout = startup_limit;
  return o;
}

struct shm_factory : host_messages<coll::shm> {
  static constexpr const char* name = "shm";
  class group {
   public:
    explicit group(int size) : size_(size) {}
    coll::shm join(int rank) { return coll::shm(rank, size_, name_, small_shm_fifos()); }

   private:
    int size_;
    std::string name_ = fresh_name("shm");
  };
};

// A group whose ranks meet through a file store in a directory of their own, which a
// forked rank shares as well as a thread; `make(rank, size, store)` joins one rank.
template <class Transport, class Make>
class file_store_group {
 public:
  file_store_group(int size, const char* what) : size_(size), dir_(std::filesystem::temp_directory_path() / fresh_name(what)) {}
  file_store_group(const file_store_group&) = delete;
  file_store_group& operator=(const file_store_group&) = delete;
  ~file_store_group() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  Transport join(int rank) {
    coll::bootstrap::file_store store(dir_);
    return Make{}(rank, size_, store);
  }

 private:
  int size_;
  std::filesystem::path dir_;
};

struct tcp_factory : host_messages<coll::tcp> {
  static constexpr const char* name = "tcp";
  struct make {
    coll::tcp operator()(int rank, int size, coll::bootstrap::file_store& store) const {
      coll::tcp_options o;
      o.interface = "127.0.0.1";
      o.startup_timeout = startup_limit;
      return coll::tcp(rank, size, store, coll::auth::job_token("conformance-token"), o);
    }
  };
  struct group : file_store_group<coll::tcp, make> {
    explicit group(int size) : file_store_group(size, "tcp") {}
  };
};

// device_ipc on host memory standing in for the device; the suite's messages take the
// device path (inbox slots of 4 KiB, two per sender, so large messages wait for credits).
struct device_standin_factory {
  static constexpr const char* name = "device_ipc<host_runtime>";
  using transport = coll::device_ipc<testing::host_runtime>;
  using request = transport::request;
  using space = transport::memory_space;
  static request send(transport& t, int peer, coll::message_tag tag, std::span<const std::byte> out) {
    return t.post_send(peer, tag, out, space{});
  }
  static request recv(transport& t, int peer, coll::message_tag tag, std::span<std::byte> in) {
    return t.post_recv(peer, tag, in, space{});
  }
  class group {
   public:
    explicit group(int size) : size_(size) {}
    transport join(int rank) {
      coll::shm host(rank, size_, name_, small_shm_fifos());
      return transport(std::move(host), testing::host_runtime{}, {.slot_bytes = 4096, .slots = 2},
                       coll::clock::now() + startup_limit);
    }

   private:
    int size_;
    std::string name_ = fresh_name("device");
  };
};

// A transport behind faulty<T> with benign faults (benign_faults.hpp). It must keep
// every promise its transport declares. The faults come from a seed drawn once per run
// and printed; COLLECTIVES_FAULTY_SEED=N replays them.
inline coll::fault_plan benign_faults() {
  static const std::uint64_t seed = [] {
    const std::uint64_t s = testing::faulty_seed();
    std::printf("conformance: faulty<T> draws its faults from seed %llu (COLLECTIVES_FAULTY_SEED=%llu replays them)\n",
                static_cast<unsigned long long>(s), static_cast<unsigned long long>(s));
    std::fflush(stdout);
    return s;
  }();
  static std::atomic<std::uint64_t> joined{0};
  return testing::benign_faults(seed + joined++);
}

template <class Inner>
struct faulty_messages : host_messages<coll::faulty<typename Inner::transport>> {
  using transport = coll::faulty<typename Inner::transport>;
  class group {
   public:
    explicit group(int size) : inner_(size) {}
    transport join(int rank) { return transport(inner_.join(rank), benign_faults()); }

   private:
    typename Inner::group inner_;
  };
};
struct faulty_inproc_factory : faulty_messages<inproc_factory> {
  static constexpr const char* name = "faulty<inproc>";
};
struct faulty_shm_factory : faulty_messages<shm_factory> {
  static constexpr const char* name = "faulty<shm>";
};

}  // namespace conformance
