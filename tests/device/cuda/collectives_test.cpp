// The device tests on a CUDA device, ranks sharing it or not. Without one, every
// rank says so and exits 77, which ctest reports as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cstdio>

#include "../collectives_test.hpp"

int main(int argc, char** argv) {
  if (!testing::have_device()) {
    std::printf("SKIPPED: no CUDA device in this process (cudaGetDeviceCount found none)\n");
    return 77;
  }
  return doctest::Context(argc, argv).run();
}
