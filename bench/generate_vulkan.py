#!/usr/bin/python3
"""Issue 31: `rlx generate -b vulkan` per-token time of one build against another (a baseline build
of the branch point), in one run: the KV cache appended in place on the device against the cache
copied by the export's concat(past, new) each step (docs/modes.md, "Generation").

For each mode and round, both binaries run `rlx generate MODEL -b vulkan -m MODE -n STEPS --json`
on bench/generate_bench.py's decoder export (small: d 256, 4 layers, head_dim 32, 2 kv heads),
interleaved so that a burst of load on this shared machine hits both; per run the median of the
per-token "ms" over the steps that replay a plan (no step that made one), then medians over rounds
and the ratio new / base taken per round. Also checks that both give the same ids.

  bench/generate_vulkan.py --rlx build/apps/rlx/rlx --base /path/to/base/rlx [--modes lazy,compiled]
      [--steps 64] [--rounds 5] [--size small] [--work DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import generate_bench as gb  # noqa: E402


def per_token(rlx, model, mode, steps, env):
    r = subprocess.run([rlx, "generate", model, "--prompt", ",".join(map(str, gb.PROMPT)), "-b", "vulkan", "-m", mode,
                        "-n", str(steps), "--json"], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"{rlx} generate -m {mode}: exit {r.returncode}: {r.stderr[-800:]}")
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    steps_ = [x for x in lines[1:-1] if not x.get("specialised_anew")]
    return statistics.median(x["ms"] for x in steps_), lines[-1]["ids"], lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--base", required=True, help="the baseline rlx binary")
    ap.add_argument("--modes", default="lazy,compiled")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--size", default="small")
    ap.add_argument("--work", default="/tmp/rlx_generate_bench")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    env = dict(os.environ, RLX_CACHE="0")
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}", flush=True)
    model = gb.export(a.size, a.work)
    print(f"model {model}; {a.steps} greedy steps, prompt {len(gb.PROMPT)}, {a.rounds} rounds\n")
    print("| mode | base per-token ms | new per-token ms | new / base | same ids | new: input bytes, cache bytes written per step |")
    print("|---|---|---|---|---|---|")
    for mode in a.modes.split(","):
        base, new, ratio, same, copies = [], [], [], True, ""
        for _ in range(a.rounds):
            b, bids, _ = per_token(os.path.abspath(a.base), model, mode, a.steps, env)
            n, nids, lines = per_token(os.path.abspath(a.rlx), model, mode, a.steps, env)
            base.append(b), new.append(n), ratio.append(n / b)
            same &= bids == nids
            x = lines[5]
            copies = f"{x.get('input_copy_bytes')}, {x.get('cache_row_bytes')} (step 6, capacity {x.get('capacity')})"
        rng = lambda xs: f"{min(xs):.3g}-{max(xs):.3g}"  # noqa: E731
        print(f"| {mode} | {statistics.median(base):.3f} ({rng(base)}) | {statistics.median(new):.3f} ({rng(new)}) | "
              f"{statistics.median(ratio):.2f} ({rng(ratio)}) | {'yes' if same else 'NO'} | {copies} |", flush=True)
    print(f"\nuptime at the end: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}", flush=True)


if __name__ == "__main__":
    main()
