// The device's reduction at owners (reductions.hpp's reduce_parts): the kernels that
// accumulate_as and reproducible_sum run on device buffers, giving the host loops'
// bits (detail/owner_reduction.hpp). Needs nvcc; reduce.cuh includes it.
#pragma once

#include <cub/block/block_reduce.cuh>
#include <cuda/functional>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../ops/accumulate.hpp"
#include "cuda_check.hpp"
#include "reductions.hpp"

namespace collectives::device {

namespace detail {

// One thread an element: widened, reduced in rank order, finalized, rounded once.
template <class T, class A, class Op>
__global__ void reduce_parts_through(const T* parts, std::size_t n, int ranks, T* out, accumulating_op<A, Op> op) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    A total = static_cast<A>(parts[i]);
    for (int q = 1; q < ranks; ++q) total = op(total, static_cast<A>(parts[std::size_t(q) * n + i]));
    if constexpr (has_finalize<Op, A>) total = op.finalize(total, ranks);
    out[i] = static_cast<T>(total);
  }
}

// One thread block a block of reproducible_sum::block elements, one thread an element:
// the block's largest magnitude over every part (cub::BlockReduce), its scale, each
// element's units added in int64 and rounded once, as the host does.
template <class T>
__global__ void __launch_bounds__(reproducible_sum::block)
    reduce_parts_fixed(const T* parts, std::size_t n, int ranks, T* out, int headroom, unsigned char* not_finite) {
  using F = fixed_point::float_of_t<T>;
  using Bits = std::conditional_t<sizeof(F) == 4, std::uint32_t, std::uint64_t>;
  constexpr Bits magnitude = ~Bits(0) >> 1, infinity = sizeof(F) == 4 ? Bits(0x7f800000u) : Bits(0x7ff0000000000000ull);
  const std::size_t i = std::size_t(blockIdx.x) * reproducible_sum::block + threadIdx.x;
  Bits largest = 0;
  if (i < n)
    for (int q = 0; q < ranks; ++q) {
      const F f = static_cast<F>(parts[std::size_t(q) * n + i]);
      Bits b;
      std::memcpy(&b, &f, sizeof b);
      b &= magnitude;
      if (b >= infinity) not_finite[q] = 1;
      largest = b > largest ? b : largest;
    }
  using block_max = cub::BlockReduce<Bits, int(reproducible_sum::block)>;
  __shared__ typename block_max::TempStorage room;
  __shared__ Bits block_largest;
  const Bits m = block_max(room).Reduce(largest, ::cuda::maximum<>{});
  if (threadIdx.x == 0) block_largest = m;
  __syncthreads();
  if (block_largest >= infinity || i >= n) return;  // the call fails; past the end
  int exponent = 0;
  if (block_largest != 0) {
    F f;
    std::memcpy(&f, &block_largest, sizeof f);
    int e = 0;
    frexp(f, &e);
    exponent = e + headroom - 62 > fixed_point::finest ? e + headroom - 62 : fixed_point::finest;
  }
  const double down = ldexp(1.0, -exponent), up = ldexp(1.0, exponent);
  long long sum = 0;
  for (int q = 0; q < ranks; ++q)
    sum += __double2ll_rn(static_cast<double>(static_cast<F>(parts[std::size_t(q) * n + i])) * down);
  const double value = __ll2double_rn(sum) * up;
  if constexpr (std::is_same_v<T, double>) out[i] = value;
  else if constexpr (std::is_same_v<T, float>) out[i] = static_cast<float>(value);
  else out[i] = T(static_cast<float>(value));
}

template <class Op>
inline constexpr bool accumulates_on_device = false;
template <class A, class Op>
inline constexpr bool accumulates_on_device<accumulating_op<A, Op>> = true;

}  // namespace detail

template <class T, class Op>
void reduce_parts(const Op& op, const T* parts, std::size_t n, int ranks, T* out, unsigned char* not_finite,
                  cudaStream_t stream) {
  if (n == 0) return;
  constexpr unsigned threads = reproducible_sum::block;
  const std::size_t blocks = (n + threads - 1) / threads;
  if constexpr (std::is_same_v<Op, reproducible_sum>) {
    detail::reduce_parts_fixed<T><<<unsigned(blocks), threads, 0, stream>>>(parts, n, ranks, out,
                                                                           fixed_point::headroom(op.max_terms), not_finite);
  } else {
    static_assert(detail::accumulates_on_device<Op>, "collectives: reduce_parts takes accumulate_as or reproducible_sum");
    (void)not_finite;
    const unsigned grid = unsigned(blocks < 65535 ? blocks : 65535);
    detail::reduce_parts_through<<<grid, threads, 0, stream>>>(parts, n, ranks, out, op);
  }
  check(cudaGetLastError(), "the reduction at owners' kernel launch");
}

}  // namespace collectives::device
