// Where a buffer lives. Every buffer the executor touches carries its memory space,
// and the two data steps a schedule performs locally (copy a chunk, reduce a
// received chunk into a destination) are looked up through memory_ops<Space>, the
// customization point a device implementation specializes for device buffers.
#pragma once

#include <cstddef>

namespace collectives {

struct host_memory {};    // ordinary process memory
struct device_memory {};  // CUDA device memory (the device/ part specializes memory_ops for it)

// Which side of the op a received value goes to. Non-commutative ops are applied in
// rank order, so a chunk from a lower rank is the left operand and one from a higher
// rank the right operand.
enum class operand_order : unsigned char {
  received_first,  // dst = op(received, dst)
  received_last,   // dst = op(dst, received)
};

// memory_ops<Space> must provide, for trivially copyable T and reduce op Op:
//   static void copy(T* dst, const T* src, std::size_t n);
//   static void combine(T* dst, const T* received, std::size_t n, Op& op, operand_order);
//   static void finalize(T* dst, std::size_t n, Op& op, int nranks);  // only for ops with finalize
//   static auto allocate<T>(std::size_t n);  // owning pointer-like handle to n elements
// ops/host_reduce.hpp defines it for host_memory; a device part defines it for
// device_memory.
template <class Space>
struct memory_ops;

}  // namespace collectives
