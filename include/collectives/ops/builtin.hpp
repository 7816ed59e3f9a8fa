// The built-in reduce ops. Each is a stateless functor usable on host and device.
#pragma once

#include <concepts>

#include "../config.hpp"

namespace collectives {

namespace detail {
template <class T>
concept addable = requires(const T& a, const T& b) { static_cast<T>(a + b); };
template <class T>
concept multipliable = requires(const T& a, const T& b) { static_cast<T>(a * b); };
template <class T>
concept divisible_by_count = addable<T> && requires(const T& a, int n) { static_cast<T>(a / static_cast<T>(n)); };
template <class T>
concept ordered = requires(const T& a, const T& b) { { a < b } -> std::convertible_to<bool>; };
}  // namespace detail

struct sum {
  static constexpr bool commutative = true;
  template <detail::addable T>
  COLLECTIVES_HOST_DEVICE constexpr T operator()(const T& a, const T& b) const { return static_cast<T>(a + b); }
};

struct prod {
  static constexpr bool commutative = true;
  template <detail::multipliable T>
  COLLECTIVES_HOST_DEVICE constexpr T operator()(const T& a, const T& b) const { return static_cast<T>(a * b); }
};

// min and max keep the left operand on ties (and when the right one is NaN), so the
// result is the same on every rank and in every run for a fixed algorithm.
struct min {
  static constexpr bool commutative = true;
  template <detail::ordered T>
  COLLECTIVES_HOST_DEVICE constexpr T operator()(const T& a, const T& b) const { return b < a ? b : a; }
};

struct max {
  static constexpr bool commutative = true;
  template <detail::ordered T>
  COLLECTIVES_HOST_DEVICE constexpr T operator()(const T& a, const T& b) const { return a < b ? b : a; }
};

// The mean over ranks: summed like `sum`, then divided once by the rank count by the
// rank that owns the finished value (integers divide with truncation toward zero).
struct avg {
  static constexpr bool commutative = true;
  template <detail::divisible_by_count T>
  COLLECTIVES_HOST_DEVICE constexpr T operator()(const T& a, const T& b) const { return static_cast<T>(a + b); }
  template <detail::divisible_by_count T>
  COLLECTIVES_HOST_DEVICE constexpr T finalize(const T& total, int nranks) const {
    return static_cast<T>(total / static_cast<T>(nranks));
  }
};

struct bit_and {
  static constexpr bool commutative = true;
  template <std::integral T>
  COLLECTIVES_HOST_DEVICE constexpr T operator()(const T& a, const T& b) const { return static_cast<T>(a & b); }
};

struct bit_or {
  static constexpr bool commutative = true;
  template <std::integral T>
  COLLECTIVES_HOST_DEVICE constexpr T operator()(const T& a, const T& b) const { return static_cast<T>(a | b); }
};

struct bit_xor {
  static constexpr bool commutative = true;
  template <std::integral T>
  COLLECTIVES_HOST_DEVICE constexpr T operator()(const T& a, const T& b) const { return static_cast<T>(a ^ b); }
};

}  // namespace collectives
