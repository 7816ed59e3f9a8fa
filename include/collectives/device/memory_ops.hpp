// memory_ops for device memory: the executor's local steps (copy, combine, finalize,
// scratch) on device buffers, enqueued on the transport's stream, and the wait that
// ends a call once that stream has done them. Any C++ compiler, with the CUDA headers:
// the reductions are kernels, declared here (reductions.hpp) and made in a .cu file
// (device/memory_ops.cuh makes them where it is included; COLLECTIVES_DEVICE_REDUCTIONS
// makes chosen ones for the rest of a program).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <thread>

#include "../concepts/transport.hpp"
#include "../error.hpp"
#include "../memory_space.hpp"
#include "cuda_check.hpp"
#include "reductions.hpp"

namespace collectives {

template <>
struct memory_ops<device_memory> {
  cudaStream_t stream = nullptr;

  // Stream-ordered scratch: freed after the work enqueued before the free.
  struct release {
    cudaStream_t stream = nullptr;
    void operator()(void* p) const noexcept { cudaFreeAsync(p, stream); }
  };
  template <class T>
  std::unique_ptr<T, release> allocate(std::size_t n) const {
    void* p = nullptr;
    device::check(cudaMallocAsync(&p, n * sizeof(T), stream), "cudaMallocAsync (device scratch)");
    return {static_cast<T*>(p), release{stream}};
  }

  template <class T>
  void copy(T* dst, const T* src, std::size_t n) const {
    if (n != 0 && dst != src)
      device::check(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDefault, stream), "cudaMemcpyAsync");
  }

  template <class T, class Op>
  void combine(T* dst, const T* received, std::size_t n, Op& op, operand_order order) const {
    device::combine(dst, received, n, op, order, stream);
  }

  template <class T, class Op>
  void finalize(T* dst, std::size_t n, Op& op, int nranks) const {
    device::finalize(dst, n, op, nranks, stream);
  }

  // A reduction at owners (device::reduce_parts), enqueued.
  template <class T, class Op>
  void reduce_parts(const Op& op, const T* parts, std::size_t n, int ranks, T* out, unsigned char* not_finite) const {
    device::reduce_parts(op, parts, n, ranks, out, not_finite, stream);
  }

  // Returns once everything enqueued so far has run; a call's last step. Polls an
  // event rather than blocking in the driver, so a device that never finishes costs
  // a timeout, not a hang.
  void synchronize(deadline until) const {
    cudaEvent_t done = nullptr;
    device::check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    std::unique_ptr<CUevent_st, decltype(&cudaEventDestroy)> owner(done, &cudaEventDestroy);
    device::check(cudaEventRecord(done, stream), "cudaEventRecord");
    for (unsigned turn = 0;; ++turn) {
      const cudaError_t e = cudaEventQuery(done);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) device::check(e, "the call's device work");
      if (turn % 64 == 63 && clock::now() >= until)
        throw error(errc::timeout, "device work of the call did not finish before the deadline");
      std::this_thread::yield();
    }
  }
};

}  // namespace collectives
