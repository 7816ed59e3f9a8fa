// expect: a device runtime must provide `marker mark\(\)`
#include <collectives/ops/host_reduce.hpp>
#include <collectives/transport/device_ipc.hpp>

#include <cstddef>
#include <string>

// Everything device_ipc needs but a marker to wait on.
struct runtime_without_mark {
  using memory_space = collectives::host_memory;
  struct handle {
    int id;
  };
  struct marker {};
  static runtime_without_mark for_local_rank(int) { return {}; }
  void* allocate_exported(std::size_t, handle&) { return nullptr; }
  void free_exported(void*) noexcept {}
  void* open(const handle&) { return nullptr; }
  void close(void*) noexcept {}
  void* allocate(std::size_t) { return nullptr; }
  void free(void*) noexcept {}
  void copy(void*, const void*, std::size_t) {}
  bool reached(marker&) { return true; }
  void forget(marker&) noexcept {}
  void synchronize() noexcept {}
  collectives::memory_ops<collectives::host_memory> memory_operations() const { return {}; }
  std::string describe() const { return "no marker"; }
};

collectives::device_ipc<runtime_without_mark>* p = nullptr;
void f() { (void)p->rank(); }
