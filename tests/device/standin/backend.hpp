// The device tests on host memory standing in for device memory (host_runtime.hpp):
// they run on every machine.
#pragma once

#include <span>
#include <vector>

#include <collectives/device_span.hpp>

#include "../host_runtime.hpp"

namespace testing {

using device_runtime = host_runtime;
using device_space = standin_device_memory;

// A buffer in "device" memory, filled from and read back to the host.
template <class T>
class device_vector {
 public:
  explicit device_vector(std::span<const T> from) : data_(from.begin(), from.end()) {}
  explicit device_vector(std::size_t n) : data_(n) {}
  collectives::device_span<T, device_space> span() { return {data_.data(), data_.size()}; }
  std::vector<T> to_host() const { return data_; }

 private:
  std::vector<T> data_;
};

inline bool have_device() { return true; }

}  // namespace testing
