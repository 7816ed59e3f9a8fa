// A device runtime for device_ipc made of host memory, for machines without a GPU:
// "device memory" is ordinary memory, an exported inbox is a memfd that peers map
// through /proc/<pid>/fd, copies are memcpy, and a marker is reached on its second
// look, so the protocol's polling paths run too. With it the transport's protocol
// (chunking through slots, credits, early chunks, empty messages, sizes that don't
// match) runs on real processes; what it cannot check is CUDA itself, which the GPU
// tests do (label gpu).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <new>
#include <string>

#include <collectives/concepts/device_runtime.hpp>
#include <collectives/error.hpp>
#include <collectives/ops/host_reduce.hpp>

namespace testing {

// Buffers in this space are host memory that only the device path touches.
struct standin_device_memory {};

}  // namespace testing

template <>
struct collectives::memory_ops<testing::standin_device_memory> : collectives::memory_ops<collectives::host_memory> {};

namespace testing {

class host_runtime {
 public:
  using memory_space = standin_device_memory;
  struct handle {
    pid_t pid;
    int fd;
    std::size_t bytes;
  };
  struct marker {
    int looks_left = 0;
  };

  static host_runtime for_local_rank(int) { return {}; }

  host_runtime() = default;
  host_runtime(host_runtime&& o) noexcept : exported_(std::exchange(o.exported_, {})), mapped_(std::exchange(o.mapped_, {})) {}
  host_runtime& operator=(host_runtime&&) = delete;
  ~host_runtime() {
    for (auto& [p, fd] : exported_) ::close(fd);
  }

  void* allocate_exported(std::size_t bytes, handle& out) {
    const int fd = ::memfd_create("collectives-standin-inbox", MFD_CLOEXEC);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) fail("memfd_create");
    void* p = map(fd, bytes);
    exported_[p] = fd;
    mapped_[p] = bytes;
    out = {::getpid(), fd, bytes};
    return p;
  }
  void free_exported(void* p) noexcept { close(p); }

  void* open(const handle& h) {
    const std::string path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) fail("open " + path);
    void* p = map(fd, h.bytes);
    ::close(fd);
    mapped_[p] = h.bytes;
    return p;
  }
  void close(void* p) noexcept {
    if (auto m = mapped_.find(p); m != mapped_.end()) {
      ::munmap(p, m->second);
      mapped_.erase(m);
    }
    if (auto e = exported_.find(p); e != exported_.end()) {
      ::close(e->second);
      exported_.erase(e);
    }
  }

  void* allocate(std::size_t bytes) { return ::operator new(bytes); }
  void free(void* p) noexcept { ::operator delete(p); }
  void copy(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }

  marker mark() { return {1}; }
  bool reached(marker& m) { return m.looks_left-- <= 0; }
  void forget(marker&) noexcept {}
  void synchronize() noexcept {}

  collectives::memory_ops<standin_device_memory> memory_operations() const { return {}; }
  std::string describe() const { return "host memory standing in for a device"; }

 private:
  [[noreturn]] static void fail(const std::string& what) {
    throw collectives::error(collectives::errc::device_error, what + ": " + std::strerror(errno));
  }
  static void* map(int fd, std::size_t bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) fail("mmap");
    return p;
  }

  std::map<void*, int> exported_;
  std::map<void*, std::size_t> mapped_;
};

}  // namespace testing

static_assert(collectives::check_device_runtime<testing::host_runtime>());
