// Device reductions with CUB: the user's op, inlined into cub::DeviceTransform, over
// device arrays on the caller's stream. Nothing goes through the host. Needs nvcc;
// the op must be callable on the device (`__host__ __device__`, or
// COLLECTIVES_HOST_DEVICE as the built-ins are) and trivially copyable (it travels
// to the kernel by value). combine, reduce and finalize are declared for other
// compilers in reductions.hpp; COLLECTIVES_DEVICE_REDUCTIONS (config.hpp) makes the
// combine and finalize a device call needs for code built there (for accumulate_as and
// reproducible_sum, the reduction at owners: reduce_parts.cuh).
#pragma once

#include <cub/device/device_transform.cuh>
#include <cuda/std/tuple>

#include <cstddef>
#include <type_traits>

#include "../concepts/reduce_op.hpp"
#include "../config.hpp"
#include "../memory_space.hpp"
#include "../ops/builtin.hpp"
#include "cuda_check.hpp"
#include "reduce_parts.cuh"
#include "reductions.hpp"

namespace collectives::device {

namespace detail {

// dst = op(dst, received), or op(received, dst): operand order matters to
// non-commutative ops, which are applied in rank order.
template <class T, class Op>
struct received_last {
  Op op;
  __device__ T operator()(const T& dst, const T& received) const { return static_cast<T>(op(dst, received)); }
};
template <class T, class Op>
struct received_first {
  Op op;
  __device__ T operator()(const T& dst, const T& received) const { return static_cast<T>(op(received, dst)); }
};

// op(...op(op(x0, x1), x2)..., xk), left to right.
template <class T, class Op>
struct fold_left {
  Op op;
  template <class... Rest>
  __device__ T operator()(const T& first, const Rest&... rest) const {
    T acc = first;
    ((acc = static_cast<T>(op(acc, rest))), ...);
    return acc;
  }
};

template <class T, class Op>
struct finalizer {
  Op op;
  int nranks;
  __device__ T operator()(const T& total) const { return static_cast<T>(op.finalize(total, nranks)); }
};

template <class Op, class T>
constexpr void check_device_op() {
  static_assert(check_reduce_op<Op, T>());
  static_assert(std::is_trivially_copyable_v<Op>,
                "collectives: a reduce op used on the device must be trivially copyable (it is passed to the kernel by value)");
}

}  // namespace detail

template <class T, class Op>
void combine(T* dst, const T* received, std::size_t n, const Op& op, operand_order order, cudaStream_t stream) {
  detail::check_device_op<Op, T>();
  if (n == 0) return;
  const auto inputs = ::cuda::std::make_tuple(static_cast<const T*>(dst), received);
  const cudaError_t status =
      order == operand_order::received_last
          ? cub::DeviceTransform::Transform(inputs, dst, n, detail::received_last<T, Op>{op}, stream)
          : cub::DeviceTransform::Transform(inputs, dst, n, detail::received_first<T, Op>{op}, stream);
  check(status, "cub::DeviceTransform::Transform (combine)");
}

template <class T, class Op, class... Inputs>
  requires(sizeof...(Inputs) >= 1 && (std::is_convertible_v<Inputs, const T*> && ...))
void reduce(T* dst, std::size_t n, const Op& op, cudaStream_t stream, Inputs... inputs) {
  detail::check_device_op<Op, T>();
  if (n == 0) return;
  check(cub::DeviceTransform::Transform(::cuda::std::make_tuple(static_cast<const T*>(inputs)...), dst, n,
                                        detail::fold_left<T, Op>{op}, stream),
        "cub::DeviceTransform::Transform (reduce)");
}

template <class T, class Op>
  requires has_finalize<Op, T>
void finalize(T* dst, std::size_t n, const Op& op, int nranks, cudaStream_t stream) {
  if (n == 0) return;
  check(cub::DeviceTransform::Transform(::cuda::std::make_tuple(static_cast<const T*>(dst)), dst, n,
                                        detail::finalizer<T, Op>{op, nranks}, stream),
        "cub::DeviceTransform::Transform (finalize)");
}

namespace detail {

// Makes the reductions of (T, Op) that a device call needs, for the program's other
// files: taking their addresses instantiates them here.
template <class T, class Op>
struct reductions_of {
  static constexpr auto combine_step = &device::combine<T, Op>;
  static constexpr auto finalize_step = [] {
    if constexpr (has_finalize<Op, T>) return &device::finalize<T, Op>;
    else return nullptr;
  }();
};

// accumulate_as and reproducible_sum reduce at owners (reduce_parts.cuh), and
// reproducible_sum's calls all-reduce a byte per rank with max.
template <class T, class A, class Op>
struct reductions_of<T, accumulating_op<A, Op>> {
  static constexpr auto reduce_parts_step = &device::reduce_parts<T, accumulating_op<A, Op>>;
};
template <class T>
struct reductions_of<T, reproducible_sum> {
  static constexpr auto reduce_parts_step = &device::reduce_parts<T, reproducible_sum>;
  static constexpr auto flags_step = &device::combine<unsigned char, max>;
};

}  // namespace detail

}  // namespace collectives::device
