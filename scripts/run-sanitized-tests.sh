#!/usr/bin/env bash
# The unit, store, transport and conformance tests built with clang under a sanitizer:
#   scripts/run-sanitized-tests.sh address,undefined     # in build-asan
#   scripts/run-sanitized-tests.sh thread                # in build-tsan
# BUILD_ONLY=1 stops after the build (CI builds ahead, at idle priority: .ci/run).
# These are the tests whose code runs in one process with threads (inproc ranks, the
# stores' and tcp's Asio threads, progress threads) or forks its ranks (shm, tcp), where
# a sanitizer sees every rank; the collective grids, examples and launchers repeat the
# same code at larger sizes and would multiply the time. split_test runs a job's
# communicator and its groups on one transport with one progress thread; under TSan
# only its cases that share calls in flight and the thread (split_test_shared_progress:
# the whole of it takes minutes there). TSan skips the tests that run on one thread
# (the schedules, the executor, the ops, settings, matching): ASan and UBSan check
# those. Any finding fails the test.
set -euo pipefail
cd "$(dirname "$0")/.."
sanitize=${1:?"which sanitizer: address,undefined or thread"}
case $sanitize in
  thread) build=${BUILD_DIR:-build-tsan} ;;
  *) build=${BUILD_DIR:-build-asan} ;;
esac
tests=(errors_test call_check_test call_handle_test inproc_test shm_test tcp_test automatic_transport_test
       conformance_test store_test store_security_test rendezvous_test progress_thread_test)
targets=("${tests[@]}" split_test)
if [[ $sanitize == thread ]]; then
  tests+=(split_test_shared_progress progress_thread_test_tsan)
else
  tests+=(split_test_floating_point split_test_user_ops split_test_the_rest schedule_test executor_test builtin_ops_test settings_test matching_test)
  targets+=(schedule_test executor_test builtin_ops_test settings_test matching_test)
fi
pattern=$(IFS='|'; echo "${tests[*]}")
# LIST_ONLY=1 prints the tests' names as one pattern (the clang pass leaves them to this).
if [ -n "${LIST_ONLY:-}" ]; then echo "$pattern"; exit 0; fi
scripts/install-deps.sh --build-only
# -O1, as the sanitizers' own documentation advises: quicker to compile than -O2,
# and the checks see the same code. Line tables are all a report's stack needs (the
# full debug information took an eighth of the compile: errors_test 52 s against 46 s).
# Without libfabric: none of these tests runs rdma, whose engine, compiled into the
# library, took as long as the rest of it.
CXX=clang++ scripts/configure.sh "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DCOLLECTIVES_SANITIZE="$sanitize" -DCOLLECTIVES_BUILD_TESTS=ON -DCOLLECTIVES_BUILD_EXAMPLES=OFF \
  -DCOLLECTIVES_BUILD_BENCH=OFF -DCOLLECTIVES_WITH_CUDA=OFF -DCOLLECTIVES_GRIDS_AS_PROCESSES=OFF \
  -DCOLLECTIVES_WITH_ASIO=ON -DCOLLECTIVES_REQUIRE_TCP=ON -DCOLLECTIVES_WITH_LIBFABRIC=OFF
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
[ -z "${BUILD_ONLY:-}" ] || exit 0
# halt_on_error: the first report fails the test; ASan's leak check stays on.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  ctest --test-dir "$build" -j "$(nproc)" --output-on-failure -R "^(${pattern})\$"
