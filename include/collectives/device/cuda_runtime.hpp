// The CUDA runtime as device_ipc's device runtime: exported inboxes through
// cudaIpcGetMemHandle / cudaIpcOpenMemHandle, copies with cudaMemcpyAsync (copy
// engines; over NVLink or PCIe between devices, within the device when ranks share
// one), and markers that are pooled events. Everything runs on one stream, the
// caller's (set_stream) or one of its own, so a call's copies, reductions and
// messages stay in order without host waits between them.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <utility>
#include <vector>

#include "../bootstrap/environment.hpp"
#include "../concepts/device_runtime.hpp"
#include "../error.hpp"
#include "../memory_space.hpp"
#include "../settings.hpp"
#include "cuda_check.hpp"

namespace collectives::device {

class cuda_runtime {
 public:
  using memory_space = device_memory;
  using handle = cudaIpcMemHandle_t;
  struct marker {
    cudaEvent_t event = nullptr;
  };

  // Makes `device` current on the calling thread and creates a stream of its own.
  explicit cuda_runtime(int device) : device_(device) {
    check(cudaSetDevice(device), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&own_stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    stream_ = own_stream_;
  }

  // Local rank i of a host takes device i modulo the device count, so ranks may
  // outnumber devices (several processes then share one). COLLECTIVES_CUDA_DEVICE
  // names the device instead.
  static cuda_runtime for_local_rank(int local_rank) {
    const int count = device_count();
    if (count == 0) throw error(errc::device_error, "cuda_ipc: this process sees no CUDA device");
    if (const auto chosen = settings::whole_number("COLLECTIVES_CUDA_DEVICE", count - 1))
      return cuda_runtime(static_cast<int>(*chosen));
    return cuda_runtime(local_rank % count);
  }

  cuda_runtime(cuda_runtime&& o) noexcept
      : device_(o.device_), stream_(std::exchange(o.stream_, nullptr)), own_stream_(std::exchange(o.own_stream_, nullptr)),
        spare_(std::move(o.spare_)) {}
  cuda_runtime& operator=(cuda_runtime&&) = delete;
  cuda_runtime(const cuda_runtime&) = delete;
  ~cuda_runtime() {
    for (cudaEvent_t e : spare_) cudaEventDestroy(e);
    if (own_stream_) cudaStreamDestroy(own_stream_);
  }

  int device() const noexcept { return device_; }
  cudaStream_t stream() const noexcept { return stream_; }
  // Collectives on device buffers run on `s` from the next call on: ordered after the
  // work enqueued on it before the call.
  void set_stream(cudaStream_t s) noexcept { stream_ = s; }

  void* allocate_exported(std::size_t bytes, handle& out) {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc (the device inbox)");
    if (cudaError_t e = cudaIpcGetMemHandle(&out, p); e != cudaSuccess) {
      cudaFree(p);
      check(e, "cudaIpcGetMemHandle");
    }
    return p;
  }
  void free_exported(void* p) noexcept { cudaFree(p); }

  void* open(const handle& h) {
    void* p = nullptr;
    check(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle (a peer's inbox)");
    return p;
  }
  void close(void* p) noexcept { cudaIpcCloseMemHandle(p); }

  void* allocate(std::size_t bytes) {
    void* p = nullptr;
    check(cudaMallocAsync(&p, bytes, stream_), "cudaMallocAsync");
    return p;
  }
  void free(void* p) noexcept { cudaFreeAsync(p, stream_); }

  void copy(void* dst, const void* src, std::size_t bytes) {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "cudaMemcpyAsync");
  }

  marker mark() {
    marker m{};
    if (spare_.empty()) {
      check(cudaEventCreateWithFlags(&m.event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    } else {
      m.event = spare_.back();
      spare_.pop_back();
    }
    if (cudaError_t e = cudaEventRecord(m.event, stream_); e != cudaSuccess) {
      forget(m);
      check(e, "cudaEventRecord");
    }
    return m;
  }
  bool reached(marker& m) {
    if (m.event == nullptr) return true;
    const cudaError_t e = cudaEventQuery(m.event);
    if (e == cudaErrorNotReady) return false;
    check(e, "cudaEventQuery (a device copy)");
    return true;
  }
  void forget(marker& m) noexcept {
    if (m.event) spare_.push_back(std::exchange(m.event, nullptr));
  }

  void synchronize() noexcept { cudaStreamSynchronize(stream_); }

  // The local steps, on the same stream; defined in device/memory_ops.cuh (nvcc).
  // Asked for at the start of every device call, so it makes this rank's device the
  // calling thread's current one: a call may come from any thread.
  template <class Space = device_memory>
  memory_ops<Space> memory_operations() const {
    check(cudaSetDevice(device_), "cudaSetDevice");
    return memory_ops<Space>{stream_};
  }

  std::string describe() const {
    cudaDeviceProp prop{};
    const bool known = cudaGetDeviceProperties(&prop, device_) == cudaSuccess;
    return "CUDA device " + std::to_string(device_) + (known ? std::string(" (") + prop.name + ")" : std::string());
  }

 private:
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaStream_t own_stream_ = nullptr;
  std::vector<cudaEvent_t> spare_;  // recorded events are reused: creating one costs microseconds
};

}  // namespace collectives::device

static_assert(collectives::check_device_runtime<collectives::device::cuda_runtime>());
