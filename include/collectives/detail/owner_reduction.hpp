// The host loops of a reduction at owners (accumulated_call.hpp): an owner holds every
// rank's part of its elements, `ranks` parts of `n` elements back to back, and reduces
// them in rank order into `out`, rounding each result to the element type once.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
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

// Adds the units of `values` (`scale`'s) to `sums`. Each value is below 2^(62 - headroom)
// units (fixed_point::for_terms), from 2^11 terms on below 2^51, where adding 1.5 * 2^52
// leaves the integer nearest it (ties to even) in the low bits of the double: no
// conversion instruction, so the loop vectorizes. Fewer terms: one conversion each.
template <class T>
inline void add_units(const T* __restrict values, std::int64_t* __restrict sums, std::size_t n, fixed_point scale,
                      std::uint64_t terms) {
  if (terms <= 1024) {
    for (std::size_t i = 0; i < n; ++i) sums[i] += scale.units_of(values[i]);
    return;
  }
  const double factor = std::ldexp(1.0, -scale.exponent), shift = 0x1.8p52;
  constexpr std::int64_t shift_bits = 0x4338000000000000;
  for (std::size_t i = 0; i < n; ++i) {
    const double shifted = static_cast<double>(static_cast<fixed_point::float_of_t<T>>(values[i])) * factor + shift;
    std::int64_t bits;
    std::memcpy(&bits, &shifted, sizeof bits);
    sums[i] += bits - shift_bits;
  }
}

// Through reproducible_sum, block by block: the block's scale from its largest value
// over every part, the parts' units added exactly, each sum rounded once. A block that
// holds infinity or NaN marks the ranks whose parts do in `not_finite` and is skipped
// (the call fails).
template <class T>
void reduce_blocks(const T* parts, std::size_t n, int ranks, T* out, std::uint64_t terms, char* not_finite) {
  constexpr std::size_t block = reproducible_sum::block;
  constexpr int infinite = std::numeric_limits<int>::max(), all_zero = std::numeric_limits<int>::min();
  std::int64_t sums[block];
  for (std::size_t first = 0; first < n; first += block) {
    const std::size_t k = std::min(block, n - first);
    int largest = all_zero;
    bool finite = true;
    for (int q = 0; q < ranks; ++q) {
      const int e = largest_exponent(std::span(parts + std::size_t(q) * n + first, k));
      if (e == infinite) {
        not_finite[q] = 1;
        finite = false;
      } else {
        largest = std::max(largest, e);
      }
    }
    if (!finite) continue;
    const fixed_point scale = largest == all_zero ? fixed_point{} : fixed_point::for_terms(largest, terms);
    std::fill_n(sums, k, std::int64_t(0));
    for (int q = 0; q < ranks; ++q) add_units(parts + std::size_t(q) * n + first, sums, k, scale, terms);
    scale.values_of(std::span<const std::int64_t>(sums, k), out + first);
  }
}

#if COLLECTIVES_AVX2_CLONES
// Four doubles a turn instead of two: the sum's time is mostly this loop.
template <class T>
__attribute__((target("avx2"))) void reduce_blocks_avx2(const T* parts, std::size_t n, int ranks, T* out,
                                                        std::uint64_t terms, char* not_finite) {
  reduce_blocks(parts, n, ranks, out, terms, not_finite);
}
#endif

template <class T>
void reduce_parts(const reproducible_sum& op, const T* parts, std::size_t n, int ranks, T* out, char* not_finite) {
#if COLLECTIVES_AVX2_CLONES
  if (cpu_has_avx2()) return reduce_blocks_avx2(parts, n, ranks, out, op.max_terms, not_finite);
#endif
  reduce_blocks(parts, n, ranks, out, op.max_terms, not_finite);
}

}  // namespace collectives::detail
