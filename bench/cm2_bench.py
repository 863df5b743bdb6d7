#!/usr/bin/env python3
"""The tensor-core matmul (matmul_cm2, issue 22) on the products that matter, under several
kernel settings in one process each, with PyTorch's time for the same work beside them.

    python3 bench/cm2_bench.py --rlx build/apps/rlx/rlx --work /tmp/cm2 \\
        [--variants "new: old:RLX_VK_CM2_PICK=old t1:RLX_VK_CM2=256x128x256x64"] [--dtypes f16 bf16] \\
        [--repeat 5] [--torch]

The products: matmul 4096^3 (b as [K, N] and as [N, K]), ViT-S/16's linears at batch 32
(M = 6304 rows, with bias), the d-4096 decoder block's linears at seq 512 (a . w^T, M = 512,
and neighbouring few-tile shapes) and ResNet-50's 1x1 convolutions at batch 32 (per image a
product w . x with K = input channels, N = H*W). All of them are independent outputs of one graph, run
with `rlx run --profile --repeat R` per variant (device ms of the last run, per node; the
variants run round robin --rounds times and the fastest round is kept: a process now and then
runs everything ~4x slower, seen in session 12 too, cause not known); a
variant is NAME:ENV=VAL[;ENV=VAL...] (NAME: alone is the default). --torch adds PyTorch's
torch.matmul / F.linear / F.conv2d in the same dtypes (CUDA events, median of 20).
Prints one table row per product: device ms and TFLOP/s per variant.
"""
import argparse
import json
import os
import re
import subprocess
import sys

VIT = [("vit_qkv", 6304, 1152, 384), ("vit_proj", 6304, 384, 384), ("vit_fc1", 6304, 1536, 384),
       ("vit_fc2", 6304, 384, 1536)]
# (name, Cin, Cout, H=W), batch 32: torchvision ResNet-50's 1x1 convolutions (stride 1)
RES = [("rn_64_256_56", 64, 256, 56), ("rn_256_64_56", 256, 64, 56), ("rn_128_512_28", 128, 512, 28),
       ("rn_512_128_28", 512, 128, 28), ("rn_256_1024_14", 256, 1024, 14), ("rn_1024_256_14", 1024, 256, 14),
       ("rn_512_2048_7", 512, 2048, 7), ("rn_2048_512_7", 2048, 512, 7)]
BATCH = 32
# The d-4096 decoder block's linears at seq 512 (bench/graphs/decoder_block_4096.json): q/o, k/v,
# gate/up, down; (name, M, N, K), no bias
DEC = [("dec_qo", 512, 4096, 4096), ("dec_kv", 512, 1024, 4096), ("dec_gateup", 512, 14336, 4096),
       ("dec_down", 512, 4096, 14336),
       # long-K products over few tiles beside dec_kv (matmul_cm1p's one win, session 15): k and v
       # as one product, fewer / more rows, a longer K
       ("few_kv2", 512, 2048, 4096), ("few_m256", 256, 1024, 4096), ("few_m1024", 1024, 1024, 4096),
       ("few_k14k", 512, 1024, 14336)]


def products():
    """(node id, flops, nodes) per product."""
    out = []
    n = [{"id": "a", "op": "input", "shape": [4096, 4096]}, {"id": "b", "op": "input", "shape": [4096, 4096]},
         {"id": "mm4096", "op": "matmul", "inputs": ["a", "b"]}]
    out.append(("mm4096", 2 * 4096**3, n))
    out.append(("mm4096_nt", 2 * 4096**3,
                [{"id": "mm4096_nt", "op": "matmul", "inputs": ["a", "b"], "attrs": {"transpose_b": True}}]))
    for name, m, nn, k in VIT:
        out.append((name, 2 * m * nn * k, [
            {"id": f"x_{name}", "op": "input", "shape": [m, k]}, {"id": f"w_{name}", "op": "input", "shape": [nn, k]},
            {"id": f"b_{name}", "op": "input", "shape": [nn]},
            {"id": name, "op": "linear", "inputs": [f"x_{name}", f"w_{name}", f"b_{name}"]}]))
    for name, m, nn, k in DEC:
        out.append((name, 2 * m * nn * k, [
            {"id": f"x_{name}", "op": "input", "shape": [m, k]}, {"id": f"w_{name}", "op": "input", "shape": [nn, k]},
            {"id": name, "op": "matmul", "inputs": [f"x_{name}", f"w_{name}"], "attrs": {"transpose_b": True}}]))
    for name, ci, co, hw in RES:
        out.append((name, 2 * BATCH * co * ci * hw * hw, [
            {"id": f"x_{name}", "op": "input", "shape": [BATCH, ci, hw, hw]},
            {"id": f"w_{name}", "op": "input", "shape": [co, ci, 1, 1]},
            {"id": name, "op": "conv2d", "inputs": [f"x_{name}", f"w_{name}"]}]))
    return out


def torch_times(dtypes, reps=20):
    import torch
    import torch.nn.functional as F
    torch.backends.cudnn.benchmark = True
    res = {}

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch_gpu  # CUDA-event medians, as every PyTorch figure of bench/ is taken

    def timed(fn):
        return torch_gpu.timed(fn, reps)

    with torch.inference_mode():
        for dt in dtypes:
            t = {"f16": torch.float16, "bf16": torch.bfloat16}[dt]
            r = lambda *s: torch.randn(*s, device="cuda", dtype=t)
            A, B = r(4096, 4096), r(4096, 4096)
            res[("mm4096", dt)] = timed(lambda: torch.matmul(A, B))
            res[("mm4096_nt", dt)] = timed(lambda: torch.matmul(A, B.t()))
            for name, m, nn, k in VIT:
                X, W, b = r(m, k), r(nn, k), r(nn)
                res[(name, dt)] = timed(lambda: F.linear(X, W, b))
            for name, m, nn, k in DEC:
                X, W = r(m, k), r(nn, k)
                res[(name, dt)] = timed(lambda: torch.matmul(X, W.t()))
            for name, ci, co, hw in RES:
                X, W = r(BATCH, ci, hw, hw), r(co, ci, 1, 1)
                res[(name, dt)] = timed(lambda: F.conv2d(X, W))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--work", default="/tmp/cm2-bench")
    ap.add_argument("--variants", default="new: old:RLX_VK_CM2_PICK=old")
    ap.add_argument("--dtypes", nargs="+", default=["f16", "bf16"])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2, help="variants run round robin this many times; the fastest kept")
    ap.add_argument("--only", default="", help="comma-separated product names (default all)")
    ap.add_argument("--torch", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    prods = products()
    if a.only:
        keep = set(a.only.split(","))
        prods = [p for p in prods if p[0] in keep or (p[0] == "mm4096" and "mm4096_nt" in keep)]
    nodes = [x for p in prods for x in p[2]]
    ids = [p[0] for p in prods if any(x["id"] == p[0] for x in p[2])]
    g = os.path.join(a.work, "cm2_products.json")
    with open(g, "w") as f:
        json.dump({"format": "rlx.graph", "version": 1, "name": "cm2_products", "nodes": nodes, "outputs": ids}, f)
    inputs = []
    for i, x in enumerate(x for x in nodes if x["op"] == "input"):
        inputs += ["--input", f"{x['id']}=random:{i + 1}"]
    flops = {p[0]: p[1] for p in prods}
    times = {}  # (product, dtype, variant) -> ms
    variants = [v.split(":", 1) for v in a.variants.split()]
    for rnd, dt, (name, env) in [(r, d, v) for r in range(a.rounds) for d in a.dtypes for v in variants]:
        e = dict(os.environ)
        for kv in filter(None, env.split(";")):
            k, v = kv.split("=", 1)
            e[k] = v
        cmd = [a.rlx, "run", g, *inputs, "--dtype", dt, "-b", "vulkan", "-m", "compiled", "--profile",
               "--repeat", str(a.repeat)]
        p = subprocess.run(cmd, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300)
        if p.returncode != 0:
            print(f"{dt} {name} ({env}): rlx failed: {p.stderr.strip()[-300:]}", flush=True)
            continue
        got = {}
        for line in p.stderr.splitlines():
            m = re.match(r"\s*([0-9.]+)\s+[0-9.]+\s+\S+\s+\S+\s+(\S+)\s+.*node '([^']+)'", line)
            if m and m.group(3) in flops:
                got[m.group(3)] = got.get(m.group(3), 0.0) + float(m.group(1))
        for pid, ms in got.items():
            key = (pid, dt, name)
            times[key] = min(times.get(key, ms), ms)
    tt = torch_times(a.dtypes) if a.torch else {}
    cols = [v[0] for v in variants] + (["torch"] if tt else [])
    print("| product | dtype | " + " | ".join(f"{c} ms (TFLOP/s)" for c in cols) + " |")
    print("| --- | --- |" + " ---: |" * len(cols))
    for pid in ids:
        for dt in a.dtypes:
            row = []
            for c in cols:
                ms = tt.get((pid, dt)) if c == "torch" else times.get((pid, dt, c))
                row.append(f"{ms:.4f} ({flops[pid] / ms / 1e9:.0f})" if ms else "-")
            print(f"| {pid} | {dt} | " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
