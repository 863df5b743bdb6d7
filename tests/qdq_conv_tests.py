#!/usr/bin/python3
"""QDQ convolutions (compiled mode's conv2d_integer_scaled, issue 19), checked against NumPy.

  tests/qdq_conv_tests.py --rlx build/apps/rlx/rlx

Small rlx graphs x -> quantize -> dequantize -> conv2d(., dequantize(const W) [, bias]) in the
forms the rule takes (u8 / i8 activations, i8 / u8 weights per tensor or per output channel,
zero points zero and not, strides, pads, dilation, batch 2, no bias) and two it must leave alone
(groups 2, weights dequantized along axis 1). For each, `rlx run` on the CPU:
- compiled mode's plan holds conv2d_integer_scaled (or, for the two others, does not);
- x's quantization equals NumPy's (x / scale rounded half to even, + zero point, saturated);
- compiled mode's y equals NumPy's integer computation exactly: the sum of (xq - zx)(wq - zw)
  over the window in int64 (padding contributing 0), then f32(sum) * f32(sx * sw) [+ bias] in
  f32, the operations docs/backends.md gives;
- eager and compiled y are within f32 rounding of the float64 convolution of the dequantized
  values (the graph's own meaning).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import graphlib as gl  # noqa: E402

import clitest  # noqa: E402
from clitest import check  # noqa: E402


def windows(a, kh, kw, s, p, d):
    """a [N, C, H, W] (int64 or float64, already zero-padded-free) -> conv windows via padding with 0."""
    N, C, H, W = a.shape
    ap = np.zeros((N, C, H + p[0] + p[2], W + p[1] + p[3]), a.dtype)
    ap[:, :, p[0]:p[0] + H, p[1]:p[1] + W] = a
    OH = (H + p[0] + p[2] - ((kh - 1) * d[0] + 1)) // s[0] + 1
    OW = (W + p[1] + p[3] - ((kw - 1) * d[1] + 1)) // s[1] + 1
    cols = np.zeros((N, C, kh, kw, OH, OW), a.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = ap[:, :, i * d[0]:i * d[0] + s[0] * (OH - 1) + 1:s[0], j * d[1]:j * d[1] + s[1] * (OW - 1) + 1:s[1]]
    return cols


def conv(a, w, s, p, d, groups=1):
    M, Cg, kh, kw = w.shape
    cols = windows(a, kh, kw, s, p, d)
    N, C = a.shape[:2]
    out = []
    for gi in range(groups):
        cg = cols[:, gi * Cg:(gi + 1) * Cg]
        wg = w[gi * (M // groups):(gi + 1) * (M // groups)]
        out.append(np.einsum("nckloq,mckl->nmoq", cg, wg))
    return np.concatenate(out, axis=1)


def case(tmp, rlx, name, rng, *, xdt="u8", wdt="i8", per_channel=True, zw=0, bias=True, N=1, C=3, H=9, W=9, M=5,
         k=(3, 3), s=(1, 1), p=(1, 1, 1, 1), d=(1, 1), groups=1, w_axis=0, expect_rule=True):
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    lo, hi = (0, 255) if xdt == "u8" else (-128, 127)
    sx = np.float32((x.max() - x.min()) / 255)
    zx = np.array(np.clip(np.round(-x.min() / sx) + lo, lo, hi), dtype=np.uint8 if xdt == "u8" else np.int8)
    wl, wh = (-127, 127) if wdt == "i8" else (0, 255)
    wq = rng.integers(wl, wh + 1, size=(M, C // groups) + k).astype(np.int8 if wdt == "i8" else np.uint8)
    nsc = (M if w_axis == 0 else C // groups) if per_channel else 1
    sw = (rng.random(nsc) * 0.01 + 0.001).astype(np.float32)
    zwv = np.full(nsc, zw, dtype=wq.dtype) if per_channel else np.array(zw, dtype=wq.dtype)
    if not per_channel:
        sw = np.array(sw[0], np.float32)
    b = (rng.standard_normal(M) * 0.1).astype(np.float32)
    nodes = [{"id": "x", "op": "input", "shape": [N, C, H, W]},
             {"id": "sx", "op": "param", "shape": [], "name": "sx"}, {"id": "zx", "op": "param", "shape": [], "dtype": xdt, "name": "zx"},
             {"id": "wq", "op": "param", "shape": list(wq.shape), "dtype": wdt, "name": "wq"},
             {"id": "sw", "op": "param", "shape": list(sw.shape), "name": "sw"},
             {"id": "zw", "op": "param", "shape": list(zwv.shape), "dtype": wdt, "name": "zw"},
             {"id": "xq", "op": "quantize", "inputs": ["x", "sx", "zx"]},
             {"id": "xd", "op": "dequantize", "inputs": ["xq", "sx", "zx"]},
             {"id": "wd", "op": "dequantize", "inputs": ["wq", "sw", "zw"], "attrs": {"axis": w_axis}}]
    cin = ["xd", "wd"]
    params = {"sx": (sx, "f32"), "zx": (zx, xdt), "wq": (wq, wdt), "sw": (sw, "f32"), "zw": (zwv, wdt)}
    if bias:
        nodes.append({"id": "b", "op": "param", "shape": [M], "name": "b"})
        params["b"] = (b, "f32")
        cin.append("b")
    nodes.append({"id": "y", "op": "conv2d", "inputs": cin,
                  "attrs": {"strides": list(s), "pads": list(p), "dilations": list(d), "groups": groups}})
    g = {"format": "rlx.graph", "version": 1, "name": name, "nodes": nodes, "outputs": ["y", "xq"]}
    gp, pp, xp = (os.path.join(tmp, f"{name}.{e}") for e in ("json", "safetensors", "npy"))
    with open(gp, "w") as f:
        json.dump(g, f)
    with open(pp, "wb") as f:
        f.write(gl.encode_safetensors(params))
    np.save(xp, x)
    # NumPy: quantization, the exact integer sum, the f32 epilogue; and the float64 meaning.
    xq = np.clip(np.rint(x / sx) + np.float32(zx), lo, hi).astype(zx.dtype)
    zw_b = (zwv.astype(np.int64).reshape(-1, 1, 1, 1) if per_channel and w_axis == 0 else
            zwv.astype(np.int64).reshape(1, -1, 1, 1) if per_channel else np.int64(zwv))
    acc = conv(xq.astype(np.int64) - np.int64(zx), wq.astype(np.int64) - zw_b, s, p, d, groups)
    if per_channel and w_axis == 0:
        sc = (sx * sw).astype(np.float32).reshape(1, M, 1, 1)
    else:
        sc = np.float32(sx * sw) if not per_channel else None
    want_int = None
    if sc is not None:
        want_int = acc.astype(np.float32) * sc
        if bias:
            want_int = want_int + b.reshape(1, M, 1, 1)
    sw_b = sw.astype(np.float64).reshape((-1, 1, 1, 1) if w_axis == 0 else (1, -1, 1, 1)) if per_channel else np.float64(sw)
    wdq = (wq.astype(np.float64) - zw_b) * sw_b
    xdq = (xq.astype(np.float64) - np.float64(zx)) * np.float64(sx)
    want = conv(xdq, wdq, s, p, d, groups) + (b.astype(np.float64).reshape(1, M, 1, 1) if bias else 0)
    mag = conv(np.abs(xdq), np.abs(wdq), s, p, d, groups) + (np.abs(b.astype(np.float64)).reshape(1, M, 1, 1) if bias else 0)
    for mode in ("eager", "compiled"):
        od = os.path.join(tmp, f"{name}_{mode}")
        r = subprocess.run([rlx, "run", gp, "-p", pp, "-i", f"x=@{xp}", "-m", mode, "-b", "cpu", "--out-dir", od]
                           + (["--dump-plan"] if mode == "compiled" else []), capture_output=True, text=True)
        check(f"{name}/{mode}/exit-0", r.returncode == 0, r.stderr[-2000:])
        if r.returncode:
            continue
        if mode == "compiled":
            has = "conv2d_integer_scaled" in r.stdout + r.stderr
            check(f"{name}/compiled/rule-{'applied' if expect_rule else 'not-applied'}", has == expect_rule,
                  "plan " + ("lacks" if expect_rule else "has") + " conv2d_integer_scaled")
        y, gq = np.load(os.path.join(od, "y.npy")), np.load(os.path.join(od, "xq.npy"))
        check(f"{name}/{mode}/xq", gq.dtype == xq.dtype and np.array_equal(gq, xq), f"{int(np.sum(gq != xq))} codes differ")
        err = np.abs(y.astype(np.float64) - want)
        check(f"{name}/{mode}/float64", y.shape == want.shape and bool(np.all(err <= 1e-5 * mag + 1e-6)),
              f"max err {err.max():.3g}, bound {(1e-5 * mag + 1e-6).min():.3g}")
        if mode == "compiled" and expect_rule and want_int is not None:
            check(f"{name}/compiled/integer-exact", np.array_equal(y, want_int),
                  f"max diff {np.abs(y - want_int).max():.3g} on outputs up to {np.abs(want_int).max():.3g}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlx", required=True)
    a = ap.parse_args()
    rng = np.random.default_rng(19)
    with tempfile.TemporaryDirectory(prefix="rlx-qdq-conv-") as tmp:
        case(tmp, a.rlx, "u8_i8_perchannel", rng)
        case(tmp, a.rlx, "u8_i8_batch2_nobias", rng, N=2, bias=False, C=4, M=7)
        case(tmp, a.rlx, "i8_i8_pertensor_zw_stride_dil", rng, xdt="i8", per_channel=False, zw=2, k=(3, 2), s=(2, 2),
             p=(0, 1, 2, 1), d=(2, 1), H=11, W=10)
        case(tmp, a.rlx, "u8_u8_perchannel_zw_1x1", rng, wdt="u8", zw=120, k=(1, 1), p=(0, 0, 0, 0), C=17, M=20)
        case(tmp, a.rlx, "i8_i8_7x7_stride2", rng, xdt="i8", k=(7, 7), s=(2, 2), p=(3, 3, 3, 3), H=20, W=18, M=16)
        # 16 or more channels: the channels-last columns
        case(tmp, a.rlx, "u8_i8_c32_3x3_stride_dil_pads", rng, C=32, M=24, s=(2, 1), p=(1, 0, 1, 2), d=(1, 2), H=10, W=11)
        case(tmp, a.rlx, "i8_u8_c16_pertensor_zw_batch2", rng, xdt="i8", wdt="u8", per_channel=False, zw=130, C=16, M=9, N=2,
             bias=False, H=6, W=7)
        case(tmp, a.rlx, "groups2_left_alone", rng, C=4, M=6, groups=2, expect_rule=False)
        case(tmp, a.rlx, "axis1_left_alone", rng, C=5, M=5, w_axis=1, expect_rule=False)
    sys.exit(clitest.finish("qdq conv tests"))


if __name__ == "__main__":
    main()
