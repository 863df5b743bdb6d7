#!/usr/bin/env python3
"""f32 against `rlx quantize`'s int8 and q4 forms of one graph, compiled, in the same rounds.

  bench/quantize_ffn.py [--rounds 5] [--reps 20] [--rows 1,128] [--threads 2] [--keep DIR]

The graph: y = linear(gelu(linear(x, W1 [4096, 1024], b1)), W2 [1024, 4096], b2) with seeded
random weights (an FFN of a d-1024 model, 32 MiB of f32 weights), quantized by
`rlx quantize --format int8` (per-channel i8 weights, activations quantized at run time,
compiled into matmul_integer_scaled) and `--format q4` (block 32, asymmetric: matmul_nbits), and
the weight-only form int8 could have taken instead (`wo`: dequantize(W_q, scale, axis 1) ->
matmul on the same int8 weights; compiled mode expands them into f32 once, at plan build).
Per round and per row count: `rlx bench --modes compiled` of f32, int8, q4, interleaved; the
table gives medians over rounds and the median of the per-round ratios to f32.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import graphlib as gl  # noqa: E402

D, F = 1024, 4096


def build(work):
    rng = np.random.default_rng(0)
    t = {"fc1.weight": (rng.standard_normal((F, D)) / 32).astype(np.float32), "fc1.bias": (rng.standard_normal(F) * 0.1).astype(np.float32),
         "fc2.weight": (rng.standard_normal((D, F)) / 64).astype(np.float32), "fc2.bias": (rng.standard_normal(D) * 0.1).astype(np.float32)}
    g = {"format": "rlx.graph", "version": 1, "name": "ffn_1024x4096", "nodes": [
        {"id": "x", "op": "input", "shape": ["rows", D]},
        {"id": "w1", "op": "param", "shape": [F, D], "name": "fc1.weight"}, {"id": "b1", "op": "param", "shape": [F], "name": "fc1.bias"},
        {"id": "w2", "op": "param", "shape": [D, F], "name": "fc2.weight"}, {"id": "b2", "op": "param", "shape": [D], "name": "fc2.bias"},
        {"id": "h", "op": "linear", "inputs": ["x", "w1", "b1"]}, {"id": "g", "op": "gelu", "inputs": ["h"]},
        {"id": "y", "op": "linear", "inputs": ["g", "w2", "b2"]}], "outputs": ["y"]}
    with open(os.path.join(work, "f32.json"), "w") as f:
        json.dump(g, f)
    with open(os.path.join(work, "f32.safetensors"), "wb") as f:
        f.write(gl.encode_safetensors({k: (v, "f32") for k, v in t.items()}))


def weight_only(work):
    """The int8 weights of int8.safetensors as dequantize -> matmul (+ bias)."""
    n = [{"id": "x", "op": "input", "shape": ["rows", D]}]
    prev = "x"
    for tag, K, N in (("fc1", D, F), ("fc2", F, D)):
        n += [{"id": f"{tag}_q", "op": "param", "shape": [K, N], "dtype": "i8", "name": f"{tag}.weight.int8"},
              {"id": f"{tag}_s", "op": "param", "shape": [N], "name": f"{tag}.weight.scale"},
              {"id": f"{tag}_b", "op": "param", "shape": [N], "name": f"{tag}.bias"},
              {"id": f"{tag}_w", "op": "dequantize", "inputs": [f"{tag}_q", f"{tag}_s"], "attrs": {"axis": 1}},
              {"id": f"{tag}_m", "op": "matmul", "inputs": [prev, f"{tag}_w"]},
              {"id": f"{tag}_y", "op": "add", "inputs": [f"{tag}_m", f"{tag}_b"]}]
        if tag == "fc1":
            n.append({"id": "g", "op": "gelu", "inputs": ["fc1_y"]})
            prev = "g"
    with open(os.path.join(work, "wo.json"), "w") as f:
        json.dump({"format": "rlx.graph", "version": 1, "name": "ffn_weight_only", "nodes": n, "outputs": ["fc2_y"]}, f)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--rows", default="1,128")
    p.add_argument("--threads", type=int, default=int(os.environ.get("RLX_NUM_THREADS", "2")))
    p.add_argument("--rlx", default=os.path.join(ROOT, "build", "apps", "rlx", "rlx"))
    p.add_argument("--keep")
    a = p.parse_args()
    env = dict(os.environ, RLX_NUM_THREADS=str(a.threads))
    work = a.keep or tempfile.mkdtemp(prefix="rlx-quantize-bench-")
    os.makedirs(work, exist_ok=True)
    build(work)
    g, pp = os.path.join(work, "f32.json"), os.path.join(work, "f32.safetensors")
    errs = {}
    for fmt in ("int8", "q4"):
        r = subprocess.run([a.rlx, "quantize", g, "-p", pp, "--format", fmt, "--out", os.path.join(work, fmt + ".json"),
                            "--dim", "rows=8", "--mode", "compiled", "--json"], capture_output=True, text=True, env=env)
        if r.returncode:
            raise SystemExit(f"rlx quantize --format {fmt} failed: {r.stderr}")
        rep = json.loads(r.stdout)
        errs[fmt] = (rep["outputs"][0]["rel_rms"], rep["bytes"]["after"])
    weight_only(work)
    rows = [int(s) for s in a.rows.split(",")]
    forms = ("f32", "int8", "q4", "wo")
    times = {(m, fmt): [] for m in rows for fmt in forms}
    for rnd in range(a.rounds):
        for m in rows:
            for fmt in forms:
                c = [a.rlx, "bench", os.path.join(work, fmt + ".json"), "-p", os.path.join(work, ("int8" if fmt == "wo" else fmt) + ".safetensors"),
                     "-i", "x=random:1", "--dim", f"rows={m}", "--modes", "compiled", "--reps", str(a.reps), "--format", "json"]
                r = subprocess.run(c, capture_output=True, text=True, env=env)
                if r.returncode:
                    raise SystemExit(f"rlx bench failed: {' '.join(c)}\n{r.stderr}")
                times[(m, fmt)].append(json.loads(r.stdout)["rows"][0]["median_ms"])
        print(f"round {rnd + 1}: " + ", ".join(f"rows {m} {fmt} {times[(m, fmt)][-1]:.3f} ms" for m in rows for fmt in forms),
              file=sys.stderr)
    print(f"weights: f32 {4 * (2 * D * F + D + F) / 2**20:.1f} MiB, int8 {errs['int8'][1] / 2**20:.1f} MiB, q4 {errs['q4'][1] / 2**20:.1f} MiB; "
          f"relative RMS error of y (rows 8, random x): int8 {errs['int8'][0]:.4f}, q4 {errs['q4'][0]:.4f}")
    print("| rows | f32 ms | int8 ms | q4 ms | weight-only int8 ms | int8 / f32 | q4 / f32 | weight-only / f32 |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for m in rows:
        f, i, q, w = (times[(m, k)] for k in forms)
        r = [statistics.median(x / y for x, y in zip(t, f)) for t in (i, q, w)]
        print(f"| {m} | {statistics.median(f):.3f} | {statistics.median(i):.3f} | {statistics.median(q):.3f} | {statistics.median(w):.3f} | "
              f"{r[0]:.2f} | {r[1]:.2f} | {r[2]:.2f} |")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
