// memory_ops for device memory (memory_ops.hpp) with the device reductions' kernels
// (reduce.cuh): include it in a .cu file that makes device calls, and nvcc makes the
// kernels that file's calls need. Needs nvcc.
#pragma once

#include "memory_ops.hpp"
#include "reduce.cuh"
