// A span of elements that live in device memory. The front-end calls take it where
// they take any buffer; its `memory_space` type sends the call down the device path
// (memory_ops<Space> for local steps, the transport's device messages for the rest).
//
//   float* grad;  cudaMalloc(&grad, n * sizeof(float));
//   coll::all_reduce(comm, coll::device_span{grad, n}, coll::sum{});
//
// It never dereferences its pointer on the host, so host code may hold one freely.
#pragma once

#include <cstddef>
#include <type_traits>

#include "memory_space.hpp"

namespace collectives {

template <class T, class Space = device_memory>
class device_span {
 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using memory_space = Space;
  using iterator = T*;  // contiguous, so the front end can take data() and size()

  constexpr device_span() = default;
  constexpr device_span(T* data, std::size_t count) noexcept : data_(data), count_(count) {}
  // A span of T converts to a span of const T, as std::span does.
  template <class U>
    requires(std::is_same_v<const U, T> && !std::is_same_v<U, T>)
  constexpr device_span(const device_span<U, Space>& other) noexcept : data_(other.data()), count_(other.size()) {}

  constexpr T* data() const noexcept { return data_; }
  constexpr std::size_t size() const noexcept { return count_; }
  constexpr bool empty() const noexcept { return count_ == 0; }
  constexpr T* begin() const noexcept { return data_; }
  constexpr T* end() const noexcept { return data_ + count_; }

  constexpr device_span subspan(std::size_t offset, std::size_t count) const noexcept { return {data_ + offset, count}; }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

template <class T>
device_span(T*, std::size_t) -> device_span<T>;

// True for memory spaces other than the host's.
template <class Space>
inline constexpr bool is_device_space_v = !std::is_same_v<Space, host_memory>;

}  // namespace collectives
