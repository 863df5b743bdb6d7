#!/usr/bin/python3
"""bf16 decode step vs f32, side by side: `rlx bench` of a decode-step graph (default
bench/graphs/decode_step.json, d 1024; --graph bench/graphs/decode_step_2048.json for d 2048) as
declared (f32) and with --dtype bf16 (bf16 weights, activations and KV cache), alternating in
rounds so that a change in the machine's load hits both alike. Prints, per mode, the median
time of each round, the per-round ratio bf16/f32 and the median ratio, and the peak RSS of each
process (ru_maxrss, as `rlx bench` reports it) with their ratio.

  python3 bench/half_decode.py [--rlx build/apps/rlx/rlx[,OTHER_RLX...]] [--graph G] [--rounds 5] [--reps 30]
                              [--dtype bf16] [--modes eager,lazy,compiled]
With several binaries (a baseline build and this one), every round runs each binary's f32 and
bf16 processes in turn, so a before/after comparison sees the same load.
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
    ap.add_argument("--rlx", default="build/apps/rlx/rlx",
                    help="rlx binary; several, comma-separated (e.g. a baseline build and this one), all run in "
                         "every round, each with its own tables")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--graph", default="bench/graphs/decode_step.json")
    ap.add_argument("--modes", default="eager,lazy,compiled")
    a = ap.parse_args()
    modes = a.modes.split(",")
    bins = a.rlx.split(",")
    t = {b: {m: ([], []) for m in modes} for b in bins}
    mins = {b: {m: ([], []) for m in modes} for b in bins}
    rss = {b: ([], []) for b in bins}
    for rnd in range(a.rounds):
        load = os.getloadavg()[0]
        for b in bins:
            f = bench(b, a.graph, modes, [], a.reps)
            h = bench(b, a.graph, modes, ["--dtype", a.dtype], a.reps)
            for m in modes:
                t[b][m][0].append(f[m]["median_ms"])
                t[b][m][1].append(h[m]["median_ms"])
                mins[b][m][0].append(f[m]["min_ms"])
                mins[b][m][1].append(h[m]["min_ms"])
            rss[b][0].append(max(r["rss_mib"] for r in f.values()))
            rss[b][1].append(max(r["rss_mib"] for r in h.values()))
            print(f"round {rnd + 1}: load {load:.1f}  " + (f"{b}  " if len(bins) > 1 else "") +
                  "  ".join(f"{m} f32 {f[m]['median_ms']:.3f} ms {a.dtype} {h[m]['median_ms']:.3f} ms "
                            f"({h[m]['median_ms'] / f[m]['median_ms']:.2f}x)" for m in modes), flush=True)
    for b in bins:
        if len(bins) > 1:
            print(f"\n### {b}")
        print(f"\n| mode | f32 median ms (median of rounds) | {a.dtype} median ms | "
              "ratio (median of per-round ratios) | per-round ratios |")
        print("|---|---:|---:|---:|---:|")
        for m in modes:
            ratios = [h / f for f, h in zip(*t[b][m])]
            print(f"| {m} | {statistics.median(t[b][m][0]):.3f} | {statistics.median(t[b][m][1]):.3f} | "
                  f"{statistics.median(ratios):.2f} | {min(ratios):.2f}-{max(ratios):.2f} |")
        print(f"\n| mode | f32 best ms (min over all runs) | {a.dtype} best ms | ratio |")
        print("|---|---:|---:|---:|")
        for m in modes:
            bf, bh = min(mins[b][m][0]), min(mins[b][m][1])
            print(f"| {m} | {bf:.3f} | {bh:.3f} | {bh / bf:.2f} |")
        print(f"\npeak RSS: f32 {statistics.median(rss[b][0]):.1f} MiB, {a.dtype} {statistics.median(rss[b][1]):.1f} MiB, "
              f"ratio {statistics.median(rss[b][1]) / statistics.median(rss[b][0]):.2f}")


if __name__ == "__main__":
    main()
