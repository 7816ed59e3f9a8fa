// The device reductions' declarations, for code any C++ compiler builds (with the CUDA
// headers): device/reduce.cuh defines them, so a .cu file instantiates them, and
// the rest of a program calls them from .cpp files. `COLLECTIVES_DEVICE_REDUCTIONS(T,
// Op)` (config.hpp), in a .cu file of the program, makes one pair's; a pair that no .cu
// file makes is a link error naming it (docs/cuda.md).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <type_traits>

#include "../concepts/reduce_op.hpp"
#include "../memory_space.hpp"

namespace collectives::device {

// dst[i] = op(dst[i], received[i]) (received_last) or op(received[i], dst[i]), i < n.
template <class T, class Op>
void combine(T* dst, const T* received, std::size_t n, const Op& op, operand_order order, cudaStream_t stream);

// dst[i] = op(...op(inputs0[i], inputs1[i])..., inputsk[i]), i < n: one pass over any
// number of inputs (dst may be one of them), the reduce step of a many-peer schedule.
template <class T, class Op, class... Inputs>
  requires(sizeof...(Inputs) >= 1 && (std::is_convertible_v<Inputs, const T*> && ...))
void reduce(T* dst, std::size_t n, const Op& op, cudaStream_t stream, Inputs... inputs);

// dst[i] = op.finalize(dst[i], nranks), for ops with a finishing step (avg).
template <class T, class Op>
  requires has_finalize<Op, T>
void finalize(T* dst, std::size_t n, const Op& op, int nranks, cudaStream_t stream);

// The reduction at owners of accumulate_as and reproducible_sum (detail/accumulated_call.hpp):
// `ranks` parts of n elements back to back at `parts`, reduced in rank order into `out`,
// each result rounded to T once; reproducible_sum sets not_finite[q] to 1 where rank
// q's part of a block holds infinity or NaN, and leaves that block's results unwritten.
// Made by device/reduce_parts.cuh.
template <class T, class Op>
void reduce_parts(const Op& op, const T* parts, std::size_t n, int ranks, T* out, unsigned char* not_finite,
                  cudaStream_t stream);

}  // namespace collectives::device
