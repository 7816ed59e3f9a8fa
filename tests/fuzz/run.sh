#!/usr/bin/env bash
# Runs every fuzz target for [seconds] each (default 600), one after another, from the
# seeds in corpus/ plus what earlier runs found (kept in the build folder). Builds them
# with clang++ in BUILD_DIR (default build-clang) first. A failing input is saved under
# BUILD_DIR/tests/fuzz/artifacts/ and the script stops with the target's status; each
# run's whole output is in BUILD_DIR/tests/fuzz/<name>.log.
set -euo pipefail
seconds=${1:-600}
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build-clang}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ -DCOLLECTIVES_BUILD_TESTS=ON \
  -DCOLLECTIVES_BUILD_FUZZERS=ON -DCOLLECTIVES_REQUIRE_TCP=ON -DCOLLECTIVES_WITH_CUDA=OFF >/dev/null
targets=(fuzz_frame fuzz_matching fuzz_auth fuzz_store_protocol fuzz_address)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
out="$build/tests/fuzz"
for target in "${targets[@]}"; do
  name=${target#fuzz_}
  mkdir -p "$out/corpus/$name" "$out/artifacts"
  echo "== $target: $seconds s"
  status=0
  "$out/$target" -max_total_time="$seconds" -malloc_limit_mb=128 -print_final_stats=1 \
    -artifact_prefix="$out/artifacts/$name-" "$out/corpus/$name" "tests/fuzz/corpus/$name" >"$out/$name.log" 2>&1 ||
    status=$?
  grep -E '^(Done|stat::number_of_executed_units|stat::average_exec_per_sec)|violated|ERROR|SUMMARY' "$out/$name.log" || true
  [ "$status" -eq 0 ] || { echo "$target failed; its input is in $out/artifacts/" >&2; exit "$status"; }
done
