#!/usr/bin/env python3
"""Warm starts of two rlx binaries, interleaved (issue 28: what authenticating cache entries costs).

usage: bench/cache_warm_ab.py BASELINE_RLX CANDIDATE_RLX [PAIRS] [BACKEND]

Each binary gets its own cache directory (filled once), and a key file under a temporary
XDG_CONFIG_HOME (never the user's). Then PAIRS times: one warm process of each, the order
alternating, so that a change in the machine's load hits both alike (bench/cache_start.sh runs
blocks of one binary, which a busy shared machine turns into noise). Reported per binary:
median and minimum of the process wall, of rlx's first run (timings_ms.first) and of the plan
read that --verbose prints ("read in X ms": the entry's checks, MAC included, and decoding).
"""
import json, os, statistics, subprocess, sys, tempfile, time

if len(sys.argv) < 3:
    sys.exit(__doc__)
bins = {"baseline": sys.argv[1], "candidate": sys.argv[2]}
pairs = int(sys.argv[3]) if len(sys.argv) > 3 else 40
backend = sys.argv[4] if len(sys.argv) > 4 else "cpu"
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
args = ["run", "graphs/llama_block.json", "-p", "graphs/llama_block.safetensors",
        "--input", "x=@graphs/llama_block.inputs/x.npy", "--mode", "compiled", "-b", backend, "--json", "-v"]
tmp = tempfile.mkdtemp()
res = {k: {"wall": [], "first": [], "read": []} for k in bins}


def run(k):
    env = dict(os.environ, RLX_CACHE_DIR=f"{tmp}/{k}", XDG_CONFIG_HOME=f"{tmp}/config")
    env.pop("RLX_CACHE_SECRET", None)
    t0 = time.perf_counter()
    p = subprocess.run([bins[k]] + args, env=env, capture_output=True, text=True, cwd=root)
    wall = (time.perf_counter() - t0) * 1e3
    if p.returncode != 0:
        sys.exit(f"{bins[k]} failed:\n{p.stderr}")
    return wall, json.loads(p.stdout)["timings_ms"]["first"], p.stderr


for k in bins:
    run(k)  # cold: fills this binary's cache
for i in range(pairs):
    for k in (list(bins) if i % 2 == 0 else list(bins)[::-1]):
        wall, first, err = run(k)
        if "compile cache: hit" not in err:
            sys.exit(f"{bins[k]}: expected a warm start:\n{err}")
        res[k]["wall"].append(wall)
        res[k]["first"].append(first)
        res[k]["read"].append(float(err.split("read in ")[1].split(" ms")[0]))
print(f"| binary | process wall (median / min, ms) | first run (median / min, ms) | plan read (median / min, ms) | pairs: {pairs} |")
print("| --- | ---: | ---: | ---: | --- |")
for k, v in res.items():
    cells = " | ".join(f"{statistics.median(x):.2f} / {min(x):.2f}" for x in v.values())
    print(f"| {k} ({bins[k]}) | {cells} | |")
b, c = res["baseline"], res["candidate"]
print("candidate/baseline medians: " + ", ".join(f"{m} {statistics.median(c[m]) / statistics.median(b[m]):.3f}" for m in b))
