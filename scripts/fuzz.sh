#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, -DRLX_FUZZ=ON, ASan+UBSan) into build-fuzz/
# and runs each for SECONDS (default 15). Exits non-zero if any harness finds a crash,
# a sanitizer report, a leak, an escaped non-rlx exception or a timeout.
#
#   scripts/fuzz.sh [SECONDS_PER_HARNESS] [HARNESS...]
#     HARNESS: fuzz_graph fuzz_npy fuzz_safetensors fuzz_spec fuzz_onnx fuzz_onnx_struct (default: all six, one after another)
#     fuzz_onnx_struct mutates parsed ModelProtos (op types, attributes, subgraphs, shapes, dtypes,
#     initializers) in a custom mutator; fuzz_onnx mutates bytes.
#     SECONDS 0: only replay the seeds and the saved corpus once (a quick regression check)
#   Environment: BUILD_DIR (default build-fuzz), FUZZ_SKIP_BUILD=1 (reuse the build, e.g. when
#   running two harnesses in parallel), FUZZ_ARGS (extra libFuzzer flags).
#
# The corpus grows in BUILD_DIR/corpus/HARNESS; seeds are gathered from the repository
# (graphs/*.json, tests/golden/**/graph.json, tests/golden/bad/*.json, tests/data/io/*,
# tests/fuzz/seeds/HARNESS, and tests/fuzz/corpus/HARNESS.tar.xz: a minimised corpus kept from a
# long run) into BUILD_DIR/seeds/HARNESS on every run. Crashing inputs are
# saved as BUILD_DIR/artifacts/HARNESS-crash-*, logs in BUILD_DIR/logs/HARNESS.log.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SECONDS_PER=${1:-15}
shift || true
HARNESSES=("$@")
((${#HARNESSES[@]})) || HARNESSES=(fuzz_graph fuzz_npy fuzz_safetensors fuzz_spec fuzz_onnx fuzz_onnx_struct)
BUILD_DIR=${BUILD_DIR:-build-fuzz}
[[ $SECONDS_PER =~ ^[0-9]+$ ]] || { echo "fuzz.sh: SECONDS must be a non-negative integer, got '$SECONDS_PER'" >&2; exit 2; }

if [[ "${FUZZ_SKIP_BUILD:-0}" != 1 ]]; then
  CC=${CC:-clang} CXX=${CXX:-clang++} cmake -S . -B "$BUILD_DIR" -G Ninja -DRLX_FUZZ=ON -DRLX_TESTS=OFF \
    -DRLX_BENCH=OFF -DRLX_VULKAN=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
    >/dev/null || { echo "fuzz.sh: configure failed (needs clang, e.g. apt-get install clang libclang-rt-dev)" >&2; exit 2; }
  cmake --build "$BUILD_DIR" -j "${JOBS:-2}" --target fuzzers || { echo "fuzz.sh: build failed" >&2; exit 2; }
fi

max_len() {
  case $1 in
    fuzz_graph) echo 8192 ;;         # the largest example graph is ~7 KB
    fuzz_npy) echo 4096 ;;           # header (<= 64 KB allowed, but small in practice) + data
    fuzz_safetensors) echo 4096 ;;   # 8-byte length + JSON header + data
    fuzz_spec) echo 256 ;;           # one command-line SPEC
    fuzz_onnx) echo 16384 ;;         # small models (node-test models are 100-300 bytes)
    fuzz_onnx_struct) echo 16384 ;;  # the same models, mutated as ModelProtos
  esac
}

# Copies files into the seed directory under names unique per source path.
gather() {
  local dst=$1; shift
  local f
  for f in "$@"; do
    [[ -f $f ]] || continue
    cp "$f" "$dst/$(echo "${f#"$ROOT"/}" | tr '/' '_')"
  done
}

seed() {
  local h=$1 dst=$BUILD_DIR/seeds/$1
  rm -rf "$dst"; mkdir -p "$dst"
  shopt -s nullglob globstar
  case $h in
    fuzz_graph) gather "$dst" graphs/*.json tests/golden/**/graph.json tests/golden/bad/*.json ;;
    fuzz_npy) gather "$dst" tests/data/io/*.npy graphs/*.inputs/*.npy $(ls tests/golden/*/*.npy | head -40) ;;
    fuzz_safetensors) gather "$dst" tests/data/io/*.safetensors tests/golden/**/*.safetensors graphs/mlp.safetensors graphs/norms.safetensors ;;
    fuzz_spec) ;;
    # the committed seeds plus, when the ONNX node tests were generated in build/, some of them
    fuzz_onnx) gather "$dst" $(ls build/onnx-node-tests/node/*/model.onnx 2>/dev/null | awk 'NR % 8 == 1') ;;
    # the byte-level harness's seeds too: every one is a valid ModelProto to mutate
    fuzz_onnx_struct) gather "$dst" tests/fuzz/seeds/onnx/* graphs/*.onnx ;;
  esac
  gather "$dst" tests/fuzz/seeds/"${h#fuzz_}"/*
  # a committed corpus (a minimised libFuzzer corpus from a long run, one xz tarball)
  if [[ -f tests/fuzz/corpus/$h.tar.xz ]]; then
    tar -xJf "tests/fuzz/corpus/$h.tar.xz" -C "$dst"
  fi
  shopt -u nullglob globstar
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$BUILD_DIR/logs" "$BUILD_DIR/artifacts"
status=0
printf '%-18s %8s %10s %8s %14s %6s %s\n' harness seconds runs exec/s corpus cov result
for h in "${HARNESSES[@]}"; do
  bin=$BUILD_DIR/tests/fuzz/$h
  [[ -x $bin ]] || { echo "fuzz.sh: no harness $bin (known: fuzz_graph fuzz_npy fuzz_safetensors fuzz_spec fuzz_onnx fuzz_onnx_struct)" >&2; status=2; continue; }
  seed "$h"
  mkdir -p "$BUILD_DIR/corpus/$h"
  dict=tests/fuzz/${h#fuzz_}.dict
  [[ $h == fuzz_onnx_struct ]] && dict=tests/fuzz/onnx.dict
  args=(-max_len="$(max_len "$h")" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$BUILD_DIR/artifacts/$h-")
  [[ -f $dict ]] && args+=(-dict="$dict")
  if ((SECONDS_PER == 0)); then args+=(-runs=0); else args+=(-max_total_time="$SECONDS_PER"); fi
  # shellcheck disable=SC2086
  "$bin" "${args[@]}" ${FUZZ_ARGS:-} "$BUILD_DIR/corpus/$h" "$BUILD_DIR/seeds/$h" >"$BUILD_DIR/logs/$h.log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$BUILD_DIR/logs/$h.log" | tail -1 | awk '{print $2}')
  eps=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$BUILD_DIR/logs/$h.log" | tail -1 | awk '{print $2}')
  # corpus: units/bytes libFuzzer holds at the end (seeds that add coverage + new finds); cov: edges
  corpus=$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' "$BUILD_DIR/logs/$h.log" | tail -1 | cut -d' ' -f2)
  cov=$(grep -o 'cov: [0-9]*' "$BUILD_DIR/logs/$h.log" | tail -1 | cut -d' ' -f2)
  if ((rc == 0)); then result=ok; else result="FAILED (rc $rc, see $BUILD_DIR/logs/$h.log)"; status=1; fi
  printf '%-18s %8s %10s %8s %14s %6s %s\n' "$h" "$SECONDS_PER" "${runs:-?}" "${eps:-?}" "${corpus:-?}" "${cov:-?}" "$result"
  if ((rc != 0)); then grep -E 'ERROR|escaped|runtime error|Test unit written' "$BUILD_DIR/logs/$h.log" | head -5 | sed 's/^/    /'; fi
done
exit $status
