#!/usr/bin/env bash
# Builds everything (warnings are errors) and runs the whole test suite.
# CXX picks the compiler (g++ by default, clang++ works too); BUILD_DIR the folder;
# CMAKE_ARGS adds configure options, CTEST_ARGS ctest's (say, -LE netns).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# nvcc, where CUDA installs it, builds the CUDA part too (collectives::cuda: its tests
# need a GPU to run and are skipped without one); without nvcc that part is left out.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="${CXX:-g++}" \
  -DCOLLECTIVES_BUILD_TESTS=ON -DCOLLECTIVES_BUILD_EXAMPLES=ON -DCOLLECTIVES_BUILD_BENCH=ON -DCOLLECTIVES_WITH_ASIO=ON -DCOLLECTIVES_REQUIRE_TCP=ON -DCOLLECTIVES_REQUIRE_RDMA=ON ${CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure ${CTEST_ARGS:-}
