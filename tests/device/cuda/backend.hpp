// The device tests on CUDA: device buffers from cudaMalloc, moved by cuda_ipc
// (label gpu; they skip, with exit status 77, where there is no device).
#pragma once

#include <span>
#include <vector>

#include <collectives/device/memory_ops.hpp>  // the kernels: reductions.cu
#include <collectives/transport/cuda_ipc.hpp>

namespace testing {

using device_runtime = collectives::device::cuda_runtime;
using device_space = collectives::device_memory;

template <class T>
class device_vector {
 public:
  explicit device_vector(std::size_t n) : n_(n) {
    collectives::device::check(cudaMalloc(reinterpret_cast<void**>(&data_), (n ? n : 1) * sizeof(T)), "cudaMalloc");
  }
  // From pageable memory cudaMemcpy may return before the bytes land, and the calls
  // run on a stream that does not wait for the default one: the input must be ready
  // when a call starts (docs/cuda.md), so wait for it here.
  explicit device_vector(std::span<const T> from) : device_vector(from.size()) {
    collectives::device::check(cudaMemcpy(data_, from.data(), from.size_bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
    collectives::device::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  device_vector(const device_vector&) = delete;
  device_vector& operator=(const device_vector&) = delete;
  ~device_vector() { cudaFree(data_); }

  collectives::device_span<T> span() { return {data_, n_}; }
  std::vector<T> to_host() const {
    std::vector<T> out(n_);
    collectives::device::check(cudaMemcpy(out.data(), data_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return out;
  }

 private:
  T* data_ = nullptr;
  std::size_t n_ = 0;
};

inline bool have_device() { return collectives::device::device_count() > 0; }

}  // namespace testing
