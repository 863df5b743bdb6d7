#!/usr/bin/env python3
"""A dynamic-quantized BERT-base feed-forward layer (seq 128, d 768, ffn 3072): rlx int8 against
ONNX Runtime int8 and against rlx's own f32 run of the same layer, side by side in rounds.

  bench/int8_layer.py [--rounds 5] [--reps 20] [--threads 2] [--keep DIR]

The ONNX model is what onnxruntime.quantization.quantize_dynamic writes for
  y = GELU(x W1 + b1) W2 + b2   (GELU as Erf: x * 0.5 * (1 + erf(x / sqrt 2)))
with per-tensor symmetric int8 weights: for each MatMul, DynamicQuantizeLinear(x) ->
MatMulInteger(xq, Wq, x_zp, 0) -> Cast(float) -> Mul(x_scale * w_scale) -> Add(bias). It is
built here with python3-onnx; ORT runs it with its default optimisations (it fuses the chain
into its DynamicQuantizeMatMul on MLAS's u8s8 kernels). rlx runs an rlx JSON graph with the
same computation in registry ops (DynamicQuantizeLinear written as min/max/div/round/
quantize), the int8 weights as an i8 safetensors param file; compiled mode rewrites each chain
into matmul_integer_scaled (one exact integer GEMM + float epilogue). rlx's f32 run is the same
layer with the f32 weights Wq * w_scale (the values the int8 model represents).
Per round: rlx int8, rlx f32, ORT int8 (spinning on and off, the faster kept); ratios per round,
medians over rounds. The outputs are compared (max abs difference of rlx int8 vs ORT int8).
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
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import compare_ort as co  # noqa: E402
import graphlib as gl  # noqa: E402

SEQ, D, FFN = 128, 768, 3072


def quantize_weight(w):
    s = np.float32(np.max(np.abs(w)) / 127.0)
    q = np.clip(np.round(w / s), -127, 127).astype(np.int8)
    return q, s


def build(work, rng):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    f32 = np.float32
    w1 = (rng.standard_normal((D, FFN)) / np.sqrt(D)).astype(f32)
    w2 = (rng.standard_normal((FFN, D)) / np.sqrt(FFN)).astype(f32)
    b1 = (0.1 * rng.standard_normal(FFN)).astype(f32)
    b2 = (0.1 * rng.standard_normal(D)).astype(f32)
    (q1, s1), (q2, s2) = quantize_weight(w1), quantize_weight(w2)
    x = rng.standard_normal((SEQ, D)).astype(f32)

    # ---- ONNX, as quantize_dynamic writes it
    nodes, inits = [], []

    def init(name, a):
        inits.append(numpy_helper.from_array(np.asarray(a), name))
        return name

    def dyn_matmul(inp, q, s, b, tag):
        nodes.append(helper.make_node("DynamicQuantizeLinear", [inp], [f"{tag}_q", f"{tag}_s", f"{tag}_z"]))
        nodes.append(helper.make_node("MatMulInteger", [f"{tag}_q", init(f"{tag}_W", q), f"{tag}_z",
                                                         init(f"{tag}_Wz", np.int8(0))], [f"{tag}_mm"]))
        nodes.append(helper.make_node("Cast", [f"{tag}_mm"], [f"{tag}_c"], to=TensorProto.FLOAT))
        nodes.append(helper.make_node("Mul", [f"{tag}_s", init(f"{tag}_Ws", np.float32(s))], [f"{tag}_sc"]))
        nodes.append(helper.make_node("Mul", [f"{tag}_c", f"{tag}_sc"], [f"{tag}_y"]))
        nodes.append(helper.make_node("Add", [f"{tag}_y", init(f"{tag}_b", b)], [f"{tag}_out"]))
        return f"{tag}_out"

    h = dyn_matmul("x", q1, s1, b1, "fc1")
    nodes.append(helper.make_node("Div", [h, init("sqrt2", np.float32(np.sqrt(2)))], ["g_d"]))
    nodes.append(helper.make_node("Erf", ["g_d"], ["g_e"]))
    nodes.append(helper.make_node("Add", ["g_e", init("one", np.float32(1))], ["g_a"]))
    nodes.append(helper.make_node("Mul", [h, "g_a"], ["g_m"]))
    nodes.append(helper.make_node("Mul", ["g_m", init("half", np.float32(0.5))], ["g"]))
    out = dyn_matmul("g", q2, s2, b2, "fc2")
    nodes[-1].output[0] = "y"
    g = helper.make_graph(nodes, "bert_ffn_int8", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [SEQ, D])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [SEQ, D])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="rlx int8_layer")
    m.ir_version = 8
    onnx.checker.check_model(m)
    model = os.path.join(work, "bert_ffn_int8.onnx")
    onnx.save(m, model)
    del out

    # ---- rlx graphs (int8 and f32) and params
    def rlx_graph(int8):
        ns = [{"id": "x", "op": "input", "shape": [SEQ, D]}]

        def c(id_, v, dtype=None):
            n = {"id": id_, "op": "constant", "shape": [], "value": v}
            if dtype:
                n["dtype"] = dtype
            ns.append(n)

        for tag, K, N in (("fc1", D, FFN), ("fc2", FFN, D)):
            ns.append({"id": f"{tag}_W", "op": "param", "shape": [K, N], "dtype": "i8" if int8 else "f32",
                       "name": f"{tag}.weight"})
            ns.append({"id": f"{tag}_b", "op": "param", "shape": [N], "name": f"{tag}.bias"})
        c("zero", 0.0)
        c("q255", 255.0)
        c("wz", 0, "i8")
        c("fc1_Ws", float(s1))
        c("fc2_Ws", float(s2))
        c("sqrt2", float(np.float32(np.sqrt(2))))
        c("one", 1.0)
        c("half", 0.5)

        def dyn(inp, tag):
            if not int8:
                ns.append({"id": f"{tag}_mm", "op": "matmul", "inputs": [inp, f"{tag}_W"]})
                ns.append({"id": f"{tag}_out", "op": "add", "inputs": [f"{tag}_mm", f"{tag}_b"]})
                return f"{tag}_out"
            # DynamicQuantizeLinear: scale = (max(0, max x) - min(0, min x)) / 255,
            # zp = saturate(round(0 - min / scale)), q = quantize(x, scale, zp)
            ns.extend([
                {"id": f"{tag}_max", "op": "max", "inputs": [inp]},
                {"id": f"{tag}_min", "op": "min", "inputs": [inp]},
                {"id": f"{tag}_hi", "op": "maximum", "inputs": [f"{tag}_max", "zero"]},
                {"id": f"{tag}_lo", "op": "minimum", "inputs": [f"{tag}_min", "zero"]},
                {"id": f"{tag}_rng", "op": "sub", "inputs": [f"{tag}_hi", f"{tag}_lo"]},
                {"id": f"{tag}_s", "op": "div", "inputs": [f"{tag}_rng", "q255"]},
                {"id": f"{tag}_zf", "op": "div", "inputs": [f"{tag}_lo", f"{tag}_s"]},
                {"id": f"{tag}_zn", "op": "sub", "inputs": ["zero", f"{tag}_zf"]},
                {"id": f"{tag}_zc", "op": "minimum", "inputs": [f"{tag}_zn", "q255"]},
                {"id": f"{tag}_zr", "op": "round", "inputs": [f"{tag}_zc"]},
                {"id": f"{tag}_z", "op": "cast", "inputs": [f"{tag}_zr"], "attrs": {"dtype": "u8"}},
                {"id": f"{tag}_q", "op": "quantize", "inputs": [inp, f"{tag}_s", f"{tag}_z"]},
                {"id": f"{tag}_mm", "op": "matmul_integer", "inputs": [f"{tag}_q", f"{tag}_W", f"{tag}_z", "wz"]},
                {"id": f"{tag}_c", "op": "cast", "inputs": [f"{tag}_mm"], "attrs": {"dtype": "f32"}},
                {"id": f"{tag}_sc", "op": "mul", "inputs": [f"{tag}_s", f"{tag}_Ws"]},
                {"id": f"{tag}_y", "op": "mul", "inputs": [f"{tag}_c", f"{tag}_sc"]},
                {"id": f"{tag}_out", "op": "add", "inputs": [f"{tag}_y", f"{tag}_b"]},
            ])
            return f"{tag}_out"

        h = dyn("x", "fc1")
        ns.extend([
            {"id": "g_d", "op": "div", "inputs": [h, "sqrt2"]},
            {"id": "g_e", "op": "erf", "inputs": ["g_d"]},
            {"id": "g_a", "op": "add", "inputs": ["g_e", "one"]},
            {"id": "g_m", "op": "mul", "inputs": [h, "g_a"]},
            {"id": "g", "op": "mul", "inputs": ["g_m", "half"]},
        ])
        y = dyn("g", "fc2")
        return {"format": "rlx.graph", "version": 1, "name": "bert_ffn_" + ("int8" if int8 else "f32"), "nodes": ns,
                "outputs": [y]}

    paths = {}
    for int8 in (True, False):
        name = "int8" if int8 else "f32"
        gp = os.path.join(work, f"bert_ffn_{name}.json")
        with open(gp, "w") as f:
            json.dump(rlx_graph(int8), f)
        if int8:
            t = {"fc1.weight": (q1, "i8"), "fc2.weight": (q2, "i8"), "fc1.bias": (b1, "f32"), "fc2.bias": (b2, "f32")}
        else:
            t = {"fc1.weight": (q1.astype(f32) * s1, "f32"), "fc2.weight": (q2.astype(f32) * s2, "f32"),
                 "fc1.bias": (b1, "f32"), "fc2.bias": (b2, "f32")}
        pp = os.path.join(work, f"bert_ffn_{name}.safetensors")
        with open(pp, "wb") as f:
            f.write(gl.encode_safetensors(t))
        paths[name] = (gp, pp)
    in_dir = os.path.join(work, "inputs")
    os.makedirs(in_dir, exist_ok=True)
    np.save(os.path.join(in_dir, "x.npy"), x)
    return model, paths, in_dir


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=int(os.environ.get("RLX_NUM_THREADS", "2")))
    p.add_argument("--rlx", default=os.path.join(ROOT, "build", "apps", "rlx", "rlx"))
    p.add_argument("--ort-dir", default=os.environ.get("RLX_ORT_DIR", os.path.expanduser("~/.cache/rlx/onnxruntime-node")))
    p.add_argument("--keep", help="keep the generated models and data in this directory")
    a = p.parse_args()
    co.ensure_ort(a.ort_dir)
    env = dict(os.environ, RLX_NUM_THREADS=str(a.threads))
    work = a.keep or tempfile.mkdtemp(prefix="rlx-int8-")
    os.makedirs(work, exist_ok=True)
    model, paths, in_dir = build(work, np.random.default_rng(1234))
    cmds = {k: co.rlx_cmd(a, "bench", g, pp, in_dir, ["x"], []) for k, (g, pp) in paths.items()}
    rounds = []
    for r in range(a.rounds):
        ri8 = co.run_rlx(a, cmds["int8"], env)
        rf = co.run_rlx(a, cmds["f32"], env)
        i8, f = ri8["median_ms"], rf["median_ms"]
        ort = co.run_ort(a, model, in_dir, os.path.join(work, "ort_out"))
        rounds.append((i8, f, ort["median_ms"], os.getloadavg()[0], ri8["min_ms"], rf["min_ms"], ort["min_ms"]))
        print(f"round {r + 1}: rlx int8 {i8:.3f} ms, rlx f32 {f:.3f} ms, ORT {ort['version']} int8 "
              f"{ort['median_ms']:.3f} ms", file=sys.stderr)
    y_ort = np.fromfile(os.path.join(work, "ort_out", "y.f32"), dtype="<f4").reshape(SEQ, D)
    diffs = {}
    for k in ("int8", "f32"):
        out = os.path.join(work, f"rlx_{k}.npy")
        c = cmds[k][:]
        c[1] = "run"
        subprocess.run(c + ["--mode", "compiled", "-o", f"{json.load(open(paths[k][0]))['outputs'][0]}={out}"],
                       check=True, capture_output=True, env=env)
        diffs[k] = float(np.max(np.abs(np.load(out) - y_ort)))
    med = lambda i: statistics.median(r[i] for r in rounds)  # noqa: E731
    print(f"\nBERT-base FFN layer (x [{SEQ}, {D}], W1 [{D}, {FFN}], W2 [{FFN}, {D}], GELU), {a.threads} threads, "
          f"{a.rounds} rounds x {a.reps} reps; ORT {ort['version']} (onnxruntime-node, CPU)\n")
    mn = lambda i: min(r[i] for r in rounds)  # noqa: E731
    print("| run | median ms | ratio (median of per-round ratios) | best ms | ratio of bests | max abs diff vs ORT int8 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    print(f"| rlx int8 (compiled) | {med(0):.3f} | {statistics.median(r[0] / r[2] for r in rounds):.2f}x ORT int8 | "
          f"{mn(4):.3f} | {mn(4) / mn(6):.2f}x ORT int8 | {diffs['int8']:.2e} |")
    print(f"| rlx f32 (compiled) | {med(1):.3f} | int8 is {statistics.median(r[1] / r[0] for r in rounds):.2f}x faster | "
          f"{mn(5):.3f} | int8 is {mn(5) / mn(4):.2f}x faster | {diffs['f32']:.2e} |")
    print(f"| ORT int8 | {med(2):.3f} | 1 | {mn(6):.3f} | 1 | 0 |")
    print(f"loads per round: {[round(r[3], 1) for r in rounds]}")


if __name__ == "__main__":
    main()
