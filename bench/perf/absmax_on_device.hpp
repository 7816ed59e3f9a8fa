// The perf programs' user op on device buffers.
#pragma once

#include <type_traits>

#include <collectives/config.hpp>

namespace perf {

// absmax (data.hpp) callable in kernels. data.hpp stays plain C++ for the Open MPI
// twin, so the device copy lives here; the check compares its results with absmax's.
struct absmax_on_device {
  static constexpr bool commutative = true;
  template <class T>
  COLLECTIVES_HOST_DEVICE constexpr T operator()(const T& a, const T& b) const {
    const T abs_a = magnitude(a), abs_b = magnitude(b);
    if (abs_a != abs_b) return abs_a < abs_b ? b : a;
    return a < b ? b : a;
  }

 private:
  template <class T>
  COLLECTIVES_HOST_DEVICE static constexpr T magnitude(const T& x) {
    if constexpr (std::is_unsigned_v<T>) return x;
    else return x < T(0) ? static_cast<T>(-x) : x;
  }
};

}  // namespace perf
