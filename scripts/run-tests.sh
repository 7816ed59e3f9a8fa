#!/usr/bin/env bash
# Builds everything (warnings are errors) and runs the whole test suite.
# CXX picks the compiler (g++ by default, clang++ works too); BUILD_DIR the folder;
# CMAKE_ARGS adds configure options, CTEST_ARGS ctest's (say, -LE netns).
# It ends with the time of each step (docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
scripts/install-deps.sh
# nvcc, where CUDA installs it, builds the CUDA part too (collectives::cuda: its tests
# need a GPU to run and are skipped without one); without nvcc that part is left out.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
# Without a GPU nothing here runs the CUDA part (its programs start and skip), so it is
# compiled to check that it compiles: the device code to PTX only (the driver would
# compile that for a GPU; the machine code for sm_90 took a third of the CUDA part's
# build), the host code unoptimized, in the .cu files (the CUDA benchmarks' reductions:
# 31 s of the host compiler against 60 s at -O1 and 64 s at -O3) and in the CUDA
# programs' C++ sources (COLLECTIVES_CUDA_CHECK_ONLY: 90 s of g++ against 47). With a
# GPU, sm_90's machine code and -O3 as usual.
cuda_arch=()
if command -v nvcc >/dev/null && ! nvidia-smi -L >/dev/null 2>&1; then
  cuda_arch=(-DCMAKE_CUDA_ARCHITECTURES=90-virtual "-DCMAKE_CUDA_FLAGS_RELEASE=-O0 -DNDEBUG" -DCOLLECTIVES_CUDA_CHECK_ONLY=ON)
fi
build=${BUILD_DIR:-build}
installed=$SECONDS
scripts/configure.sh "$build" -DCMAKE_BUILD_TYPE=Release "${cuda_arch[@]}" \
  -DCOLLECTIVES_BUILD_TESTS=ON -DCOLLECTIVES_BUILD_EXAMPLES=ON -DCOLLECTIVES_BUILD_BENCH=ON -DCOLLECTIVES_PROGRAMS_FOR_TESTS=ON -DCOLLECTIVES_WITH_ASIO=ON -DCOLLECTIVES_REQUIRE_TCP=ON -DCOLLECTIVES_REQUIRE_RDMA=ON -DCOLLECTIVES_REQUIRE_TORCH=ON ${CMAKE_ARGS:-}
configured=$SECONDS
cmake --build "$build" -j "$(nproc)"
built=$SECONDS
# Twice as many tests at once as there are cores, since many of them mostly wait
# (docs/testing.md), the longest first: ctest's figures of earlier runs, in a fresh
# build folder tests/ctest-costs.txt's.
costs="$build/Testing/Temporary/CTestCostData.txt"
[ -f "$costs" ] || { mkdir -p "$(dirname "$costs")" && cp tests/ctest-costs.txt "$costs"; }
status=0
ctest --test-dir "$build" -j "$((2 * $(nproc)))" --output-on-failure ${CTEST_ARGS:-} || status=$?
echo "run-tests.sh ($build): packages $((installed - start)) s, configure $((configured - installed)) s," \
     "build $((built - configured)) s, tests $((SECONDS - built)) s"
exit $status
