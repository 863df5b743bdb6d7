#!/usr/bin/python3
"""NaN and ±inf propagate as ONNX's reference (NumPy) and PyTorch say, in every mode on every backend.

One graph applies each elementwise op, reduction, normalisation, pooling and index op to an input
holding NaN, +inf, -inf, -0.0 and ordinary values; `rlx run` writes every output, and each is
compared with PyTorch (float64) or NumPy, NaN equal only to NaN and infinities exact. Where the
two references disagree the test follows ONNX's NumPy reference and says so below.

  tests/numerics/nan_inf.py --rlx build/apps/rlx/rlx [--backends cpu,vulkan]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

F = torch.nn.functional
X = np.array([[np.nan, 1.5, -2.0, 0.25],
              [np.inf, -np.inf, 3.0, -0.5],
              [0.0, -0.0, np.inf, 7.0],
              [-1.0, 2.0, -np.inf, 0.5]], np.float32)
Z = np.array([0.0, 1.0, -1.0, 2.0], np.float32)


def cases():
    t = torch.tensor(X, dtype=torch.float64)
    unary = {
        "neg": -t, "exp": t.exp(), "log": t.log(), "sqrt": t.sqrt(), "rsqrt": t.rsqrt(), "abs": t.abs(),
        "tanh": t.tanh(), "sigmoid": t.sigmoid(), "relu": torch.relu(t), "silu": F.silu(t), "erf": torch.erf(t),
        "sin": t.sin(), "cos": t.cos(), "square": t * t, "gelu": F.gelu(t), "floor": t.floor(), "ceil": t.ceil(),
        "round": t.round(), "softplus": F.softplus(t, threshold=1e9),
        # PyTorch's sign(NaN) is 0; ONNX's reference (np.sign) and rlx give NaN.
        "sign": torch.tensor(np.sign(X.astype(np.float64))),
    }
    out = [(op, [{"op": op, "inputs": ["x"]}], r.numpy()) for op, r in unary.items()]
    for op, f in [("sum", lambda a: a.sum(-1)), ("mean", lambda a: a.mean(-1)), ("max", lambda a: a.amax(-1)),
                  ("min", lambda a: a.amin(-1)), ("prod", lambda a: a.prod(-1))]:
        out.append((op, [{"op": op, "inputs": ["x"], "attrs": {"axes": [-1]}}], f(t).numpy()))
        out.append((op + "_cols", [{"op": op, "inputs": ["x"], "attrs": {"axes": [0]}}], f(t.T).numpy()))
    zt = torch.tensor(Z, dtype=torch.float64)
    out += [
        ("maximum", [{"op": "maximum", "inputs": ["x", "z"]}], torch.maximum(t, zt).numpy()),
        ("minimum", [{"op": "minimum", "inputs": ["x", "z"]}], torch.minimum(t, zt).numpy()),
        ("add", [{"op": "add", "inputs": ["x", "z"]}], (t + zt).numpy()),
        ("div", [{"op": "div", "inputs": ["x", "z"]}], (t / zt).numpy()),
        ("mul", [{"op": "mul", "inputs": ["x", "z"]}], (t * zt).numpy()),
        ("softmax", [{"op": "softmax", "inputs": ["x"]}], torch.softmax(t, -1).numpy()),
        ("argmax", [{"op": "argmax", "inputs": ["x"], "attrs": {"axis": 1, "keepdims": False}}], np.argmax(X, 1)),
        ("argmin", [{"op": "argmin", "inputs": ["x"], "attrs": {"axis": 1, "keepdims": False}}], np.argmin(X, 1)),
        ("cumsum", [{"op": "cumsum", "inputs": ["x"], "attrs": {"axis": 1}}], torch.cumsum(t, 1).numpy()),
        ("cumsum_rev", [{"op": "cumsum", "inputs": ["x"], "attrs": {"axis": 0, "reverse": True}}],
         torch.flip(torch.cumsum(torch.flip(t, [0]), 0), [0]).numpy()),
        ("layer_norm", [{"op": "layer_norm", "inputs": ["x"]}], F.layer_norm(t, (4,)).numpy()),
        ("rms_norm", [{"op": "rms_norm", "inputs": ["x"]}], (t / torch.sqrt((t * t).mean(-1, keepdim=True) + 1e-6)).numpy()),
        ("max_pool2d", [{"op": "max_pool2d", "inputs": ["x4"], "attrs": {"kernel": [2, 2], "strides": [2, 2]}}],
         F.max_pool2d(t.reshape(1, 1, 4, 4), 2).numpy()),
        ("avg_pool2d", [{"op": "avg_pool2d", "inputs": ["x4"], "attrs": {"kernel": [2, 2], "strides": [2, 2]}}],
         F.avg_pool2d(t.reshape(1, 1, 4, 4), 2).numpy()),
        ("matmul", [{"op": "matmul", "inputs": ["x", "x"]}], (t @ t).numpy()),
        # NaN ranks above +inf, as in PyTorch and ONNX Runtime.
        ("topk", [{"op": "topk", "inputs": ["x"], "attrs": {"k": 2}}], np.array(
            [[np.nan, 1.5], [np.inf, 3.0], [np.inf, 7.0], [2.0, 0.5]])),
        # The same activations behind a product, where compiled mode runs them in the GEMM's epilogue.
        ("relu_after_matmul", [{"op": "matmul", "inputs": ["x", "x"], "id": "mm"}, {"op": "relu", "inputs": ["mm"]}],
         torch.relu(t @ t).numpy()),
        ("relu_after_add", [{"op": "add", "inputs": ["x", "z"], "id": "a"}, {"op": "relu", "inputs": ["a"]}],
         torch.relu(t + zt).numpy()),
    ]
    return out


def graph(cs):
    nodes = [{"id": "x", "op": "input", "shape": [4, 4]},
             {"id": "z", "op": "constant", "shape": [4], "value": Z.tolist()},
             {"id": "x4", "op": "reshape", "inputs": ["x"], "attrs": {"shape": [1, 1, 4, 4]}}]
    outs = []
    for name, ns, _ in cs:
        for k, n in enumerate(ns):
            n = dict(n)
            local = n.pop("id", None)
            n["id"] = name if k == len(ns) - 1 else local
            nodes.append(n)
        outs.append(name)
    return {"format": "rlx.graph", "version": 1, "name": "nan_inf", "nodes": nodes, "outputs": outs}


def same(got, want):
    if got.shape != want.shape:
        return False
    g, w = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(w)
    if not np.array_equal(np.isnan(g), nan):
        return False
    inf = np.isinf(w)
    if not np.array_equal(g[inf], w[inf]):
        return False
    fin = ~(nan | inf)
    return bool(np.all(np.abs(g[fin] - w[fin]) <= 1e-5 + 1e-4 * np.abs(w[fin])))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--backends", default="cpu,vulkan")
    ap.add_argument("--modes", default="eager,lazy,compiled")
    a = ap.parse_args()
    cs = cases()
    passed = failed = 0
    with tempfile.TemporaryDirectory() as d:
        gp = os.path.join(d, "g.json")
        with open(gp, "w") as f:
            json.dump(graph(cs), f)
        np.save(os.path.join(d, "x.npy"), X)
        for be in a.backends.split(","):
            for mode in a.modes.split(","):
                od = os.path.join(d, f"{be}_{mode}")
                r = subprocess.run([a.rlx, "run", gp, "-i", "x=@" + os.path.join(d, "x.npy"), "--out-dir", od,
                                    "-b", be, "--mode", mode], capture_output=True, text=True)
                if r.returncode != 0:
                    print(f"FAIL {be} {mode}: exit {r.returncode}: {r.stderr.strip()[:400]}")
                    failed += len(cs)
                    continue
                for name, _, want in cs:
                    got = np.load(os.path.join(od, name + ".npy"))
                    if same(got, want):
                        passed += 1
                    else:
                        failed += 1
                        print(f"FAIL {be} {mode} {name}: got {got.tolist()} want {want.tolist()}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
