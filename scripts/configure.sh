#!/usr/bin/env bash
# Configures a build folder with Ninja and the compiler CXX names (g++ by default):
#   scripts/configure.sh BUILD_DIR [cmake options...]
# A folder that an earlier command configured with another compiler or generator is
# configured afresh: CMake would otherwise start over by itself when it noticed, and
# drop every option given here.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?"which build folder"}
shift
cxx=$(command -v "${CXX:-g++}")
cache="$build/CMakeCache.txt"
if [ -f "$cache" ] && ! { grep -qxF "CMAKE_GENERATOR:INTERNAL=Ninja" "$cache" &&
                          grep -qxF -e "CMAKE_CXX_COMPILER:STRING=$cxx" -e "CMAKE_CXX_COMPILER:FILEPATH=$cxx" "$cache"; }; then
  echo "$build was configured with another compiler or generator: configuring it afresh for $cxx and Ninja"
  rm -rf "$cache" "$build/CMakeFiles"
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" "$@" >/dev/null
