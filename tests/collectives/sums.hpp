// Sums to check the precision work against (docs/precision.md), computed without the
// library: inputs of mixed magnitudes or in [-1, 1], the exact sum rounded once, and
// the fixed-point sum by other means. float_order_test and the device tests share them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include <collectives/element_types.hpp>
#include <collectives/ops/accumulate.hpp>

namespace coll = collectives;

namespace testing {

// Values from about 10^-3 to 10^3 in size, of either sign.
template <class T = float>
std::vector<std::vector<T>> random_inputs(int p, std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
  std::vector<std::vector<T>> given(static_cast<std::size_t>(p), std::vector<T>(n));
  for (auto& v : given)
    for (auto& x : v) x = T(dist(gen) * std::pow(10.0f, float(int(gen() % 7) - 3)));  // mixed magnitudes
  return given;
}

// Values in [-1, 1] rounded to T, each 0 or at least 2^-8 in magnitude: a float adds
// up to 2^12 of them exactly, so a float accumulator's sum is the exact one.
template <class T>
std::vector<std::vector<T>> unit_inputs(int p, std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<std::vector<T>> given(static_cast<std::size_t>(p), std::vector<T>(n));
  for (auto& v : given)
    for (auto& x : v) {
      const float f = dist(gen);
      x = T(std::fabs(f) < 1.0f / 256 ? 0.0f : f);
    }
  return given;
}

// The exact sum of every rank's element i, rounded once to T.
template <class T>
std::vector<T> rounded_once(const std::vector<std::vector<T>>& x, std::size_t n) {
  std::vector<T> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    double exact = 0;  // exact: at most 8 terms of 17 bits around 1
    for (const auto& v : x) exact += double(float(v[i]));
    out[i] = T(float(exact));
  }
  return out;
}

template <class T>
auto float_of(const T& x) {
  if constexpr (std::is_floating_point_v<T>) return x;
  else return float(x);
}

// The reproducible sum by other means: for each block of `block` elements, every
// value scaled by 2^-u (from the block's largest magnitude, u at least -1022) and
// rounded to an integer in long double, the integers added in 128 bits, the total
// rounded to T.
template <class T>
std::vector<T> fixed_point_sum(const std::vector<std::vector<T>>& terms, std::size_t n, std::uint64_t max_terms,
                               std::size_t block = coll::reproducible_sum::block) {
  const int headroom = int(std::ceil(std::log2((long double)max_terms)));
  std::vector<T> out(n);
  for (std::size_t first = 0; first < n; first += block) {
    const std::size_t last = std::min(n, first + block);
    int largest = std::numeric_limits<int>::min();
    for (const auto& v : terms)
      for (std::size_t i = first; i < last; ++i)
        if (const long double m = std::fabs((long double)float_of(v[i])); m != 0) {
          int e = 0;
          std::frexp(m, &e);
          largest = std::max(largest, e);
        }
    const int u = largest == std::numeric_limits<int>::min() ? 0 : std::max(largest + headroom - 62, -1022);
    for (std::size_t i = first; i < last; ++i) {
      __int128 total = 0;
      for (const auto& v : terms) total += (__int128)std::nearbyint(std::ldexp((long double)float_of(v[i]), -u));
      const long double sum = std::ldexp((long double)total, u);
      if constexpr (std::is_same_v<T, double>) out[i] = double(sum);
      else if constexpr (std::is_same_v<T, float>) out[i] = float(sum);
      else out[i] = T(float(sum));
    }
  }
  return out;
}

}  // namespace testing
