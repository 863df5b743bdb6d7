#!/usr/bin/python3
"""4-bit decode step vs f32, side by side: bench/graphs/decode_step.json's layer (scaled to
--d, default 2048: 32 query / 8 kv heads of 64, FFN 5632) with every linear as declared (f32
weights, --random-params) and as matmul_nbits (ONNX Runtime's MatMulNBits layout: 4 bits,
block 32, f32 scales, packed zero points; random bytes), `rlx bench --modes compiled` of each
alternating in rounds. Prints per-round medians, the median of per-round ratios 4-bit/f32, the
peak RSS of each process and their ratio, and the 4-bit step's weight bytes (packed values +
scales + zero points) over its time against `gemm_candidates bandwidth`'s streaming read of
the same rounds. The 4-bit graph runs twice: as written (f32 activations) and with every
matmul_nbits at accuracy_level 4 (int8 activations, integer products: ONNX Runtime's CompInt8).

  python3 bench/nbits_decode.py [--rlx build/apps/rlx/rlx] [--rounds 5] [--reps 30] [--d 2048]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import graphlib as gl  # noqa: E402
import nbits  # noqa: E402

BLOCK = 32


def scaled_graph(d):
    g = json.load(open(os.path.join(HERE, "graphs", "decode_step.json")))
    f = d // 1024
    ffn = 2816 * f
    dims = {1024: d, 2816: ffn, 256: 256 * f}
    for n in g["nodes"]:
        if n["op"] == "param":
            n["shape"] = [dims[s] for s in n["shape"]]
        elif n["id"] == "x":
            n["shape"] = [1, 1, d]
        elif n["id"] in ("k_cache", "v_cache"):
            n["shape"] = [1, 4 * f, 256, 64]
        elif n["op"] == "reshape":
            s = n["attrs"]["shape"]
            n["attrs"]["shape"] = [1, 1, d] if len(s) == 3 else [1, 1, s[2] * f, 64]
    return g


def to_nbits(g, rng):
    """Every linear(x, W [N, K]) -> matmul_nbits(x, Wq, scales, zp); returns the params."""
    params = {}
    shapes = {n["id"]: n["shape"] for n in g["nodes"] if n["op"] == "param"}
    names = {n["id"]: n.get("name", n["id"]) for n in g["nodes"] if n["op"] == "param"}
    out = []
    weight_bytes = 0
    for n in g["nodes"]:
        if n["op"] == "param" and len(n["shape"]) == 2:
            continue  # replaced below
        if n["op"] == "linear":
            w = n["inputs"][1]
            N, K = shapes[w]
            qshape, (nscales,), (nzp,) = nbits.shapes(N, K, BLOCK)  # the layout of scripts/nbits.py
            kb, zc = qshape[1], nzp // N
            nm = names[w]
            params[nm + ".q"] = (rng.integers(0, 256, qshape, dtype=np.uint8), "u8")
            params[nm + ".scales"] = ((0.01 + 0.001 * rng.random((N, kb))).astype(np.float32), "f32")
            params[nm + ".zp"] = (rng.integers(0, 256, (N, zc), dtype=np.uint8), "u8")
            weight_bytes += nbits.weight_bytes(N, K, BLOCK)
            out += [{"id": w + "_q", "op": "param", "shape": [N, kb, BLOCK // 2], "dtype": "u8", "name": nm + ".q"},
                    {"id": w + "_s", "op": "param", "shape": [N, kb], "name": nm + ".scales"},
                    {"id": w + "_z", "op": "param", "shape": [N, zc], "dtype": "u8", "name": nm + ".zp"},
                    {"id": n["id"], "op": "matmul_nbits", "inputs": [n["inputs"][0], w + "_q", w + "_s", w + "_z"],
                     "attrs": {"k": K, "n": N, "bits": 4, "block_size": BLOCK}}]
            continue
        out.append(n)
    for n in g["nodes"]:
        if n["op"] == "param" and len(n["shape"]) == 1:
            params[n.get("name", n["id"])] = ((1 + 0.1 * rng.standard_normal(n["shape"])).astype(np.float32), "f32")
    g = dict(g, nodes=out, name=g.get("name", "decode_step") + "_nbits4")
    return g, params, weight_bytes


def bench(rlx, graph, extra, reps, d):
    f = d // 1024
    args = [rlx, "bench", graph, "--input", "x=random:1", "--input", "k_cache=random:2", "--input", "v_cache=random:3",
            "--input", "pos=i32=256", "--modes", "compiled", "--reps", str(reps), "--warmup", "5", "--format", "json"]
    out = subprocess.run(args + extra, check=True, capture_output=True, text=True).stdout
    del f
    return json.loads(out)["rows"][0]


def bandwidth(binary):
    if not os.access(binary, os.X_OK):
        return None
    r = subprocess.run([binary, "bandwidth", "5"], capture_output=True, text=True)
    res = {}
    for line in r.stdout.splitlines():
        f = line.split()
        if line.startswith("read_"):
            res[f[0]] = float(f[5])  # GB/s of the median repetition
            res[f[0] + "_best"] = float(f[5]) * float(f[1]) / float(f[7])  # of the fastest (min_ms)
    return res or None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlx", default=os.path.join(ROOT, "build", "apps", "rlx", "rlx"))
    ap.add_argument("--bandwidth-bin", default=os.path.join(ROOT, "build", "bench", "gemm_candidates"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--d", type=int, default=2048)
    ap.add_argument("--keep")
    ap.add_argument("--generate-only", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    work = a.keep or tempfile.mkdtemp(prefix="rlx-nbits-")
    os.makedirs(work, exist_ok=True)
    if not a.generate_only:
        # rlx bench reports ru_maxrss, which Linux carries over from the forking process: the
        # weights are generated in a child, so this process stays small and the peaks are rlx's.
        subprocess.run([sys.executable, os.path.abspath(__file__), "--generate-only", "--keep", work, "--d", str(a.d)],
                       check=True)
    p32 = os.path.join(work, "decode_f32.json")
    p4 = os.path.join(work, "decode_nbits4.json")
    p4l4 = os.path.join(work, "decode_nbits4_l4.json")
    st = os.path.join(work, "decode_nbits4.safetensors")
    g32 = scaled_graph(a.d)
    if a.generate_only:
        generate(a, g32, p32, p4, p4l4, st)
        return
    wb = json.load(open(p4 + ".meta"))["weight_bytes"]
    bench_all(a, g32, p32, p4, p4l4, st, wb)


def generate(a, g32, p32, p4, p4l4, st):
    json.dump(g32, open(p32, "w"))
    g4, params, wb = to_nbits(scaled_graph(a.d), np.random.default_rng(7))
    json.dump(g4, open(p4, "w"))
    # the same weights with accuracy_level 4 (int8 activations, integer products)
    g4l4 = json.loads(json.dumps(g4))
    for n in g4l4["nodes"]:
        if n["op"] == "matmul_nbits":
            n["attrs"]["accuracy_level"] = 4
    json.dump(g4l4, open(p4l4, "w"))
    json.dump({"weight_bytes": wb}, open(p4 + ".meta", "w"))
    with open(st, "wb") as f:
        f.write(gl.encode_safetensors(params))


def bench_all(a, g32, p32, p4, p4l4, st, wb):
    f32_bytes = sum(4 * int(np.prod(n["shape"])) for n in g32["nodes"] if n["op"] == "param" and len(n["shape"]) == 2)
    rows = []
    for r in range(a.rounds):
        load = os.getloadavg()[0]
        f = bench(a.rlx, p32, ["--random-params"], a.reps, a.d)
        q = bench(a.rlx, p4, ["--params", st], a.reps, a.d)
        q4 = bench(a.rlx, p4l4, ["--params", st], a.reps, a.d)
        bw = bandwidth(a.bandwidth_bin)
        rows.append((f, q, bw, load, q4))
        print(f"round {r + 1}: load {load:.1f}  f32 {f['median_ms']:.3f} ms  4-bit {q['median_ms']:.3f} ms "
              f"({q['median_ms'] / f['median_ms']:.2f}x)  4-bit level 4 {q4['median_ms']:.3f} ms "
              f"({q4['median_ms'] / f['median_ms']:.2f}x)  rss {f['rss_mib']:.0f} / {q['rss_mib']:.0f} MiB", flush=True)
    med = statistics.median
    print(f"\ndecode step d {a.d} (compiled, CPU): f32 weights {f32_bytes / 1e6:.1f} MB, 4-bit {wb / 1e6:.1f} MB "
          f"(values + scales + zero points), {a.rounds} rounds x {a.reps} reps\n")
    print("| run | median ms | best ms | peak RSS MiB |")
    print("|---|---:|---:|---:|")
    print(f"| f32 | {med(r[0]['median_ms'] for r in rows):.3f} | {min(r[0]['min_ms'] for r in rows):.3f} | "
          f"{med(r[0]['rss_mib'] for r in rows):.1f} |")
    print(f"| 4-bit | {med(r[1]['median_ms'] for r in rows):.3f} | {min(r[1]['min_ms'] for r in rows):.3f} | "
          f"{med(r[1]['rss_mib'] for r in rows):.1f} |")
    print(f"| 4-bit, accuracy_level 4 | {med(r[4]['median_ms'] for r in rows):.3f} | {min(r[4]['min_ms'] for r in rows):.3f} | "
          f"{med(r[4]['rss_mib'] for r in rows):.1f} |")
    print(f"\ntime ratio 4-bit/f32 (median of per-round ratios): {med(r[1]['median_ms'] / r[0]['median_ms'] for r in rows):.2f}; "
          f"accuracy_level 4: {med(r[4]['median_ms'] / r[0]['median_ms'] for r in rows):.2f}; "
          f"peak RSS ratio {med(r[1]['rss_mib'] for r in rows) / med(r[0]['rss_mib'] for r in rows):.2f}")
    for label, i in (("4-bit", 1), ("4-bit accuracy_level 4", 4)):
        bws = [(wb / r[i]["median_ms"] * 1e-6, r[2]) for r in rows if r[2]]
        if not bws:
            continue
        print(f"{label} step reads its {wb / 1e6:.1f} MB of weights at {med(b for b, _ in bws):.1f} GB/s (median); "
              f"streaming read in the same rounds: {med(x['read_weights'] for _, x in bws):.1f} GB/s (45 MB), "
              f"{med(x['read_1gib'] for _, x in bws):.1f} GB/s (1 GiB); "
              f"{100 * med(b / x['read_weights'] for b, x in bws):.0f}% / {100 * med(b / x['read_1gib'] for b, x in bws):.0f}% "
              "(medians of per-round ratios; the step also reads its KV cache)")

if __name__ == "__main__":
    main()
