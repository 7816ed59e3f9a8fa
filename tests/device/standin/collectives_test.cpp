// The device tests with host memory standing in for device memory (see host_runtime.hpp).
#include "../collectives_test.hpp"
