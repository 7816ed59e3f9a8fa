// Element types, reduce ops and the data the perf programs reduce: generated so that
// every result is exact whatever order the ranks' values are combined in, which lets
// the check compare every element for equality with a serial fold. Plain standard
// C++: the Open MPI twin uses it too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

namespace perf {

enum class element_type { float32, float64, int32, int64, uint8 };
inline constexpr element_type all_types[] = {element_type::float32, element_type::float64, element_type::int32,
                                             element_type::int64, element_type::uint8};

constexpr std::string_view name_of(element_type t) {
  switch (t) {
    case element_type::float32: return "float";
    case element_type::float64: return "double";
    case element_type::int32: return "int32";
    case element_type::int64: return "int64";
    case element_type::uint8: return "uint8";
  }
  return "?";
}

// The names above, and nccl-tests' spellings of the same types.
inline std::optional<element_type> element_type_named(std::string_view n) {
  if (n == "float" || n == "float32") return element_type::float32;
  if (n == "double" || n == "float64") return element_type::float64;
  if (n == "int32" || n == "int") return element_type::int32;
  if (n == "int64") return element_type::int64;
  if (n == "uint8") return element_type::uint8;
  return std::nullopt;
}

// Calls f.template operator()<T>() with the C++ type `t` names.
template <class F>
void with_type(element_type t, F&& f) {
  switch (t) {
    case element_type::float32: f.template operator()<float>(); return;
    case element_type::float64: f.template operator()<double>(); return;
    case element_type::int32: f.template operator()<std::int32_t>(); return;
    case element_type::int64: f.template operator()<std::int64_t>(); return;
    case element_type::uint8: f.template operator()<std::uint8_t>(); return;
  }
}

template <class T>
constexpr element_type element_type_of() {
  if constexpr (std::is_same_v<T, float>) return element_type::float32;
  else if constexpr (std::is_same_v<T, double>) return element_type::float64;
  else if constexpr (std::is_same_v<T, std::int32_t>) return element_type::int32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return element_type::int64;
  else {
    static_assert(std::is_same_v<T, std::uint8_t>, "perf: not one of the element types");
    return element_type::uint8;
  }
}

// `none` is the op column of the collectives that only move data.
enum class op_kind { sum, prod, min, max, avg, absmax, none };
inline constexpr op_kind all_ops[] = {op_kind::sum, op_kind::prod, op_kind::min,
                                      op_kind::max, op_kind::avg,  op_kind::absmax};

constexpr std::string_view name_of(op_kind o) {
  switch (o) {
    case op_kind::sum: return "sum";
    case op_kind::prod: return "prod";
    case op_kind::min: return "min";
    case op_kind::max: return "max";
    case op_kind::avg: return "avg";
    case op_kind::absmax: return "absmax";
    case op_kind::none: return "none";
  }
  return "?";
}

inline std::optional<op_kind> op_named(std::string_view n) {
  for (op_kind o : all_ops)
    if (n == name_of(o)) return o;
  return std::nullopt;
}

// Calls f.template operator()<K>() with `o` as a compile-time value, so each op is
// inlined into its own instantiation, as a user's op would be.
template <class F>
void with_op(op_kind o, F&& f) {
  switch (o) {
    case op_kind::sum: f.template operator()<op_kind::sum>(); return;
    case op_kind::prod: f.template operator()<op_kind::prod>(); return;
    case op_kind::min: f.template operator()<op_kind::min>(); return;
    case op_kind::max: f.template operator()<op_kind::max>(); return;
    case op_kind::avg: f.template operator()<op_kind::avg>(); return;
    case op_kind::absmax: f.template operator()<op_kind::absmax>(); return;
    case op_kind::none: f.template operator()<op_kind::none>(); return;
  }
}

// The user-defined op both programs time: the value of larger magnitude, ties to the
// larger value. It is a max under a total order, so associative and commutative, and
// no library ships it: custom ops are where an inlined functor should pay off.
struct absmax {
  static constexpr bool commutative = true;
  template <class T>
  constexpr T operator()(const T& a, const T& b) const {
    const T abs_a = magnitude(a), abs_b = magnitude(b);
    if (abs_a != abs_b) return abs_a < abs_b ? b : a;
    return a < b ? b : a;
  }

 private:
  template <class T>
  static constexpr T magnitude(const T& x) {
    if constexpr (std::is_unsigned_v<T>) return x;
    else return x < T(0) ? static_cast<T>(-x) : x;
  }
};

// The reference of each op, element by element, as the library defines it (the
// built-ins in include/collectives/ops/builtin.hpp): results cast back to T, min and
// max keep the left operand on ties, avg sums and divides once at the end.
template <op_kind K, class T>
constexpr T combine(const T& a, const T& b) {
  if constexpr (K == op_kind::sum || K == op_kind::avg) return static_cast<T>(a + b);
  else if constexpr (K == op_kind::prod) return static_cast<T>(a * b);
  else if constexpr (K == op_kind::min) return b < a ? b : a;
  else if constexpr (K == op_kind::max) return a < b ? b : a;
  else return absmax{}(a, b);
}

template <op_kind K, class T>
constexpr T finish(const T& total, int ranks) {
  if constexpr (K == op_kind::avg) return static_cast<T>(total / static_cast<T>(ranks));
  else return total;
}

// A well-mixed 32-bit hash of (rank, index) (splitmix64's finaliser).
constexpr std::uint32_t mix(int rank, std::size_t index) {
  std::uint64_t x = index * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(rank + 1) * 0xC2B2AE3D27D4EB4Full;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return static_cast<std::uint32_t>(x ^ (x >> 31));
}

// Element `index` of rank `rank`'s input for op K.
// - Reductions: small integers, so every partial sum is exact in every type and
//   signed types never overflow: [-4, 3] (unsigned: [0, 7]); for prod 1 or 2, with
//   only ranks below 30 contributing 2s so an int32 product stays below 2^31.
// - Data movement: as many distinct values as the type holds exactly, so a misplaced
//   element is caught.
template <op_kind K, class T>
constexpr T input_value(int rank, std::size_t index) {
  const std::uint32_t h = mix(rank, index);
  if constexpr (K == op_kind::none) {
    if constexpr (std::is_same_v<T, float>) return static_cast<T>(h & 0xFFFFFF);  // 24 bits: exact
    else return static_cast<T>(h);  // exact in double; integers keep their width's low bits
  } else if constexpr (K == op_kind::prod) {
    return static_cast<T>(rank < 30 ? 1 + (h & 1) : 1);
  } else if constexpr (std::is_unsigned_v<T>) {
    return static_cast<T>(h % 8);
  } else {
    return static_cast<T>(static_cast<int>(h % 8) - 4);
  }
}

// Data that the in-place form of a reduction can be timed on over and over without
// growing: repeated in-place sums or products would overflow (undefined for signed
// types), so those run on their identity; the other ops are idempotent or shrinking.
template <op_kind K, class T>
constexpr T repeatable_value(int rank, std::size_t index) {
  if constexpr (K == op_kind::sum) return T(0);
  else if constexpr (K == op_kind::prod) return T(1);
  else return input_value<K, T>(rank, index);
}

// What an output element holds before the call: a value no result takes by chance
// often, so that a call that wrote nothing is caught.
template <class T>
constexpr T unwritten() {
  return static_cast<T>(101);
}

// The reduction over ranks 0..P-1, in rank order, of element `index` of their inputs.
template <op_kind K, class T>
constexpr T reduced_value(int ranks, std::size_t index) {
  T total = input_value<K, T>(0, index);
  for (int r = 1; r < ranks; ++r) total = combine<K>(total, input_value<K, T>(r, index));
  return finish<K>(total, ranks);
}

}  // namespace perf
