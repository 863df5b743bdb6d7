#!/usr/bin/python3
"""bf16 decode step vs f32, side by side: `rlx bench` of a decode-step graph (default
bench/graphs/decode_step.json, d 1024; --graph bench/graphs/decode_step_2048.json for d 2048) as
declared (f32) and with --dtype bf16 (bf16 weights, activations and KV cache), alternating in
rounds so that a change in the machine's load hits both alike. Prints, per mode, the median
time of each round, the per-round ratio bf16/f32 and the median ratio, and the peak RSS of each
process (ru_maxrss, as `rlx bench` reports it) with their ratio.

  python3 bench/half_decode.py [--rlx build/apps/rlx/rlx] [--graph G] [--rounds 5] [--reps 30] [--dtype bf16]
                              [--modes eager,lazy,compiled]
"""
import argparse
import json
import os
import statistics
import subprocess

ARGS = ["--random-params", "--input", "x=random:1", "--input", "k_cache=random:2",
        "--input", "v_cache=random:3", "--input", "pos=i32=256"]


def bench(rlx, graph, modes, extra, reps):
    out = subprocess.run([rlx, "bench", graph, *ARGS, "--modes", ",".join(modes), "--reps", str(reps), "--warmup", "5",
                          "--format", "json", *extra],
                         check=True, capture_output=True, text=True).stdout
    return {r["mode"]: r for r in json.loads(out)["rows"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlx", default="build/apps/rlx/rlx")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--graph", default="bench/graphs/decode_step.json")
    ap.add_argument("--modes", default="eager,lazy,compiled")
    a = ap.parse_args()
    modes = a.modes.split(",")
    t = {m: ([], []) for m in modes}
    mins = {m: ([], []) for m in modes}
    rss = ([], [])
    for rnd in range(a.rounds):
        load = os.getloadavg()[0]
        f = bench(a.rlx, a.graph, modes, [], a.reps)
        h = bench(a.rlx, a.graph, modes, ["--dtype", a.dtype], a.reps)
        for m in modes:
            t[m][0].append(f[m]["median_ms"])
            t[m][1].append(h[m]["median_ms"])
            mins[m][0].append(f[m]["min_ms"])
            mins[m][1].append(h[m]["min_ms"])
        rss[0].append(max(r["rss_mib"] for r in f.values()))
        rss[1].append(max(r["rss_mib"] for r in h.values()))
        print(f"round {rnd + 1}: load {load:.1f}  " +
              "  ".join(f"{m} f32 {f[m]['median_ms']:.3f} ms {a.dtype} {h[m]['median_ms']:.3f} ms "
                        f"({h[m]['median_ms'] / f[m]['median_ms']:.2f}x)" for m in modes), flush=True)
    print(f"\n| mode | f32 median ms (median of rounds) | {a.dtype} median ms | ratio (median of per-round ratios) |")
    print("|---|---:|---:|---:|")
    for m in modes:
        ratios = [h / f for f, h in zip(*t[m])]
        print(f"| {m} | {statistics.median(t[m][0]):.3f} | {statistics.median(t[m][1]):.3f} | "
              f"{statistics.median(ratios):.2f} |")
    print(f"\n| mode | f32 best ms (min over all runs) | {a.dtype} best ms | ratio |")
    print("|---|---:|---:|---:|")
    for m in modes:
        bf, bh = min(mins[m][0]), min(mins[m][1])
        print(f"| {m} | {bf:.3f} | {bh:.3f} | {bh / bf:.2f} |")
    print(f"\npeak RSS: f32 {statistics.median(rss[0]):.1f} MiB, {a.dtype} {statistics.median(rss[1]):.1f} MiB, "
          f"ratio {statistics.median(rss[1]) / statistics.median(rss[0]):.2f}")


if __name__ == "__main__":
    main()
