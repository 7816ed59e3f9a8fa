// The device reductions collectives_perf_cuda calls (every element type x op of
// data.hpp), made here by nvcc so that the rest of the program compiles with the C++
// compiler.
#include <cstdint>

#include <collectives/device/reduce.cuh>
#include <collectives/ops/builtin.hpp>

#include "absmax_on_device.hpp"

#define PERF_DEVICE_REDUCTIONS(T)                            \
  COLLECTIVES_DEVICE_REDUCTIONS(T, collectives::sum);        \
  COLLECTIVES_DEVICE_REDUCTIONS(T, collectives::prod);       \
  COLLECTIVES_DEVICE_REDUCTIONS(T, collectives::min);        \
  COLLECTIVES_DEVICE_REDUCTIONS(T, collectives::max);        \
  COLLECTIVES_DEVICE_REDUCTIONS(T, collectives::avg);        \
  COLLECTIVES_DEVICE_REDUCTIONS(T, perf::absmax_on_device)

PERF_DEVICE_REDUCTIONS(float);
PERF_DEVICE_REDUCTIONS(double);
PERF_DEVICE_REDUCTIONS(std::int32_t);
PERF_DEVICE_REDUCTIONS(std::int64_t);
PERF_DEVICE_REDUCTIONS(std::uint8_t);
