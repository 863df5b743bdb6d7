#!/usr/bin/env bash
# Configures and builds rlx into build/ (Release). Extra arguments go to cmake configure.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
launcher=()
# ccache, where installed, lets several checkouts (and rebuilds after a branch switch) share objects.
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "${launcher[@]}" "$@" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
