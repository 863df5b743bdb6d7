#!/usr/bin/env bash
# Times the GEMM candidates side by side on rlx's shapes (bench/gemm_candidates.cpp) and prints
# medians and speed-up ratios against a baseline measured in the same run.
#   bench/gemm_candidates.sh [rounds (3)] [reps per shape (5)]
# Each round runs every candidate once, one after the other, so that a change in the machine's
# load hits all of them alike; a ratio is baseline_time / candidate_time within a round, and
# the table shows the median over rounds. Baseline: OpenBLAS with its Haswell (AVX2) kernels,
# what rlx ran before cpu::gemm on this machine (whose environment sets OPENBLAS_CORETYPE=Haswell).
# Candidates:
#   obl_haswell  OpenBLAS 0.3.21, OPENBLAS_CORETYPE=Haswell (baseline)
#   obl_auto     OpenBLAS with no OPENBLAS_CORETYPE: its own detection
#   obl_skx      OpenBLAS, OPENBLAS_CORETYPE=SkylakeX (AVX-512 kernels)
#   dnnl         oneDNN 2.6 (Debian libdnnl): dnnl_sgemm (_sg) and matmul primitive with
#                weights reordered once into its blocked layout (_mm); OpenMP threads
#   rlx          rlx::cpu::gemm, what the CPU backend runs (_pk: weights prepacked once, as in
#                compiled mode)
#   bandwidth    streaming reads (rlx's pool): the 45 MB of weights, and 1 GiB (memory)
# Threads: RLX_NUM_THREADS (default 2) for all (OMP_NUM_THREADS for oneDNN).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3} reps=${2:-5}
bin=${BUILD_DIR:-build}/bench/gemm_candidates
[[ -x $bin ]] || { echo "build first: scripts/build.sh (needs libdnnl-dev: scripts/setup.sh)" >&2; exit 2; }
T=${RLX_NUM_THREADS:-2}
export RLX_NUM_THREADS=$T OMP_NUM_THREADS=$T
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq 1 "$rounds"); do
  env OPENBLAS_CORETYPE=Haswell "$bin" openblas "$reps" >"$out/obl_haswell.$r"
  env -u OPENBLAS_CORETYPE "$bin" openblas "$reps" >"$out/obl_auto.$r"
  env OPENBLAS_CORETYPE=SkylakeX "$bin" openblas "$reps" >"$out/obl_skx.$r"
  "$bin" dnnl "$reps" >"$out/dnnl.$r"
  env -u RLX_OPENBLAS_CORETYPE "$bin" rlx "$reps" >"$out/rlx.$r"
  "$bin" bandwidth "$reps" >"$out/bandwidth.$r"
  echo "round $r done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
python3 - "$out" "$rounds" <<'PY'
import sys, statistics as st, collections
d, rounds = sys.argv[1], int(sys.argv[2])
cands = ["obl_haswell", "obl_auto", "obl_skx", "dnnl", "rlx", "bandwidth"]
t = collections.defaultdict(dict)   # (cand, row) -> {round: (ms, gflops, gbs)}
heads = {}
for c in cands:
    for r in range(1, rounds + 1):
        for line in open(f"{d}/{c}.{r}"):
            if line.startswith("#"):
                heads[c] = line.strip()
                continue
            f = line.split()
            t[(c, f[0])][r] = (float(f[1]), float(f[3]), float(f[5]), float(f[7]))
def base_row(row):
    if row == "mm2048_packed": return "sgemm2048"
    if row.startswith("read_"): return row
    return row.removesuffix("_sg").removesuffix("_mm").removesuffix("_pk").removesuffix("_kn")
for c in cands: print(heads.get(c, c))
print(f"load average at the end: {open('/proc/loadavg').read().split()[0]}")
print()
print("| candidate | shape | median ms | min ms | GFLOP/s (median) | weights GB/s (median) | speed-up vs obl_haswell (median of rounds) |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
order = ["sgemm2048", "linears_m256", "linears_m16", "linears_m4", "linears_m1", "read_weights", "read_1gib"]
rows = sorted(t, key=lambda k: (order.index(base_row(k[1])), cands.index(k[0]), k[1]))
for (c, row) in rows:
    v = t[(c, row)]
    b = t[("obl_haswell", base_row(row))]
    ratios = [b[r][0] / v[r][0] for r in v if r in b]
    if not ratios:  # no baseline row (the bandwidth reference)
        ms, gb = st.median(x[0] for x in v.values()), st.median(x[2] for x in v.values())
        print(f"| {c} | {row} | {ms:.2f} | {min(x[3] for x in v.values()):.2f} | - | {gb:.1f} | - |")
        continue
    ms = st.median(x[0] for x in v.values())
    gf = st.median(x[1] for x in v.values())
    gb = st.median(x[2] for x in v.values())
    mn = min(x[3] for x in v.values())
    print(f"| {c} | {row} | {ms:.2f} | {mn:.2f} | {gf:.1f} | {gb:.1f} | {st.median(ratios):.2f}x |")
PY
