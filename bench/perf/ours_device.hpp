// This library's side of the perf programs on device buffers: a harness backend over
// communicator<cuda_ipc> whose calls run on device_spans. The harness makes and checks
// the data on the host as for the host backend; upload and download copy it to and
// from this backend's device buffers outside the timed loop. Plain C++: the device
// reductions are made by nvcc in device_reductions.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <collectives/collectives.hpp>
#include <collectives/device/memory_ops.hpp>  // the kernels: device_reductions.cu
#include <collectives/transport/cuda_ipc.hpp>

#include "absmax_on_device.hpp"
#include "harness.hpp"
#include "library_calls.hpp"

namespace perf {

using device_communicator = coll::communicator<coll::cuda_ipc>;

// Device memory that grows to the largest size asked of it, so a run allocates once
// per new largest size, never inside the timed loop.
class device_buffer {
 public:
  device_buffer() = default;
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { cudaFree(data_); }

  void* reserve(std::size_t bytes) {
    if (bytes > capacity_) {
      cudaFree(std::exchange(data_, nullptr));
      capacity_ = 0;
      coll::device::check(cudaMalloc(&data_, bytes), "cudaMalloc (perf buffer)");
      capacity_ = bytes;
    }
    return data_;
  }
  void* data() const noexcept { return data_; }

 private:
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
};

class device_backend : public backend_base<device_communicator> {
 public:
  using backend_base::backend_base;

  run_description describe() const {
    return describe_as("cuda_ipc", comm_.transport().describe() + "; buffers in device memory");
  }

  // The host buffers' contents into the device ones, before the calls that use them.
  template <class T>
  void upload(std::span<const T> input, std::span<const T> output) {
    copy(input_.reserve(input.size_bytes()), input.data(), input.size_bytes());
    copy(output_.reserve(output.size_bytes()), output.data(), output.size_bytes());
    input_bytes_ = input.size_bytes(), output_bytes_ = output.size_bytes();
  }
  // The device output back into the host one.
  template <class T>
  void download(std::span<T> output) {
    copy(output.data(), output_.data(), output.size_bytes());
  }

  // The host spans give the sizes; the calls run on the device buffers uploaded last.
  template <collective C, class T, op_kind K>
  void call(std::span<const T> input, std::span<T> output, int root) {
    call_library<C, K, absmax_on_device>(algorithm_, comm_, on_device(input_, input), on_device(output_, output), root);
  }

  template <collective C, class T, op_kind K>
  void call_in_place(std::span<T> data, int root) {
    call_library_in_place<C, K, absmax_on_device>(algorithm_, comm_, on_device(output_, data), root);
  }

 private:
  // Bytes between host and device on the communicator's stream, finished on return.
  void copy(void* to, const void* from, std::size_t bytes) {
    if (bytes == 0) return;
    const cudaStream_t s = comm_.transport().runtime().stream();
    coll::device::check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, s), "cudaMemcpyAsync (perf data)");
    coll::device::check(cudaStreamSynchronize(s), "cudaStreamSynchronize (perf data)");
  }

  // The device twin of a host span: the buffer's first host.size() elements.
  template <class T>
  coll::device_span<T> on_device(const device_buffer& b, std::span<T> host) const {
    if (host.size_bytes() > (&b == &input_ ? input_bytes_ : output_bytes_))
      throw std::logic_error("perf: a device call on more elements than were uploaded");
    return {static_cast<T*>(b.data()), host.size()};
  }

  device_buffer input_, output_;
  std::size_t input_bytes_ = 0, output_bytes_ = 0;
};

// all_reduce, reduce and reduce_scatter: compiled apart (reductions_cuda.cpp), since
// the types x ops instantiations are most of the build.
int run_reduction(device_backend& backend, const options& o);

}  // namespace perf
