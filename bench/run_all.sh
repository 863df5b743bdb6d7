#!/usr/bin/env bash
# Reproduces the tables of docs/benchmarks.md (a few minutes on a 2-core machine):
#   1. builds rlx, bench/raw_floor and bench/micro_kernels (Release, CPU only) in $BUILD
#   2. `rlx bench` of every graph in bench/graphs/ (every mode): per-mode tables
#   3. bench/compare_torch.py: rlx vs PyTorch with the same weights, inputs and thread
#      count, raw OpenBLAS sgemm and the memory-bandwidth floor
#   4. the Google Benchmark micro-benchmarks of the hot kernels
# Results go to $OUT (default out/bench): *.md, compare.json, micro.json.
# Environment: RLX_NUM_THREADS (default nproc) for rlx, OpenBLAS and PyTorch alike;
# REPS (default 10), ROUNDS (default 3), SKIP_BUILD=1, SKIP_MICRO=1.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-bench}
OUT=${OUT:-out/bench}
REPS=${REPS:-10}
ROUNDS=${ROUNDS:-3}
THREADS=${RLX_NUM_THREADS:-$(nproc)}
export RLX_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
PY=${PYTHON:-/usr/bin/python3}
mkdir -p "$OUT"

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRLX_VULKAN=OFF -DRLX_TESTS=OFF >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" --target rlx raw_floor micro_kernels
fi
RLX=$BUILD/apps/rlx/rlx

{
  echo "# rlx benchmark run $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (+ local changes)'), threads $THREADS, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|L1d|L2|L3|Flags)' | sed 's/^Flags:.*\(avx2\).*/Flags: ... avx2 .../' | sed 's/^/    /'
  echo
} >"$OUT/machine.md"
cat "$OUT/machine.md"

# ---- 2. rlx bench, every graph, every mode ----
bench() {  # name, then rlx arguments
  local name=$1; shift
  echo "## $name"
  echo
  echo '```'
  echo "rlx bench bench/graphs/$name.json $* --reps $REPS"
  echo '```'
  "$RLX" bench "bench/graphs/$name.json" "$@" --reps "$REPS" 2>/dev/null
  echo
}
{
  bench matmul_1024 --input a=random:1 --input b=random:2
  bench matmul_2048 --input a=random:1 --input b=random:2
  bench gelu_chain --input x=random:1
  bench decoder_block --random-params --input x=random:1
  bench decode_step --random-params --input x=random:1 --input k_cache=random:2 --input v_cache=random:3 --input pos=i32=256
} | tee "$OUT/rlx_bench.md"

# ---- 3. rlx vs PyTorch, with the floors ----
"$PY" bench/compare_torch.py --rlx "$RLX" --raw "$BUILD/bench/raw_floor" --reps "$REPS" --rounds "$ROUNDS" \
  --threads "$THREADS" --json "$OUT/compare.json" | tee "$OUT/compare.md"

# ---- 4. micro-benchmarks ----
if [ "${SKIP_MICRO:-0}" != 1 ]; then
  "$BUILD/bench/micro_kernels" --benchmark_min_time=0.2 --benchmark_out="$OUT/micro.json" \
    --benchmark_out_format=json | tee "$OUT/micro.txt"
fi
echo "results in $OUT"
