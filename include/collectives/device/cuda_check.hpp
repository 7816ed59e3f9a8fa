// CUDA runtime errors as collectives::error (errc::device_error), naming the call.
// Plain C++: the CUDA runtime API needs no device compiler.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "../error.hpp"

namespace collectives::device {

inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw error(errc::device_error,
                std::string(what) + " failed: " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

// The number of CUDA devices this process sees; 0 where there is no driver or device.
inline int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" status
    return 0;
  }
  return n;
}

}  // namespace collectives::device
