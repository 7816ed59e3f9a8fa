// Tells the registration cache when memory it registered goes away: unmapped
// (free() of a large block, munmap), dropped (madvise MADV_DONTNEED or MADV_FREE, which
// allocators use to trim) or moved (mremap). Memory that comes back at the same address
// is then other pages, and a registration made for the old ones must not be used.
//
// The kernel reports these through a userfaultfd on which the cache's regions are
// registered in write-protect mode, a mode that changes nothing about how the pages
// fault as long as no page is ever write-protected (none is). The kernel holds the
// thread that unmaps until the event is read, so one thread per process reads them,
// takes no lock and allocates nothing: it writes each range into a ring that every
// cache reads at its next lookup. The unmapping thread runs on as soon as the read
// returns, before the range is in the ring; so the reader is marked busy from before
// each read until what it read is recorded, and events() waits that short while out. Where userfaultfd is not allowed (a kernel without
// it, or vm.unprivileged_userfaultfd=0 before Linux 5.11), watch() says no and the
// cache registers each buffer for its transfer only.
#pragma once

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>

namespace collectives::rdma_detail {

struct address_range {
  std::uintptr_t begin = 0, end = 0;
  bool overlaps(std::uintptr_t b, std::uintptr_t e) const { return begin < e && b < end; }
};

class memory_monitor {
 public:
  static constexpr std::size_t ring_size = 1024;

  // The process's monitor (a new one in a forked child), or null where the kernel
  // does not allow one. Never destroyed: its thread reads until the process exits.
  static memory_monitor* get() {
    static std::mutex made;
    static memory_monitor* current = nullptr;
    std::lock_guard lock(made);
    if (current && current->pid_ == ::getpid()) return current->fd_ >= 0 ? current : nullptr;
    current = new memory_monitor();  // the parent's, in a forked child, is left as it is
    return current->fd_ >= 0 ? current : nullptr;
  }

  // Reports on [begin, end) from now on; false if the kernel refuses (memory it can't
  // watch, such as a file mapping).
  bool watch(std::uintptr_t begin, std::uintptr_t end) {
    uffdio_register reg{};
    reg.range.start = begin;
    reg.range.len = end - begin;
    reg.mode = UFFDIO_REGISTER_MODE_WP;
    return ::ioctl(fd_, UFFDIO_REGISTER, &reg) == 0;
  }

  // Events so far, every unmapping that has returned to its caller among them; the ring
  // holds the last ring_size of them.
  std::uint64_t events() const {
    while (reading_.load()) std::this_thread::yield();  // a read whose range is not yet recorded
    return written_.load(std::memory_order_acquire);
  }

  // Event `n`, if the ring still holds it (false: the reader fell too far behind).
  bool event(std::uint64_t n, address_range& out) const {
    if (written() - n >= ring_size) return false;
    const auto& at = ring_[n % ring_size];
    out = {at.begin.load(std::memory_order_relaxed), at.end.load(std::memory_order_relaxed)};
    std::atomic_thread_fence(std::memory_order_acquire);
    return written() - n < ring_size;  // not overwritten while it was read
  }

 private:
  memory_monitor() : pid_(::getpid()) {
    fd_ = open_userfaultfd();
    if (fd_ < 0) return;
    std::thread([this] { read_events(); }).detach();
  }

  static int open_userfaultfd() {
#if defined(UFFD_USER_MODE_ONLY)
    int fd = int(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
    if (fd < 0) fd = int(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
#else
    int fd = int(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
#endif
    if (fd < 0) return -1;
    uffdio_api api{};
    api.api = UFFD_API;
    api.features = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP;
    if (::ioctl(fd, UFFDIO_API, &api) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }

  void read_events() {
    pollfd p{fd_, POLLIN, 0};
    for (;;) {
      if (::poll(&p, 1, -1) < 0) continue;
      reading_.store(true);  // before the read that lets an unmapping return
      uffd_msg msg{};
      while (::read(fd_, &msg, sizeof msg) == ssize_t(sizeof msg)) {
        switch (msg.event) {
          case UFFD_EVENT_UNMAP:
          case UFFD_EVENT_REMOVE: record(msg.arg.remove.start, msg.arg.remove.end); break;
          case UFFD_EVENT_REMAP: record(msg.arg.remap.from, msg.arg.remap.from + msg.arg.remap.len); break;
          default: break;
        }
      }
      reading_.store(false);  // after the last range read is in the ring
    }
  }

  std::uint64_t written() const { return written_.load(std::memory_order_acquire); }

  void record(std::uint64_t begin, std::uint64_t end) {
    const std::uint64_t n = written_.load(std::memory_order_relaxed);
    auto& at = ring_[n % ring_size];
    at.begin.store(std::uintptr_t(begin), std::memory_order_relaxed);
    at.end.store(std::uintptr_t(end), std::memory_order_relaxed);
    written_.store(n + 1, std::memory_order_release);
  }

  struct event_slot {
    std::atomic<std::uintptr_t> begin{0}, end{0};
  };
  pid_t pid_;
  int fd_ = -1;
  std::array<event_slot, ring_size> ring_{};
  std::atomic<std::uint64_t> written_{0};
  std::atomic<bool> reading_{false};
};

}  // namespace collectives::rdma_detail
