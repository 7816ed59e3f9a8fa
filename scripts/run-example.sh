#!/usr/bin/env bash
# Builds and runs the flagship example: a ring all-reduce written by hand from
# send/recv, checked against the library's own all_reduce, on 4 ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCOLLECTIVES_BUILD_EXAMPLES=ON >/dev/null
cmake --build "$build" -j "$(nproc)" --target 01_ring_all_reduce
"$build/examples/01_ring_all_reduce" "${@:-4}"
