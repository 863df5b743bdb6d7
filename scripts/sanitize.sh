#!/usr/bin/env bash
# Builds build-asan/ with AddressSanitizer + UndefinedBehaviorSanitizer (RLX_SANITIZE=ON)
# and runs the whole ctest suite under them: a leak, an out-of-bounds access or any
# undefined behaviour fails the test that triggered it (UBSan halts on the first report).
#
#   scripts/sanitize.sh [CTEST_ARGS...]      e.g. scripts/sanitize.sh -R test_errors
#   Environment: BUILD_DIR (build-asan), BUILD_TYPE (Debug; RelWithDebInfo also works),
#                JOBS (nproc), RLX_VULKAN (OFF: GPU drivers are not built with the sanitizers
#                and report their own leaks).
# The test binaries run `rlx` as a subprocess; it inherits the options below, so the
# command-line runs are checked too (a sanitizer report there changes the exit code).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-asan}
BUILD_TYPE=${BUILD_TYPE:-Debug}
JOBS=${JOBS:-$(nproc)}
start=$(date +%s)
launcher=()
# ccache, where installed (as scripts/build.sh): a second checkout or run rebuilds only what changed.
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# float-cast-overflow is part of clang's -fsanitize=undefined but not GCC's: ask for it (it
# found an (int64_t) of 2^63 in round_to_dtype).
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DRLX_SANITIZE=ON \
  -DCMAKE_CXX_FLAGS="-fsanitize=float-cast-overflow" -DCMAKE_C_FLAGS="-fsanitize=float-cast-overflow" \
  -DRLX_VULKAN="${RLX_VULKAN:-OFF}" -DRLX_BENCH=OFF -DRLX_TESTS=ON "${launcher[@]}" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
built=$(date +%s)

# allocator_may_return_null=1: a huge allocation returns null as in a normal build, so rlx's
# "out of memory" path (exit 3) is what gets tested, not ASan's allocation-size report.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-}
status=0
# The binaries' own defaults come first (cmake/sanitizer_options.c: intercept_tls_get_addr=0,
# without which LeakSanitizer's tracer crashes at exit on some allocation layouts).
ctest --test-dir "$BUILD_DIR" -j "$JOBS" --output-on-failure --timeout 600 "$@" || status=$?
end=$(date +%s)
echo "sanitize.sh: build $((built - start)) s, tests $((end - built)) s ($BUILD_TYPE, ASan+UBSan, detect_leaks=1)" >&2
exit $status
