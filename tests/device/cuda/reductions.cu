// The device reductions the device tests call (collectives_test.hpp, reduce_test.cpp),
// made here by nvcc so that the tests themselves compile with the C++ compiler.
#include <collectives/device/reduce.cuh>
#include <collectives/ops/accumulate.hpp>
#include <collectives/ops/builtin.hpp>

#include "device_ops.hpp"

namespace coll = collectives;

COLLECTIVES_DEVICE_REDUCTIONS(std::int32_t, coll::sum);
COLLECTIVES_DEVICE_REDUCTIONS(std::int32_t, coll::prod);
COLLECTIVES_DEVICE_REDUCTIONS(std::int32_t, coll::min);
COLLECTIVES_DEVICE_REDUCTIONS(std::int32_t, coll::max);
COLLECTIVES_DEVICE_REDUCTIONS(std::int32_t, coll::avg);
COLLECTIVES_DEVICE_REDUCTIONS(std::int32_t, coll::bit_and);
COLLECTIVES_DEVICE_REDUCTIONS(std::int32_t, coll::bit_or);
COLLECTIVES_DEVICE_REDUCTIONS(std::int32_t, coll::bit_xor);
COLLECTIVES_DEVICE_REDUCTIONS(float, coll::sum);
COLLECTIVES_DEVICE_REDUCTIONS(float, coll::prod);
COLLECTIVES_DEVICE_REDUCTIONS(float, coll::min);
COLLECTIVES_DEVICE_REDUCTIONS(float, coll::max);
COLLECTIVES_DEVICE_REDUCTIONS(float, coll::avg);
COLLECTIVES_DEVICE_REDUCTIONS(double, coll::sum);
COLLECTIVES_DEVICE_REDUCTIONS(std::int64_t, coll::max);
COLLECTIVES_DEVICE_REDUCTIONS(testing::scored, testing::device_arg_max);
COLLECTIVES_DEVICE_REDUCTIONS(testing::mat2, testing::device_mat_mul);
// The calls through an accumulator (collectives_test.hpp): the reductions at owners.
COLLECTIVES_DEVICE_REDUCTIONS(coll::bf16, coll::accumulating_op<float, coll::sum>);
COLLECTIVES_DEVICE_REDUCTIONS(coll::bf16, coll::accumulating_op<float, coll::avg>);
COLLECTIVES_DEVICE_REDUCTIONS(float, coll::reproducible_sum);

// reduce_test.cpp's many inputs in one pass.
template void coll::device::reduce(float*, std::size_t, const coll::sum&, cudaStream_t, float*, float*, float*);
template void coll::device::reduce(std::int32_t*, std::size_t, const coll::bit_xor&, cudaStream_t, std::int32_t*,
                                   std::int32_t*, std::int32_t*);
template void coll::device::reduce(testing::mat2*, std::size_t, const testing::device_mat_mul&, cudaStream_t,
                                   testing::mat2*, testing::mat2*, testing::mat2*);
