#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <malloc.h>

#include <climits>

// The grids allocate and free buffers of megabytes thousands of times. glibc hands
// each one back to the kernel (mmap above its threshold, a trimmed heap top), so the
// next one page-faults in afresh: on the 2-core virtual machine CI runs on, that was
// half of a grid's time on threads and three quarters over shm. Freed memory is kept
// for reuse instead (up to glibc's limit of 32 MiB a block). The library's code is
// the same; only the test process's allocator keeps what it had.
namespace {
const bool freed_memory_kept = [] {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
  return true;
}();
}  // namespace
