// The grids' user-defined element types and ops: plain C++, so that a device build's
// .cu file can name them without the rest of the grids (tests/device/cuda).
#pragma once

#include <cstdint>

namespace testing {

// A 2x2 integer matrix; its product is associative but not commutative.
struct mat2 {
  std::int64_t a, b, c, d;
  friend bool operator==(const mat2&, const mat2&) = default;
};
struct mat_mul {
  mat2 operator()(const mat2& x, const mat2& y) const {
    return {x.a * y.a + x.b * y.c, x.a * y.b + x.b * y.d, x.c * y.a + x.d * y.c, x.c * y.b + x.d * y.d};
  }
};

// Arg-max over (value, index); ties go to the lower index, which makes it commutative.
struct scored {
  double value;
  std::int64_t index;
  friend bool operator==(const scored&, const scored&) = default;
};
struct arg_max {
  static constexpr bool commutative = true;
  scored operator()(const scored& a, const scored& b) const {
    if (a.value != b.value) return a.value > b.value ? a : b;
    return a.index < b.index ? a : b;
  }
};

}  // namespace testing
