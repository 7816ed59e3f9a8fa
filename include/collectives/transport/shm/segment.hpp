// One POSIX shared-memory segment per group: a header, a line per rank, each rank's
// shrink proposal, and one single-producer single-consumer FIFO per ordered pair of
// ranks. Rank 0 creates it, every rank maps it, and each unlinks the name as soon as all have mapped it, so the
// memory lives only as long as some rank's mapping: a rank that crashes after start-up
// leaves nothing in /dev/shm. Every shared field is a naturally aligned integer used
// through std::atomic_ref, so the layout is plain bytes that all processes agree on.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "../../concepts/transport.hpp"
#include "../../error.hpp"

namespace collectives::shm_detail {

inline constexpr std::size_t line = 64;  // a cache line: fields written by different ranks never share one
inline constexpr std::uint64_t ready_magic = 0x34304d48534c4c43ull;  // "CLLSHM04"
inline constexpr std::size_t failure_text_bytes = 512;

template <class T>
std::atomic_ref<T> shared(T& field) { return std::atomic_ref<T>(field); }

struct alignas(line) segment_header {
  std::uint64_t magic;       // ready_magic once the creator has laid the segment out
  std::uint32_t size;        // ranks
  std::int32_t creator_pid;  // rank 0, so attaching ranks can tell a live segment from a stale one
  std::uint64_t slot_bytes, slots;
  std::uint32_t attached;    // ranks that have mapped it
  std::int32_t aborted_by;   // the rank that aborted the group, or -1
  // A shrink's outcome (shrink.hpp): its attempt in the high half, its decider + 1 in
  // the low half, whose proposal then names the ranks that go on. 0: none yet.
  std::uint64_t shrink_decision;
  // The group's first failure (engine.hpp): `failure_state` goes 0 -> 1 for the rank
  // that claims it, which writes the rest, then 1 -> 2. A rank that dies between the
  // two leaves it at 1, which readers take for none.
  std::uint32_t failure_state;
  std::int32_t failure_rank;     // the rank it names
  std::int32_t failure_teller;   // the rank that wrote it
  std::uint32_t failure_gone;    // 1: failure_rank is lost for good
  char failure_text[failure_text_bytes];  // NUL-terminated
};

enum rank_state : std::uint32_t { absent = 0, attached = 1, departed = 2 };
enum one_copy_state : std::uint32_t { reads_by_address = 1, by_fifo_only = 2 };

struct alignas(line) rank_record {  // written by its rank only
  std::int32_t pid;
  std::uint32_t state;             // rank_state
  std::uint64_t pid_namespace;     // inode of /proc/self/ns/pid: pids mean something only within one
  std::uint32_t shrink_attempt;    // the shrink this rank has come to (1, 2, ...), or 0
  std::uint64_t probe_address;     // a word peers read to learn whether they may read this rank's memory (one_copy.hpp)
};

struct alignas(line) doorbell {  // rings: bumped by whoever wakes this rank; sleeping: set by the rank
  std::uint32_t rings;
  std::uint32_t sleeping;
};

// A FIFO's control lines; its slots follow.
struct alignas(line) channel_control {
  std::uint64_t tail;  // slots the consumer has finished with
  std::uint32_t one_copy;  // set by the consumer: reads_by_address, or by_fifo_only; 0 until it knows
  alignas(line) std::uint32_t abandoned;  // set by the producer when it gave up halfway through a message
};

struct alignas(line) slot_header {
  std::uint64_t sequence;  // n + 1 once the n-th fragment of this FIFO is in the slot
  std::uint64_t call;
  std::uint32_t step, fragment_bytes;
  std::uint64_t message_bytes, offset;
  std::uint64_t source;  // a message sent by address: where it lies in the producer's memory; 0: in the slot
};

// Where everything is, from the rank count and the FIFO geometry alone.
struct layout {
  int size = 1;
  std::size_t slot_bytes = 0, slots = 0;

  std::size_t slot_stride() const { return sizeof(slot_header) + slot_bytes; }
  std::size_t channel_bytes() const { return sizeof(channel_control) + slots * slot_stride(); }
  std::size_t ranks_at() const { return sizeof(segment_header); }
  std::size_t doorbells_at() const { return ranks_at() + std::size_t(size) * sizeof(rank_record); }
  // Each rank's shrink proposal: a bit per rank, in whole lines.
  std::size_t proposal_words() const { return (std::size_t(size) + 63) / 64; }
  std::size_t proposal_stride() const { return (proposal_words() * 8 + line - 1) / line * line; }
  std::size_t proposals_at() const { return doorbells_at() + std::size_t(size) * sizeof(doorbell); }
  std::size_t channels_at() const { return proposals_at() + std::size_t(size) * proposal_stride(); }
  std::size_t total_bytes() const { return channels_at() + std::size_t(size) * std::size_t(size - 1) * channel_bytes(); }
  // The FIFO from `from` to `to`; no rank has one to itself.
  std::size_t channel_at(int from, int to) const {
    const int index = from * (size - 1) + (to < from ? to : to - 1);
    return channels_at() + std::size_t(index) * channel_bytes();
  }
};

inline std::string errno_text(int e) { return std::strerror(e); }

inline bool process_alive(int pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

inline std::uint64_t pid_namespace_id() {
  struct stat s {};
  return ::stat("/proc/self/ns/pid", &s) == 0 ? std::uint64_t(s.st_ino) : 0;
}

// A mapping of the group's segment; unmaps when destroyed.
class segment {
 public:
  segment() = default;
  segment(segment&& o) noexcept
      : base_(std::exchange(o.base_, nullptr)), mapped_bytes_(o.mapped_bytes_), shape_(o.shape_), name_(std::move(o.name_)) {}
  segment& operator=(segment&& o) noexcept {
    std::swap(base_, o.base_);
    std::swap(mapped_bytes_, o.mapped_bytes_);
    std::swap(shape_, o.shape_);
    std::swap(name_, o.name_);
    return *this;
  }
  ~segment() {
    if (base_ != nullptr) ::munmap(base_, mapped_bytes_);
  }

  // Rank 0: creates the segment, replacing one that a dead job left behind.
  static segment create(const std::string& name, const layout& shape, deadline until) {
    // A live creator lays a segment out within microseconds; one still unreadable after
    // this long was left by a creator that died halfway.
    constexpr auto unreadable_for_good = std::chrono::milliseconds(500);
    deadline unreadable_since{};
    for (;;) {
      const int fd = ::shm_open(slashed(name).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd >= 0) return lay_out(fd, name, shape);
      if (errno != EEXIST) throw error(errc::invalid_config, "shm: cannot create /dev/shm/" + name + ": " + errno_text(errno));
      const int owner = creator_of(name);
      if (owner == 0 && unreadable_since == deadline{}) unreadable_since = clock::now();
      if (owner == 0 ? clock::now() - unreadable_since >= unreadable_for_good : !process_alive(owner)) {
        ::shm_unlink(slashed(name).c_str());  // a dead job's leftover
        unreadable_since = {};
      } else if (owner != 0 && clock::now() >= until) {
        throw error(errc::invalid_config, "shm: /dev/shm/" + name + " belongs to a running job (pid " + std::to_string(owner) +
                                              "); do two jobs share COLLECTIVES_JOB_TOKEN and launch?");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // A shrunk group's segment, whose name no earlier job used. Any member may die at
  // any moment, the one laying it out too, so each member that finds none lays out
  // one of its own under a private name and publishes it with link(2), which never
  // replaces: the first published is the group's, complete before anyone sees it,
  // whoever dies afterwards. (Linux keeps POSIX shared memory in /dev/shm.)
  static segment create_or_attach(const std::string& name, const layout& shape) {
    if (segment s = attach(name, shape, true)) return s;
    const std::string mine = name + "." + std::to_string(::getpid());
    ::shm_unlink(slashed(mine).c_str());  // a leftover of this pid's own earlier try
    const int fd = ::shm_open(slashed(mine).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) throw error(errc::invalid_config, "shm: cannot create /dev/shm/" + mine + ": " + errno_text(errno));
    segment s = lay_out(fd, mine, shape);
    const bool published = ::link(("/dev/shm/" + mine).c_str(), ("/dev/shm/" + name).c_str()) == 0;
    const int e = errno;
    ::shm_unlink(slashed(mine).c_str());
    if (published) {
      s.name_ = name;
      return s;
    }
    if (e != EEXIST) throw error(errc::invalid_config, "shm: cannot publish /dev/shm/" + name + ": " + errno_text(e));
    return attach(name, shape, true);
  }

  // Other ranks: maps the segment once rank 0 has laid it out; empty if there is none
  // yet, or only a dead job's (call again until the deadline).
  static segment attach(const std::string& name, const layout& shape, bool creator_may_be_gone = false) {
    const int fd = ::shm_open(slashed(name).c_str(), O_RDWR, 0);
    if (fd < 0) return {};
    struct stat st {};
    segment s;
    if (::fstat(fd, &st) == 0 && std::size_t(st.st_size) >= sizeof(segment_header)) {
      if (std::size_t(st.st_size) != shape.total_bytes()) {
        // Laid out (or being laid out) for another geometry: tell apart a dead job's
        // leftover from ranks started with different settings by whether rank 0 lives.
        s = map(fd, name, layout{1, 0, 0}, sizeof(segment_header));
        const segment_header& h = s.header();
        if (shared(h.magic).load(std::memory_order_acquire) == ready_magic && process_alive(h.creator_pid))
          throw error(errc::invalid_config, "shm: rank 0 made its segment for " + std::to_string(h.size) + " ranks with " +
                                                std::to_string(h.slots) + " slots of " + std::to_string(h.slot_bytes) +
                                                " bytes; this rank expects " + std::to_string(shape.size) + " ranks with " +
                                                std::to_string(shape.slots) + " of " + std::to_string(shape.slot_bytes) +
                                                " (do COLLECTIVES_SHM_* and WORLD_SIZE agree on every rank?)");
        return {};
      }
      s = map(fd, name, shape, shape.total_bytes());
      if (shared(s.header().magic).load(std::memory_order_acquire) != ready_magic ||
          (!creator_may_be_gone && !process_alive(s.header().creator_pid)))
        return {};
      return s;
    }
    ::close(fd);
    return {};
  }

  explicit operator bool() const { return base_ != nullptr; }
  const std::string& name() const { return name_; }
  const layout& shape() const { return shape_; }

  segment_header& header() const { return *at<segment_header>(0); }
  rank_record& rank(int r) const { return at<rank_record>(shape_.ranks_at())[r]; }
  doorbell& bell(int r) const { return at<doorbell>(shape_.doorbells_at())[r]; }
  std::uint64_t* proposal(int r) const { return at<std::uint64_t>(shape_.proposals_at() + std::size_t(r) * shape_.proposal_stride()); }
  channel_control& control(int from, int to) const { return *at<channel_control>(shape_.channel_at(from, to)); }
  slot_header& slot(int from, int to, std::uint64_t index) const {
    return *at<slot_header>(shape_.channel_at(from, to) + sizeof(channel_control) + std::size_t(index) * shape_.slot_stride());
  }

  // Removes the name; mappings stay valid. Harmless when someone already did.
  void unlink_name() const { ::shm_unlink(slashed(name_).c_str()); }

 private:
  static std::string slashed(const std::string& name) { return "/" + name; }

  template <class T>
  T* at(std::size_t offset) const { return reinterpret_cast<T*>(static_cast<std::byte*>(base_) + offset); }

  static segment map(int fd, const std::string& name, const layout& shape, std::size_t bytes) {
    void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int e = errno;
    ::close(fd);
    if (base == MAP_FAILED) throw error(errc::invalid_config, "shm: cannot map /dev/shm/" + name + ": " + errno_text(e));
    segment s;
    s.base_ = base;
    s.mapped_bytes_ = bytes;
    s.shape_ = shape;
    s.name_ = name;
    return s;
  }

  // Reserves every page now (tmpfs otherwise hands out pages on first touch, and a
  // full /dev/shm would then kill the rank with SIGBUS mid-collective).
  static segment lay_out(int fd, const std::string& name, const layout& shape) {
    if (const int e = ::posix_fallocate(fd, 0, off_t(shape.total_bytes())); e != 0) {
      ::close(fd);
      ::shm_unlink(slashed(name).c_str());
      throw error(errc::invalid_config, "shm: /dev/shm has no room for the group's " +
                                            std::to_string(shape.total_bytes() >> 20) + " MiB segment (" + errno_text(e) +
                                            "); free some, enlarge it (docker: --shm-size) or lower COLLECTIVES_SHM_SLOTS");
    }
    segment s = map(fd, name, shape, shape.total_bytes());
    segment_header& h = s.header();
    h.size = std::uint32_t(shape.size);
    h.creator_pid = ::getpid();
    h.slot_bytes = shape.slot_bytes;
    h.slots = shape.slots;
    shared(h.aborted_by).store(-1, std::memory_order_relaxed);
    shared(h.magic).store(ready_magic, std::memory_order_release);
    return s;
  }

  // The pid of the rank 0 that made an existing segment; 0 while it is unreadable.
  static int creator_of(const std::string& name) {
    const int fd = ::shm_open(slashed(name).c_str(), O_RDWR, 0);
    if (fd < 0) return 0;
    struct stat st {};
    if (::fstat(fd, &st) != 0 || std::size_t(st.st_size) < sizeof(segment_header)) {
      ::close(fd);
      return 0;
    }
    segment s = map(fd, name, layout{1, 0, 0}, sizeof(segment_header));
    return shared(s.header().magic).load(std::memory_order_acquire) == ready_magic ? s.header().creator_pid : 0;
  }

  void* base_ = nullptr;
  std::size_t mapped_bytes_ = 0;
  layout shape_{};
  std::string name_;
};

}  // namespace collectives::shm_detail
