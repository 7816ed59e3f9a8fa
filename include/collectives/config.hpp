// The library's only macros: its version, host/device annotations, feature
// detection, and the switch between header-only use and separate compilation.
#pragma once

// The version of collectives, as in CMakeLists.txt's project() (configuring checks that
// they agree).
#define COLLECTIVES_VERSION_MAJOR 0
#define COLLECTIVES_VERSION_MINOR 1
#define COLLECTIVES_VERSION_PATCH 0
#define COLLECTIVES_VERSION_STRING "0.1.0"

// Functions a reduce op or a reduction loop must offer to both the host and a CUDA
// device are marked with this; it expands to nothing outside nvcc.
#if defined(__CUDACC__)
#define COLLECTIVES_HOST_DEVICE __host__ __device__
#define COLLECTIVES_HAS_CUDA 1
#else
#define COLLECTIVES_HOST_DEVICE
#define COLLECTIVES_HAS_CUDA 0
#endif

// In a .cu file that includes <collectives/device/reduce.cuh>: makes the device
// reductions of elements of T under Op there, for device calls made in the program's
// files that a C++ compiler builds (device/memory_ops.hpp; docs/cuda.md).
#define COLLECTIVES_DEVICE_REDUCTIONS(T, ...) template struct ::collectives::device::detail::reductions_of<T, __VA_ARGS__>

// Unrolls the next host loop by 4 (see ops/host_reduce.hpp). nvcc's front end does not
// know the GCC spelling, and its own `#pragma unroll` is for device code.
#if defined(__CUDACC__)
#define COLLECTIVES_UNROLL_4
#else
#define COLLECTIVES_UNROLL_4 _Pragma("GCC unroll 4")
#endif

// Host reduction loops compiled a second time for AVX2, chosen at run time on a CPU
// that has it (ops/host_reduce.hpp): on x86-64 with g++ or clang where the build
// targets less, as Debian's default -march does.
#if defined(__x86_64__) && !defined(__AVX2__) && !defined(__CUDACC__) && (defined(__GNUC__) || defined(__clang__))
#define COLLECTIVES_AVX2_CLONES 1
#else
#define COLLECTIVES_AVX2_CLONES 0
#endif

// Header-only by default: the start-up, the transports' engines and the library's
// other functions that are not templates are inline, compiled in every translation
// unit that uses them. With COLLECTIVES_SEPARATE_COMPILATION defined in every
// translation unit of a program (the collectives::compiled target does that), they are
// compiled once, into that library (or into one source file of the program's that
// includes <collectives/impl/src.hpp>).
#if defined(COLLECTIVES_SEPARATE_COMPILATION)
#define COLLECTIVES_DECL
#else
#define COLLECTIVES_DECL inline
#endif

// Cores and NUMA nodes from hwloc (bootstrap/topology.hpp) when the collectives::hwloc
// target defines COLLECTIVES_WITH_HWLOC, else from Linux's sysfs, so that header-only
// use needs no library. Define it in every translation unit of a program, or in none.
#if defined(COLLECTIVES_WITH_HWLOC)
#define COLLECTIVES_HAS_HWLOC 1
#else
#define COLLECTIVES_HAS_HWLOC 0
#endif

// 1 in a ThreadSanitizer build (g++ -fsanitize=thread defines __SANITIZE_THREAD__, clang
// answers __has_feature): synchronization it cannot see is then told to it.
#if defined(__SANITIZE_THREAD__)
#define COLLECTIVES_THREAD_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define COLLECTIVES_THREAD_SANITIZER 1
#endif
#endif
#if !defined(COLLECTIVES_THREAD_SANITIZER)
#define COLLECTIVES_THREAD_SANITIZER 0
#endif
