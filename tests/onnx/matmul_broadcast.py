#!/usr/bin/python3
"""Batched products whose operands broadcast their leading (batch) dims as NumPy's matmul does
([2,1,M,K] x [3,K,N], [M,K] x [2,2,K,N], [1,2,M,K] x [2,1,K,N]), through every kernel family
that walks the batch itself: MatMul in f32, f16 and f64, and MatMulInteger (its fast path and,
with RLX_QGEMM_REFERENCE=1, its reference loop); eager and compiled mode on the CPU. Expected
values: NumPy's matmul in float64 (int32 for MatMulInteger, exact).

  tests/onnx/matmul_broadcast.py --rlx build/apps/rlx/rlx [--out DIR]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_build import finish, model, vi  # noqa: E402

SHAPES = [((2, 1, 3, 4), (3, 4, 5)), ((4, 3), (2, 2, 3, 5)), ((1, 2, 3, 4), (2, 1, 4, 5))]
KINDS = [  # op, element type, NumPy type, relative tolerance, environment
    ("MatMul", TensorProto.FLOAT, np.float32, 1e-5, {}),
    ("MatMul", TensorProto.FLOAT16, np.float16, 3e-3, {}),
    ("MatMul", TensorProto.DOUBLE, np.float64, 1e-14, {}),
    ("MatMulInteger", TensorProto.UINT8, np.uint8, 0, {}),
    ("MatMulInteger", TensorProto.UINT8, np.uint8, 0, {"RLX_QGEMM_REFERENCE": "1"}),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="rlx-bmm-")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(7)
    runs, fails = 0, []
    for op, et, nt, rtol, env in KINDS:
        for sa, sb in SHAPES:
            if op == "MatMulInteger":
                x, w = rng.integers(0, 256, sa).astype(nt), rng.integers(0, 256, sb).astype(nt)
                ref = np.matmul(x.astype(np.int64), w.astype(np.int64))
                yt = TensorProto.INT32
            else:
                x, w = rng.standard_normal(sa).astype(nt), rng.standard_normal(sb).astype(nt)
                ref = np.matmul(x.astype(np.float64), w.astype(np.float64))
                yt = et
            stem = f"{op}_{np.dtype(nt).name}_{'x'.join(map(str, sa))}_{'x'.join(map(str, sb))}"
            path = os.path.join(out, stem + ".onnx")
            m = model([helper.make_node(op, ["a", "b"], ["y"])], [vi("a", sa, et), vi("b", sb, et)], [vi("y", None, yt)])
            with open(path, "wb") as f:
                f.write(m.SerializeToString())
            np.save(os.path.join(out, stem + ".a.npy"), x)
            np.save(os.path.join(out, stem + ".b.npy"), w)
            for mode in ("eager", "compiled"):
                runs += 1
                y_file = os.path.join(out, f"{stem}.{mode}.y.npy")
                what = f"{stem} {mode}{' ' + str(env) if env else ''}"
                r = subprocess.run([a.rlx, "run", path, "--mode", mode, "--input", f"a={out}/{stem}.a.npy",
                                    "--input", f"b={out}/{stem}.b.npy", "--output", f"y={y_file}"],
                                   capture_output=True, text=True, env={**os.environ, **env})
                if r.returncode != 0:
                    fails.append(f"{what}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
                    continue
                y = np.load(y_file)
                if y.shape != ref.shape:
                    fails.append(f"{what}: shape {y.shape}, NumPy {ref.shape}")
                    continue
                if op == "MatMulInteger":
                    if y.dtype != np.int32 or not np.array_equal(y.astype(np.int64), ref):
                        fails.append(f"{what}: dtype {y.dtype}, {np.count_nonzero(y != ref)} values differ from NumPy")
                else:
                    err = np.abs(y.astype(np.float64) - ref).max() / np.abs(ref).max()
                    if y.dtype != nt or err > rtol:
                        fails.append(f"{what}: dtype {y.dtype}, max relative error {err:.3g} > {rtol}")
    return finish("matmul broadcast", runs, fails)


if __name__ == "__main__":
    sys.exit(main())
