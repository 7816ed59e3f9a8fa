// Host reduction loops: the user's op inlined into a loop over plain arrays.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <new>

#include "../concepts/reduce_op.hpp"
#include "../memory_space.hpp"

namespace collectives {

namespace detail {

// The body runs over fixed-size blocks so that g++ and clang vectorize it at -O2 as
// well as -O3 (a constant trip count needs no runtime cost model); the tail is scalar.
template <class T, class Op>
inline void combine_received_last(T* __restrict dst, const T* __restrict src, std::size_t n, Op& op) {
  constexpr std::size_t block = sizeof(T) <= 8 ? 64 / sizeof(T) : 1;
  const std::size_t whole = n - n % block;
  for (std::size_t i = 0; i < whole; i += block)
    for (std::size_t j = 0; j < block; ++j) dst[i + j] = op(dst[i + j], src[i + j]);
  for (std::size_t i = whole; i < n; ++i) dst[i] = op(dst[i], src[i]);
}

template <class T, class Op>
inline void combine_received_first(T* __restrict dst, const T* __restrict src, std::size_t n, Op& op) {
  constexpr std::size_t block = sizeof(T) <= 8 ? 64 / sizeof(T) : 1;
  const std::size_t whole = n - n % block;
  for (std::size_t i = 0; i < whole; i += block)
    for (std::size_t j = 0; j < block; ++j) dst[i + j] = op(src[i + j], dst[i + j]);
  for (std::size_t i = whole; i < n; ++i) dst[i] = op(src[i], dst[i]);
}

}  // namespace detail

template <>
struct memory_ops<host_memory> {
  // Uninitialized, suitably aligned room for n elements of a trivially copyable T
  // (which need not be default constructible).
  struct release {
    std::align_val_t alignment;
    void operator()(void* p) const { ::operator delete(p, alignment); }
  };
  template <class T>
  static std::unique_ptr<T, release> allocate(std::size_t n) {
    const auto alignment = std::align_val_t{alignof(T) > 64 ? alignof(T) : 64};
    return {static_cast<T*>(::operator new(n * sizeof(T), alignment)), release{alignment}};
  }

  template <class T>
  static void copy(T* dst, const T* src, std::size_t n) {
    if (n != 0 && dst != src) std::memcpy(dst, src, n * sizeof(T));
  }

  template <class T, class Op>
  static void combine(T* dst, const T* received, std::size_t n, Op& op, operand_order order) {
    if (order == operand_order::received_last)
      detail::combine_received_last(dst, received, n, op);
    else
      detail::combine_received_first(dst, received, n, op);
  }

  template <class T, class Op>
  static void finalize(T* dst, std::size_t n, Op& op, int nranks) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = op.finalize(dst[i], nranks);
  }
};

}  // namespace collectives
