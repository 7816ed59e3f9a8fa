// User ops the device can run: the collective grids' arg-max and 2x2 matrix product
// (not commutative), on the grids' types, marked for both host and device.
#pragma once

#include <collectives/config.hpp>

#include "../collectives/user_types.hpp"

namespace testing {

struct device_arg_max {
  static constexpr bool commutative = true;
  COLLECTIVES_HOST_DEVICE scored operator()(const scored& a, const scored& b) const {
    if (a.value != b.value) return a.value > b.value ? a : b;
    return a.index < b.index ? a : b;
  }
};

struct device_mat_mul {
  COLLECTIVES_HOST_DEVICE mat2 operator()(const mat2& x, const mat2& y) const {
    return {x.a * y.a + x.b * y.c, x.a * y.b + x.b * y.d, x.c * y.a + x.d * y.c, x.c * y.b + x.d * y.d};
  }
};

}  // namespace testing
