// Host reduction loops: the user's op inlined into a loop over plain arrays.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

#include "../config.hpp"
#include "../concepts/reduce_op.hpp"
#include "../element_types.hpp"
#include "../memory_space.hpp"
#include "builtin.hpp"

namespace collectives {

namespace detail {

// The bytes of one SIMD register on the target this is compiled for.
#if defined(__AVX__)
inline constexpr std::size_t vector_bytes = 32;
#else
inline constexpr std::size_t vector_bytes = 16;
#endif

// The body runs over blocks of one register's worth of elements: a constant trip
// count that g++ vectorizes at -O2 as well as -O3 (no runtime cost model), into one
// vector per block. Unrolling the block loop by 4 gives g++ the load, op, store order
// per vector that clang picks itself; a 64-byte block instead became one turn of
// four loads of dst, four of src, four ops and four stores, 15-20% slower on data in
// cache (and a one-block turn ran at half or full speed depending on where the loop
// landed in the code).
// The tail, shorter than a block, is scalar.
template <class T>
inline constexpr std::size_t block_of = sizeof(T) < vector_bytes ? vector_bytes / sizeof(T) : 1;

// op(dst, received) or op(received, dst), as Order says; inlined into the loop below.
template <operand_order Order, class T, class Op>
inline T apply_in_order(Op& op, const T& dst, const T& received) {
  if constexpr (Order == operand_order::received_last) return op(dst, received);
  else return op(received, dst);
}

template <operand_order Order, std::size_t Block, class T, class Op>
inline void combine_in_blocks(T* __restrict dst, const T* __restrict src, std::size_t n, Op& op) {
  const std::size_t blocks = n / Block;
  COLLECTIVES_UNROLL_4
  for (std::size_t k = 0; k < blocks; ++k)
    for (std::size_t j = 0; j < Block; ++j)
      dst[k * Block + j] = apply_in_order<Order>(op, dst[k * Block + j], src[k * Block + j]);
  for (std::size_t i = blocks * Block; i < n; ++i) dst[i] = apply_in_order<Order>(op, dst[i], src[i]);
}

// out[i] = To(in[i]): a wide accumulation's conversions (detail/accumulated_call.hpp).
template <class To, class From>
inline void convert_each(const From* __restrict in, To* __restrict out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<To>(in[i]);
}

#if COLLECTIVES_AVX2_CLONES
// The loops again for AVX2, the combining one in 32-byte blocks. It pays for the narrow
// types (bf16, fp16, fp8), which go through float: SSE2 cannot pack 32-bit lanes into
// 16-bit ones, so their loops stayed scalar and a bf16 sum cost 5 times a float one
// per element. The operations are the same, in the same order, so the bits are too.
template <class T>
inline constexpr bool narrow_float = std::is_base_of_v<narrow_arithmetic<T>, T>;

template <operand_order Order, class T, class Op>
__attribute__((target("avx2"))) void combine_avx2(T* __restrict dst, const T* __restrict src, std::size_t n, Op& op) {
  combine_in_blocks<Order, sizeof(T) < 32 ? 32 / sizeof(T) : 1>(dst, src, n, op);
}
template <class To, class From>
__attribute__((target("avx2"))) void convert_each_avx2(const From* __restrict in, To* __restrict out, std::size_t n) {
  convert_each(in, out, n);
}
inline bool cpu_has_avx2() noexcept {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

// bf16's sum and its rounding from float once more where the CPU has AVX-512 BF16,
// whose vcvtne2ps2bf16 rounds 32 floats to bf16 at once, ties to even as bf16's
// conversion does (the sum: 2.7 times the AVX2 loop's speed on data in cache). It
// flushes subnormals to zero and keeps NaN payloads, which the conversion does not:
// a tile that holds either converts in C++. The one instruction is written as
// assembly, since <immintrin.h> cost g++ 0.7 s a file.
inline bool cpu_has_avx512_bf16() noexcept {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
}

// Whether any of in[0..n) is a subnormal or NaN, in a loop that vectorizes.
[[gnu::always_inline]] __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
inline bool any_special(const float* in, std::size_t n) {
  std::uint32_t special = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t magnitude;
    std::memcpy(&magnitude, in + i, sizeof magnitude);
    magnitude &= 0x7FFFFFFFu;
    special |= std::uint32_t(magnitude - 1u < 0x7FFFFFu) | std::uint32_t(magnitude > 0x7F800000u);
  }
  return special != 0;
}

// out[0..n) = bf16(in[0..n)), n a multiple of 32.
[[gnu::always_inline]] __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
inline void round_to_bf16_in_32s(const float* in, bf16* out, std::size_t n) {
  if (any_special(in, n)) {
    for (std::size_t i = 0; i < n; ++i) out[i] = bf16(in[i]);
    return;
  }
  for (std::size_t j = 0; j < n; j += 32)  // in[j..j+16) to the lower half
    asm("vmovups %1, %%zmm0\n\tvmovups %2, %%zmm1\n\tvcvtne2ps2bf16 %%zmm0, %%zmm1, %%zmm1\n\tvmovdqu16 %%zmm1, %0"
        : "=m"(*reinterpret_cast<char(*)[64]>(out + j))
        : "m"(*reinterpret_cast<const char(*)[64]>(in + j)), "m"(*reinterpret_cast<const char(*)[64]>(in + j + 16))
        : "xmm0", "xmm1");
}

// A tile of 256 at a time: sums that stay in cache, and one check for all of them.
inline constexpr std::size_t bf16_tile = 256;

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
inline void add_bf16_avx512(bf16* __restrict dst, const bf16* __restrict src, std::size_t n) {
  alignas(64) float sums[bf16_tile];
  std::size_t first = 0;
  for (; first + bf16_tile <= n; first += bf16_tile) {
    for (std::size_t i = 0; i < bf16_tile; ++i) sums[i] = float(dst[first + i]) + float(src[first + i]);
    round_to_bf16_in_32s(sums, dst + first, bf16_tile);
  }
  for (std::size_t i = first; i < n; ++i) dst[i] = dst[i] + src[i];
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
inline void round_to_bf16_avx512(const float* __restrict in, bf16* __restrict out, std::size_t n) {
  std::size_t first = 0;
  for (; first + bf16_tile <= n; first += bf16_tile) round_to_bf16_in_32s(in + first, out + first, bf16_tile);
  for (std::size_t i = first; i < n; ++i) out[i] = bf16(in[i]);
}

// fp16's sum through F16C, which every CPU with AVX2 has (x86-64-v3 names both; clang
// cannot ask for it by name): vcvtph2ps widens 8 exactly, vcvtps2ph rounds 8 to
// nearest, ties to even, subnormals as IEEE's, as fp16's conversion does (5 times the
// AVX2 loop's speed, whose conversions are selects). A NaN keeps its payload there,
// which the conversion does not: a tile of sums that holds one converts in C++.
__attribute__((target("avx2,f16c"))) inline void add_fp16_f16c(fp16* __restrict dst, const fp16* __restrict src,
                                                               std::size_t n) {
  constexpr std::size_t tile = 256;
  alignas(32) float sums[tile], received[tile];
  std::size_t first = 0;
  for (; first + tile <= n; first += tile) {
    for (std::size_t j = 0; j < tile; j += 8) {
      asm("vcvtph2ps %1, %%ymm0\n\tvmovaps %%ymm0, %0"
          : "=m"(*reinterpret_cast<char(*)[32]>(sums + j))
          : "m"(*reinterpret_cast<const char(*)[16]>(dst + first + j))
          : "xmm0");
      asm("vcvtph2ps %1, %%ymm0\n\tvmovaps %%ymm0, %0"
          : "=m"(*reinterpret_cast<char(*)[32]>(received + j))
          : "m"(*reinterpret_cast<const char(*)[16]>(src + first + j))
          : "xmm0");
    }
    std::uint32_t nan = 0;
    for (std::size_t i = 0; i < tile; ++i) {
      sums[i] += received[i];
      std::uint32_t magnitude;
      std::memcpy(&magnitude, sums + i, sizeof magnitude);
      nan |= std::uint32_t((magnitude & 0x7FFFFFFFu) > 0x7F800000u);
    }
    if (nan) {
      for (std::size_t i = 0; i < tile; ++i) dst[first + i] = fp16(sums[i]);
      continue;
    }
    for (std::size_t j = 0; j < tile; j += 8)
      asm("vmovaps %1, %%ymm0\n\tvcvtps2ph $0, %%ymm0, %0"  // 0: to nearest, ties to even
          : "=m"(*reinterpret_cast<char(*)[16]>(dst + first + j))
          : "m"(*reinterpret_cast<const char(*)[32]>(sums + j))
          : "xmm0");
  }
  for (std::size_t i = first; i < n; ++i) dst[i] = dst[i] + src[i];
}
#endif

template <class To, class From>
inline void convert(const From* in, To* out, std::size_t n) {
#if COLLECTIVES_AVX2_CLONES
  if constexpr (std::is_same_v<To, bf16> && std::is_same_v<From, float>)
    if (cpu_has_avx512_bf16()) return round_to_bf16_avx512(in, out, n);
  if constexpr (narrow_float<To> || narrow_float<From>)
    if (cpu_has_avx2()) return convert_each_avx2(in, out, n);
#endif
  convert_each(in, out, n);
}

template <operand_order Order, class T, class Op>
inline void combine_in_order(T* __restrict dst, const T* __restrict src, std::size_t n, Op& op) {
#if COLLECTIVES_AVX2_CLONES
  // bf16's and fp16's sums: the same in either order (but for which NaN a NaN + NaN keeps)
  if constexpr (std::is_same_v<T, bf16> && std::is_same_v<std::remove_cv_t<Op>, sum>)
    if (cpu_has_avx512_bf16()) return add_bf16_avx512(dst, src, n);
  if constexpr (std::is_same_v<T, fp16> && std::is_same_v<std::remove_cv_t<Op>, sum>)
    if (cpu_has_avx2()) return add_fp16_f16c(dst, src, n);
  if constexpr (narrow_float<T>)
    if (cpu_has_avx2()) return combine_avx2<Order>(dst, src, n, op);
#endif
  combine_in_blocks<Order, block_of<T>>(dst, src, n, op);
}

}  // namespace detail

template <>
struct memory_ops<host_memory> {
  // Uninitialized, suitably aligned room for n elements of a trivially copyable T
  // (which need not be default constructible).
  struct release {
    std::align_val_t alignment;
    void operator()(void* p) const { ::operator delete(p, alignment); }
  };
  template <class T>
  static std::unique_ptr<T, release> allocate(std::size_t n) {
    const auto alignment = std::align_val_t{alignof(T) > 64 ? alignof(T) : 64};
    return {static_cast<T*>(::operator new(n * sizeof(T), alignment)), release{alignment}};
  }

  template <class T>
  static void copy(T* dst, const T* src, std::size_t n) {
    if (n != 0 && dst != src) std::memcpy(dst, src, n * sizeof(T));
  }

  template <class T, class Op>
  static void combine(T* dst, const T* received, std::size_t n, Op& op, operand_order order) {
    if (order == operand_order::received_last)
      detail::combine_in_order<operand_order::received_last>(dst, received, n, op);
    else
      detail::combine_in_order<operand_order::received_first>(dst, received, n, op);
  }

  template <class T, class Op>
  static void finalize(T* dst, std::size_t n, Op& op, int nranks) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = op.finalize(dst[i], nranks);
  }
};

}  // namespace collectives
