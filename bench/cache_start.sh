#!/usr/bin/env bash
# Cold vs warm process start with the persistent compile cache (issue 11, docs/cache.md).
# Each round: `rlx cache clear`, one process (cold: optimiser, glslang, pipelines, then stored),
# then one more (warm: the same graph, inputs and device, read from the cache). Cold and warm
# alternate so that a change in the machine's load hits both alike. Reported: medians of the
# first run as rlx times it (planning + compiling + the run) and of the whole process (wall).
#
# usage: bench/cache_start.sh [BACKEND] [ROUNDS] [GRAPH ARGS...]
#   default graph: graphs/llama_block.json with its params and input, compiled mode
set -euo pipefail
cd "$(dirname "$0")/.."
RLX=${RLX:-build/apps/rlx/rlx}
backend=${1:-cpu}
rounds=${2:-5}
shift $(( $# > 2 ? 2 : $# ))
graph=("$@")
[ ${#graph[@]} -eq 0 ] && graph=(graphs/llama_block.json -p graphs/llama_block.safetensors
                                  --input x=@graphs/llama_block.inputs/x.npy)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export RLX_CACHE_DIR=$dir/cache
one() {  # prints "first_ms wall_ms"
  local t0 t1 first
  t0=$(date +%s%N)
  "$RLX" run "${graph[@]}" --mode compiled -b "$backend" --json >"$dir/out.json"
  t1=$(date +%s%N)
  first=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["timings_ms"]["first"])' "$dir/out.json")
  echo "$first $(( (t1 - t0) / 1000000 ))"
}
for i in $(seq "$rounds"); do
  "$RLX" cache clear >/dev/null
  echo "cold $(one)"
  echo "warm $(one)"
done | python3 -c '
import statistics, sys
rows = {"cold": [], "warm": []}
for line in sys.stdin:
    k, first, wall = line.split()
    rows[k].append((float(first), float(wall)))
med = {k: (statistics.median(f for f, _ in v), statistics.median(w for _, w in v)) for k, v in rows.items()}
print("| start | first run (ms, median) | process wall (ms, median) | rounds |")
print("| --- | --- | --- | --- |")
for k in ("cold", "warm"):
    print(f"| {k} | {med[k][0]:.1f} | {med[k][1]:.0f} | {len(rows[k])} |")
w, c = med["warm"], med["cold"]
print(f"warm/cold: first run {w[0] / c[0]:.2f}, process {w[1] / c[1]:.2f}")
'
