#!/usr/bin/python3
"""ConvInteger through `rlx run` (eager, lazy and compiled) against a NumPy int64 reference
written here: u8/i8 input and weight, scalar and per-output-channel weight zero points, a zero
point given at run time (as DynamicQuantizeLinear gives it) and as an initializer, padding
(which must contribute nothing after the zero point), strides, dilations, groups, 1x1 kernels,
1-D data and a batch of 2. Exact: every output must be bit-equal.

  tests/onnx/conv_integer.py --rlx build/apps/rlx/rlx [--backend cpu] [--modes eager,lazy,compiled]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def reference(x, w, xz, wz, strides, pads, dil, group):
    """int64 loops over output positions, as ONNX defines ConvInteger (padding with x's zero point)."""
    sd = x.ndim - 2
    x = x.astype(np.int64) - np.int64(xz)
    w = w.astype(np.int64) - np.asarray(wz, np.int64).reshape((-1,) + (1,) * (w.ndim - 1))
    pw = [(0, 0), (0, 0)] + [(pads[i], pads[i + sd]) for i in range(sd)]
    x = np.pad(x, pw)  # zeros: x - xz of the padding value xz
    N, C = x.shape[:2]
    M, Cg = w.shape[:2]
    ks = w.shape[2:]
    outs = [(x.shape[2 + i] - (ks[i] - 1) * dil[i] - 1) // strides[i] + 1 for i in range(sd)]
    y = np.zeros((N, M) + tuple(outs), np.int64)
    Mg = M // group
    for m in range(M):
        g = m // Mg
        xs = x[:, g * Cg:(g + 1) * Cg]
        for idx in np.ndindex(*ks):
            sl = [slice(None), slice(None)]
            for i in range(sd):
                s0 = idx[i] * dil[i]
                sl.append(slice(s0, s0 + (outs[i] - 1) * strides[i] + 1, strides[i]))
            tap = xs[tuple(sl)]  # [N, Cg, *outs]
            y[:, m] += np.einsum("nc...,c->n...", tap, w[(m, slice(None)) + idx])
    return y.astype(np.int32)


def case(rng, name, xshape, wshape, xdt, wdt, *, strides=None, pads=None, dil=None, group=1, wz_per_channel=False,
         xz_input=False, with_zps=True):
    sd = len(xshape) - 2
    strides = strides or [1] * sd
    pads = pads or [0] * (2 * sd)
    dil = dil or [1] * sd
    rand = lambda dt, shape: (rng.integers(0, 256, shape).astype(np.uint8) if dt == "u8"
                              else rng.integers(-128, 128, shape).astype(np.int8))
    x, w = rand(xdt, xshape), rand(wdt, wshape)
    xz = rand(xdt, [])
    wz = rand(wdt, [wshape[0]]) if wz_per_channel else rand(wdt, [])
    if not with_zps:
        xz, wz = np.zeros((), x.dtype), np.zeros((), w.dtype)
    tp = {"u8": TensorProto.UINT8, "i8": TensorProto.INT8}
    inits = [numpy_helper.from_array(w, "w")]
    inputs = [helper.make_tensor_value_info("x", tp[xdt], list(xshape))]
    if with_zps:
        if xz_input:
            inputs.append(helper.make_tensor_value_info("xz", tp[xdt], []))
        else:
            inits.append(numpy_helper.from_array(np.asarray(xz), "xz"))
        inits.append(numpy_helper.from_array(np.asarray(wz), "wz"))
    want = reference(x, w, xz, wz, strides, pads, dil, group)
    node = helper.make_node("ConvInteger", ["x", "w"] + (["xz", "wz"] if with_zps else []), ["y"], strides=strides,
                            pads=pads, dilations=dil, group=group)
    g = helper.make_graph([node], name, inputs, [helper.make_tensor_value_info("y", TensorProto.INT32, list(want.shape))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    feeds = {"x": x}
    if with_zps and xz_input:
        feeds["xz"] = np.asarray(xz)
    return name, m, feeds, want


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--modes", default="eager,lazy,compiled")
    ap.add_argument("--backend", default="cpu")
    a = ap.parse_args()
    rng = np.random.default_rng(19)
    cases = [
        case(rng, "3x3_pad_u8_i8", [1, 5, 9, 11], [7, 5, 3, 3], "u8", "i8", pads=[1, 1, 1, 1]),
        case(rng, "3x3_pad_runtime_zp", [1, 4, 12, 10], [6, 4, 3, 3], "u8", "u8", pads=[1, 2, 0, 1], xz_input=True),
        case(rng, "stride2_dil2_per_channel", [1, 6, 15, 13], [8, 6, 3, 3], "u8", "i8", strides=[2, 2], dil=[2, 2],
             pads=[2, 2, 2, 2], wz_per_channel=True),
        case(rng, "groups_i8_x", [1, 8, 9, 9], [12, 2, 3, 3], "i8", "i8", group=4, pads=[1, 1, 1, 1],
             wz_per_channel=True),
        case(rng, "1x1", [1, 16, 7, 9], [5, 16, 1, 1], "u8", "i8"),
        case(rng, "batch2_5x5", [2, 3, 11, 12], [4, 3, 5, 5], "u8", "u8", pads=[2, 2, 2, 2], strides=[1, 2]),
        case(rng, "1d", [1, 6, 20], [5, 6, 3], "u8", "i8", pads=[1, 1], xz_input=True),
        case(rng, "no_zero_points", [1, 3, 8, 8], [4, 3, 3, 3], "u8", "i8", with_zps=False),
    ]
    fails = runs = 0
    with tempfile.TemporaryDirectory(prefix="rlx-convint-") as tmp:
        for name, m, feeds, want in cases:
            mp = os.path.join(tmp, name + ".onnx")
            onnx.save(m, mp)
            ins = []
            for k, v in feeds.items():
                p = os.path.join(tmp, f"{name}.{k}.npy")
                np.save(p, v)
                ins += ["--input", f"{k}=@{p}"]
            for mode in a.modes.split(","):
                out = os.path.join(tmp, f"{name}.{mode}.y.npy")
                r = subprocess.run([a.rlx, "run", mp, "-b", a.backend, "-m", mode, "--output", f"y={out}"] + ins,
                                   capture_output=True, text=True, timeout=120)
                runs += 1
                if r.returncode != 0:
                    fails += 1
                    print(f"FAIL {name} {mode}: exit {r.returncode}: {r.stderr.strip()[-600:]}")
                    continue
                got = np.load(out)
                if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
                    fails += 1
                    d = np.abs(got.astype(np.int64) - want) if got.shape == want.shape else None
                    print(f"FAIL {name} {mode}: {got.dtype}{list(got.shape)} vs {want.dtype}{list(want.shape)}"
                          + (f", {int((d != 0).sum())} differ, max {int(d.max())}" if d is not None else ""))
    print(f"ConvInteger ({a.backend}): {runs} runs, {fails} failed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
