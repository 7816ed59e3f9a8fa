#!/usr/bin/env bash
# Builds and runs the flagship example: a ring all-reduce written by hand from
# send/recv, checked against the library's own all_reduce, on 4 ranks that are 4
# processes started by the project's launcher, collectives-run, and joined over TCP.
# Arguments go to the example: `scripts/run-example.sh 100000` sums 100000 floats.
# (Started directly, without the launcher, the example runs its ranks as threads:
# "$build/examples/01_ring_all_reduce" [ranks] [elements].)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --build-only
build=${BUILD_DIR:-build}
# The examples need the TCP transport (ON by default; said again here in case this
# build folder was configured without it), and the example is built at -O3 even where
# the tests' command built it at -O1 for its runs (COLLECTIVES_PROGRAMS_FOR_TESTS). The
# compiler and generator are those of scripts/run-tests.sh, so that the tests' command,
# run next, keeps this folder.
scripts/configure.sh "$build" -DCMAKE_BUILD_TYPE=Release \
  -DCOLLECTIVES_BUILD_EXAMPLES=ON -DCOLLECTIVES_PROGRAMS_FOR_TESTS=OFF -DCOLLECTIVES_WITH_ASIO=ON
cmake --build "$build" -j "$(nproc)" --target 01_ring_all_reduce collectives-run
"$build/tools/collectives-run" -n 4 "$build/examples/01_ring_all_reduce" "$@"
