#!/usr/bin/env bash
# A second compiler's warnings (clang++ by default): every C++ source of the build
# compiled under the project's warnings, as errors, checking only (-fsyntax-only: every
# template the source uses is instantiated, as in a build, but no code is generated and
# nothing is linked or run), then the tests that are compiles themselves: every call
# instantiated, and the compile-fail messages.
#   CXX=clang++ scripts/check-warnings.sh          # in build-clang
# CMAKE_ARGS adds configure options; LEAVE_OUT names targets not to check
# ('name|name...': CI leaves out what its sanitized passes compile with clang).
# The second compiler's code runs in the sanitized passes (clang too), which run the
# code every collective runs on; the g++ pass runs everything.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
scripts/install-deps.sh --build-only
build=${BUILD_DIR:-build-clang}
# Checking only: no precompiled headers (a header checked is not a header emitted), and
# the flags only for the build type's, so that CMake's own checks at configure time
# still compile and link.
CXX=${CXX:-clang++} scripts/configure.sh "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-fsyntax-only" \
  -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON -DCOLLECTIVES_BUILD_TESTS=ON -DCOLLECTIVES_BUILD_EXAMPLES=ON \
  -DCOLLECTIVES_WITH_ASIO=ON -DCOLLECTIVES_REQUIRE_TCP=ON -DCOLLECTIVES_REQUIRE_RDMA=ON ${CMAKE_ARGS:-}
configured=$SECONDS
# Every object of the build but the headers-alone checks (a matter of the header's text
# and the standard library, which both compilers share; the g++ pass runs them), each
# compiled by the command the build would run (ninja -t commands), writing nothing:
# not through ninja, whose links and tools would wait on objects never written.
mapfile -t objects < <(ninja -C "$build" -t targets all | sed -n 's/^\([^:]*\.o\): CXX_COMPILER_.*/\1/p' |
                       grep -Ev "/CMakeFiles/(headers_compile_alone[a-z_]*|${LEAVE_OUT:-})\.dir/")
for object in "${objects[@]}"; do (cd "$build" && ninja -t commands -s "$object"); done |
  sed -E 's/ -MD -MT [^ ]+ -MF [^ ]+//; s/ -o [^ ]+ -c / /' >"$build/check-commands.sh"
(cd "$build" && xargs -P "$(nproc)" -d '\n' -n 1 sh -c <check-commands.sh)
checked=$SECONDS
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure -R '^(headers_every_call_instantiated|compile_fail_.*)$'
echo "check-warnings.sh ($build, ${#objects[@]} sources): configure $((configured - start)) s," \
     "compile $((checked - configured)) s, compile tests $((SECONDS - checked)) s"
