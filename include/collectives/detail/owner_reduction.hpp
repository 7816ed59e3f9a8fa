// The host loops of a reduction at owners (accumulated_call.hpp): an owner holds every
// rank's part of its elements, `ranks` parts of `n` elements back to back, and reduces
// them in rank order into `out`, rounding each result to the element type once. (The
// device's are kernels: device/reduce_parts.cuh.)
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "../algorithm/schedule.hpp"
#include "../ops/accumulate.hpp"
#include "../ops/host_reduce.hpp"

namespace collectives::detail {

// The elements each rank owns: even shares of `total`, for reproducible_sum in whole
// blocks, since a block's scale comes from all of its values and one owner sees them all.
template <class Op>
std::vector<std::size_t> owned_counts(std::size_t total, int ranks) {
  if constexpr (std::same_as<Op, reproducible_sum>) {
    constexpr std::size_t block = reproducible_sum::block;
    auto counts = plan::even_chunk_counts((total + block - 1) / block, ranks);  // in blocks
    std::size_t first = 0;
    for (auto& c : counts) {
      c = std::min(c * block, total - first);  // the last block may be short
      first += c;
    }
    return counts;
  } else {
    return plan::even_chunk_counts(total, ranks);
  }
}

// Through accumulate_as<A>(op): a tile of accumulators at a time, each part widened
// and combined in rank order, then finalized (avg) and rounded.
template <class T, class A, class Op>
void reduce_parts(const accumulating_op<A, Op>& op, const T* parts, std::size_t n, int ranks, T* out) {
  constexpr std::size_t tile = 1024;
  A total[tile], widened[tile];
  for (std::size_t first = 0; first < n; first += tile) {
    const std::size_t k = std::min(tile, n - first);
    convert(parts + first, total, k);
    for (int q = 1; q < ranks; ++q) {
      convert(parts + std::size_t(q) * n + first, widened, k);
      combine_in_order<operand_order::received_last>(total, widened, k, op);
    }
    if constexpr (has_finalize<Op, A>)
      for (std::size_t i = 0; i < k; ++i) total[i] = op.finalize(total[i], ranks);
    convert(total, out + first, k);
  }
}

// The fast path of reproducible_sum's loops. A value is below 2^(62 - headroom) units
// (fixed_point::for_terms), from 2^11 terms on below 2^51, where adding 1.5 * 2^52 to
// it leaves the integer nearest it (ties to even) in the low bits of the double; and a
// sum of `ranks` of them below 2^51 converts back the same way. No conversion
// instruction between double and int64 (AVX2 has none), so the loops vectorize.
inline constexpr double rounding_shift = 0x1.8p52;
inline constexpr std::int64_t rounding_shift_bits = 0x4338000000000000;  // its bits

inline bool below_2_to_51(std::uint64_t terms, int ranks) {
  const int headroom = fixed_point::headroom(terms);
  int rank_bits = 0;  // ceil(log2(ranks))
  while ((1 << rank_bits) < ranks) ++rank_bits;
  return headroom >= 11 && 62 - headroom + rank_bits <= 51;
}

// k <= block elements of each part (`stride` apart): `sums` gets every part's units at
// `scale`, `out` the sums as T, each rounded once.
template <class T>
[[gnu::always_inline]] inline void add_block(const T* parts, std::size_t stride, int ranks, std::size_t k,
                                             fixed_point scale, bool fast, std::int64_t* __restrict sums,
                                             T* __restrict out) {
  using F = fixed_point::float_of_t<T>;
  if (!fast) {
    for (std::size_t i = 0; i < k; ++i) sums[i] = 0;
    for (int q = 0; q < ranks; ++q) {
      const T* v = parts + std::size_t(q) * stride;
      for (std::size_t i = 0; i < k; ++i) sums[i] += scale.units_of(v[i]);
    }
    scale.values_of(std::span<const std::int64_t>(sums, k), out);
    return;
  }
  const double down = std::ldexp(1.0, -scale.exponent), up = std::ldexp(1.0, scale.exponent);
  for (std::size_t i = 0; i < k; ++i) sums[i] = 0;
  for (int q = 0; q < ranks; ++q) {
    const T* __restrict v = parts + std::size_t(q) * stride;
    for (std::size_t i = 0; i < k; ++i) {
      const double shifted = static_cast<double>(static_cast<F>(v[i])) * down + rounding_shift;
      std::int64_t bits;
      std::memcpy(&bits, &shifted, sizeof bits);
      sums[i] += bits - rounding_shift_bits;
    }
  }
  for (std::size_t i = 0; i < k; ++i) {
    const std::int64_t bits = sums[i] + rounding_shift_bits;
    double total;
    std::memcpy(&total, &bits, sizeof total);
    const double value = (total - rounding_shift) * up;  // both steps exact
    if constexpr (std::is_same_v<T, double>) out[i] = value;
    else if constexpr (std::is_same_v<T, float>) out[i] = static_cast<float>(value);
    else out[i] = T(static_cast<float>(value));
  }
}

// Through reproducible_sum, block by block: the block's scale from its largest value
// over every part, the parts' units added exactly, each sum rounded once. A block that
// holds infinity or NaN marks the ranks whose parts do in `not_finite` and is skipped
// (the call fails).
template <class T>
[[gnu::always_inline]] inline void reduce_blocks_in(const T* parts, std::size_t n, int ranks, T* out,
                                                    std::uint64_t terms, unsigned char* not_finite) {
  using F = fixed_point::float_of_t<T>;
  constexpr std::size_t block = reproducible_sum::block;
  constexpr int infinite = std::numeric_limits<int>::max(), all_zero = std::numeric_limits<int>::min();
  const bool fast = below_2_to_51(terms, ranks);
  alignas(64) std::int64_t sums[block];
  for (std::size_t first = 0; first < n; first += block) {
    const std::size_t k = std::min(block, n - first);
    decltype(largest_magnitude_bits(parts, 0)) largest = 0;
    bool finite = true;
    for (int q = 0; q < ranks; ++q) {
      const auto bits = largest_magnitude_bits(parts + std::size_t(q) * n + first, k);
      if (exponent_of_magnitude<F>(bits) == infinite) {
        not_finite[q] = 1;
        finite = false;
      }
      largest = bits > largest ? bits : largest;
    }
    if (!finite) continue;
    const int e = exponent_of_magnitude<F>(largest);
    const fixed_point scale = e == all_zero ? fixed_point{} : fixed_point::for_terms(e, terms);
    add_block(parts + first, n, ranks, k, scale, fast, sums, out + first);
  }
}

template <class T>
void reduce_blocks(const T* parts, std::size_t n, int ranks, T* out, std::uint64_t terms, unsigned char* not_finite) {
  reduce_blocks_in(parts, n, ranks, out, terms, not_finite);
}

#if COLLECTIVES_AVX2_CLONES
// Four doubles a turn instead of two, eight magnitudes instead of four: the sum's time
// is mostly these loops.
template <class T>
__attribute__((target("avx2"))) void reduce_blocks_avx2(const T* parts, std::size_t n, int ranks, T* out,
                                                        std::uint64_t terms, unsigned char* not_finite) {
  reduce_blocks_in(parts, n, ranks, out, terms, not_finite);
}
#endif

template <class T>
void reduce_parts(const reproducible_sum& op, const T* parts, std::size_t n, int ranks, T* out,
                  unsigned char* not_finite) {
#if COLLECTIVES_AVX2_CLONES
  if (cpu_has_avx2()) return reduce_blocks_avx2(parts, n, ranks, out, op.max_terms, not_finite);
#endif
  reduce_blocks(parts, n, ranks, out, op.max_terms, not_finite);
}

}  // namespace collectives::detail
