// Reductions through a wider accumulator: accumulate_as<A>(op), which adds in A and
// rounds to the element type once, and reproducible_sum, which adds 64-bit integers at
// a scale each block's values fix, so that the result does not depend on the order of
// the adds. The calls that run them reduce each element at one owner
// (detail/accumulated_call.hpp); docs/precision.md has the error bounds.
#pragma once

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ranges>
#include <span>
#include <type_traits>

#if defined(__SSE2__) && defined(__x86_64__) && !defined(__CUDA_ARCH__)
#include <emmintrin.h>
#endif

#include "../concepts/reduce_op.hpp"
#include "../config.hpp"
#include "../element_types.hpp"
#include "builtin.hpp"

namespace collectives {

// Op applied to values widened to Accumulator: all_reduce, reduce and reduce_scatter
// send each element's values to its owner in the element type, which widens them,
// reduces them in rank order in Accumulator and rounds the result once; an all_reduce
// then gathers the results in the element type.
template <class Accumulator, class Op>
struct accumulating_op {
  static constexpr bool commutative = is_commutative_v<Op>;
  using accumulator = Accumulator;
  Op op;

  COLLECTIVES_HOST_DEVICE Accumulator operator()(const Accumulator& a, const Accumulator& b) const {
    return static_cast<Accumulator>(op(a, b));
  }
  COLLECTIVES_HOST_DEVICE Accumulator finalize(const Accumulator& total, int nranks) const
    requires has_finalize<Op, Accumulator>
  {
    return static_cast<Accumulator>(op.finalize(total, nranks));
  }
};

//   coll::all_reduce(comm, grad_bf16, coll::accumulate_as<float>(coll::sum{}));
template <class Accumulator, class Op = sum>
constexpr accumulating_op<Accumulator, Op> accumulate_as(Op op = {}) {
  return {op};
}

// Values held as whole multiples of 2^exponent in an int64: sums of them are exact, so
// they are the same in any order. A scale that every rank uses alike comes from
// agree_fixed_point (fixed_point.hpp); `max_terms` values, each below
// 2^(exponent + 62 - log2(max_terms)) in magnitude, add up without overflow.
struct fixed_point {
  int exponent = 0;

  // The float type a T converts through: T itself for float and double, else float.
  template <class T>
  using float_of_t = std::conditional_t<std::is_floating_point_v<T>, T, float>;

  // The nearest multiple (ties to even): scaling by a power of two is exact.
  template <class T>
  std::int64_t units_of(T value) const {
    return units(value, std::ldexp(1.0, -exponent));
  }
  template <class T>
  void units_of(std::span<const T> values, std::int64_t* units_out) const {
    const double scale = std::ldexp(1.0, -exponent);
    for (std::size_t i = 0; i < values.size(); ++i) units_out[i] = units(values[i], scale);
  }

  // A sum of units as T, rounded once: the double in between holds 53 bits, at least
  // 2p + 2 of float's p = 24 and of the narrow types', so rounding through it is exact
  // rounding (to nearest, ties to even); a double result rounds once there.
  template <class T>
  T value_of(std::int64_t units_in) const {
    return value<T>(units_in, std::ldexp(1.0, exponent));
  }

  template <class T>
  void values_of(std::span<const std::int64_t> units_in, T* out) const {
    const double scale = std::ldexp(1.0, exponent);
    for (std::size_t i = 0; i < units_in.size(); ++i) out[i] = value<T>(units_in[i], scale);
  }

  // Adds `values` (a contiguous range of float, double or a narrow type) into `sums`,
  // element by element.
  template <std::ranges::contiguous_range Values>
  void accumulate(std::span<std::int64_t> sums, const Values& values) const {
    const double scale = std::ldexp(1.0, -exponent);
    const auto* v = std::ranges::data(values);
    for (std::size_t i = 0; i < sums.size() && i < std::ranges::size(values); ++i) sums[i] += units(v[i], scale);
  }

  // The scale for values whose magnitudes are below 2^max_exponent (a value's
  // exponent: frexp's), `terms` of them at most: the finest that cannot overflow, and
  // no finer than 2^-1022, so that 2^-exponent and 2^exponent are both normal doubles
  // (doubles below 2^-981 would need a finer one; below 2^-1023 they count as zero).
  static constexpr int finest = -1022;
  static fixed_point for_terms(int max_exponent, std::uint64_t terms) {
    const int exponent = max_exponent + headroom(terms) - 62;
    return {exponent > finest ? exponent : finest};
  }
  // The bits a sum of `terms` values needs above one value's: ceil(log2(terms)).
  static int headroom(std::uint64_t terms) {
    int bits = 0;
    while (bits < 63 && (std::uint64_t(1) << bits) < terms) ++bits;
    return bits;
  }

 private:
  template <class T>
  static std::int64_t units(T value, double scale) {
    return nearest_integer(static_cast<double>(static_cast<float_of_t<T>>(value)) * scale);
  }
  // llrint in the default rounding mode (to nearest, ties to even), inlined: the call
  // into libm was a third of a reproducible sum's time.
  static std::int64_t nearest_integer(double v) {
#if defined(__SSE2__) && defined(__x86_64__) && !defined(__CUDA_ARCH__)
    return _mm_cvtsd_si64(_mm_set_sd(v));
#else
    return std::llrint(v);
#endif
  }
  template <class T>
  static T value(std::int64_t units_in, double scale) {
    const double v = static_cast<double>(units_in) * scale;
    if constexpr (std::is_same_v<T, double>) return v;
    else if constexpr (std::is_same_v<T, float>) return static_cast<float>(v);
    else return T(static_cast<float>(v));
  }
};

namespace detail {

// The largest magnitude among `n` values, as the bits of their float type without the
// sign: the largest pattern, which a loop without branches finds (infinity and NaN lie
// above every finite one). Inlined, so that a loop compiled for AVX2 runs it so too.
template <class T>
[[gnu::always_inline]] inline auto largest_magnitude_bits(const T* values, std::size_t n) {
  using F = fixed_point::float_of_t<T>;
  using Bits = std::conditional_t<sizeof(F) == 4, std::uint32_t, std::uint64_t>;
  Bits largest = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const F f = static_cast<F>(values[i]);
    Bits b;
    std::memcpy(&b, &f, sizeof b);
    b &= ~Bits(0) >> 1;
    largest = b > largest ? b : largest;
  }
  return largest;
}

// The exponent (frexp's) of a magnitude of float type F given as its bits: the
// smallest int for zero, the largest for infinity or NaN.
template <class F, class Bits>
int exponent_of_magnitude(Bits magnitude) {
  const F infinity = std::numeric_limits<F>::infinity();
  Bits infinity_bits;
  std::memcpy(&infinity_bits, &infinity, sizeof infinity_bits);
  if (magnitude >= infinity_bits) return std::numeric_limits<int>::max();
  if (magnitude == 0) return std::numeric_limits<int>::min();
  F m;
  std::memcpy(&m, &magnitude, sizeof m);
  int e = 0;
  std::frexp(m, &e);
  return e;
}

}  // namespace detail

// The exponent of the largest magnitude in `values` (frexp's: every |value| is below
// 2^e), the smallest int for none or all zeros, or the largest for infinity or NaN.
template <class T>
int largest_exponent(std::span<const T> values) {
  return detail::exponent_of_magnitude<fixed_point::float_of_t<T>>(
      detail::largest_magnitude_bits(values.data(), values.size()));
}

// A sum that is the same, bit for bit, however the values are split across ranks and
// whatever the algorithm: each block of elements gets a fixed_point scale from its
// largest magnitude on any rank (at its owner, which holds all of its values), the
// values add in int64 exactly, and each result rounds once. For float, double and the
// narrow types; at most `max_terms` values per element (the
// rank count, or more where ranks add partial sums of their own first). Infinity or
// NaN in an input is an error (errc::not_finite) on every rank.
struct reproducible_sum {
  static constexpr bool commutative = true;
  // Each block of this many elements has a scale of its own, from its largest value.
  static constexpr std::size_t block = 256;
  std::uint64_t max_terms = std::uint64_t(1) << 20;

  std::int64_t operator()(std::int64_t a, std::int64_t b) const { return a + b; }
};

namespace detail {

template <class Op>
inline constexpr bool accumulates = false;
template <class A, class Op>
inline constexpr bool accumulates<accumulating_op<A, Op>> = true;

// Ops that the front ends run as several calls through an accumulator type.
template <class Op>
concept reduces_through_accumulator = accumulates<Op> || std::same_as<Op, reproducible_sum>;

}  // namespace detail
}  // namespace collectives
