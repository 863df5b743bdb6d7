#!/usr/bin/env bash
# Quick start #2: installs what rlx needs, builds it, and runs the whole test suite:
#   1. unit, golden and CLI tests (CTest) on the CPU and, through lavapipe, Vulkan
#   2. the golden suite (and test_long_lines) on Vulkan with the Khronos validation layer (fails on any message)
#   3. the goldens' NumPy reference re-checked against the committed files, and every graph
#      validated against the published JSON Schema
#   4. the suite again under AddressSanitizer + UndefinedBehaviorSanitizer
#   5. each fuzz harness for a short time
#   6. the Debian package: built, linted, installed into a temporary root, run on the goldens
# `scripts/test.sh --quick` runs stages 1-3 only.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[[ "${1:-}" == "--quick" ]] && quick=1
jobs=$(nproc)
stage() { printf '\n==== %s\n' "$*"; }

stage "setup"
scripts/setup.sh
stage "build (Release)"
scripts/build.sh
stage "tests (CTest)"
ctest --test-dir build -j "$jobs" --output-on-failure --timeout 600

if [[ -x build/tests/test_golden ]] && build/apps/rlx/rlx devices --backend vulkan >/dev/null 2>&1; then
  stage "golden suite on Vulkan under the validation layer"
  # Its compile cache and cache key go to the build tree, as ctest's do (tests/CMakeLists.txt).
  validated=(env -u RLX_CACHE_DIR -u RLX_CACHE -u RLX_CACHE_MAX_MB -u RLX_CACHE_SECRET
             XDG_CACHE_HOME="$PWD/build/test-xdg-cache" XDG_CONFIG_HOME="$PWD/build/test-xdg-config" RLX_VK_VALIDATION=1)
  "${validated[@]}" build/tests/test_golden --gtest_filter='Cases/Golden.*vulkan*' --gtest_brief=1
  # the long-line passes (both routes): several dispatches a kernel, optional outputs bound or not
  "${validated[@]}" build/tests/test_long_lines --gtest_brief=1
fi

stage "NumPy reference re-check and graph schema"
/usr/bin/python3 scripts/gen_goldens.py --check
/usr/bin/python3 scripts/check_schema.py

if ((quick)); then exit 0; fi
stage "package: cpack, lintian, the installed binary on the goldens, man pages, completion"
scripts/package_test.sh build
if [[ -x scripts/sanitize.sh ]]; then
  stage "ASan + UBSan"
  scripts/sanitize.sh
fi
if [[ -x scripts/fuzz.sh ]]; then
  stage "fuzzing (short)"
  scripts/fuzz.sh 12
fi
stage "all stages passed"
