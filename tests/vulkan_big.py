#!/usr/bin/python3
"""Tensors larger than one Vulkan storage-buffer binding (issue 30), without large tensors:
RLX_VK_MAX_BINDING_BYTES=65536 lowers the device's binding limit, and every graph here has
tensors of 100 KB to 1 MB, so the Vulkan executor must cut its kernels into parts that fit
(matmul/linear by rows, weight rows and K blocks, batched products by batches, elementwise and
fused kernels by slabs, copies by boxes, convolutions by images and output channels, pools,
norms, softmax and reductions by rows, embedding tables by rows). Every
expected value is computed here with NumPy; eager, lazy and compiled mode; the CPU runs the same
graphs (it has no such limit), Vulkan where `rlx devices` lists a device. An op that cannot be
split must be refused with exit 3 and a message naming the tensor, its bytes and the limit.

  tests/vulkan_big.py --rlx build/apps/rlx/rlx
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import backends, run_graph as run, write_graph  # noqa: E402

MODES = ["eager", "lazy", "compiled"]
LIMIT = 65536
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def inp(name, a):
    dt = {np.float32: "f32", np.float16: "f16", np.int32: "i32"}[a.dtype.type]
    return {"id": name, "op": "input", "shape": list(a.shape), "dtype": dt}


def cases(rng):
    """(name, nodes, inputs, expected {output: array}, tolerance)"""
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    out = []

    # linear: a [300, 700] weight (840 KB) by blocks of its rows; 3 rows (y's columns through scratch),
    # 1 row (straight into y), and an f16 weight (2-byte storage); then relu (elementwise).
    x3, x1, W, b = f(3, 700), f(1, 700), f(300, 700) * 0.05, f(300)
    Wh = W.astype(np.float16)
    out.append(("linear_weight_rows", [
        inp("x3", x3), inp("x1", x1), inp("W", W), inp("b", b), inp("Wh", Wh),
        {"id": "y3", "op": "linear", "inputs": ["x3", "W", "b"], "shape": [3, 300]},
        {"id": "r3", "op": "relu", "inputs": ["y3"], "shape": [3, 300]},
        {"id": "y1", "op": "linear", "inputs": ["x1", "W", "b"], "shape": [1, 300]},
        {"id": "yh", "op": "linear", "inputs": ["x3", "Wh"], "shape": [3, 300]},
    ], {"x3": x3, "x1": x1, "W": W, "b": b, "Wh": Wh},
        {"r3": np.maximum(x3.astype(np.float64) @ W.T.astype(np.float64) + b, 0),
         "y1": x1.astype(np.float64) @ W.T.astype(np.float64) + b,
         "yh": x3.astype(np.float64) @ Wh.astype(np.float64).T}, 1e-3))

    # matmul with b [600, 200] (480 KB) by K blocks: a of 5 rows (its columns copied), a vector,
    # a transposed a, 100 rows (row blocks, each by K blocks), an f16 b; many rows of a and y
    # (a [2000, 40], y [2000, 30]) by row blocks.
    a5, a1, at, B = f(5, 600), f(1, 600), f(600, 5), f(600, 200) * 0.05
    am, Wm = f(2000, 40), f(30, 40)
    a100, Bh = f(100, 600), (f(600, 200) * 0.05).astype(np.float16)
    out.append(("matmul_k_blocks", [
        inp("a5", a5), inp("a1", a1), inp("at", at), inp("B", B), inp("am", am), inp("Wm", Wm), inp("a100", a100),
        inp("Bh", Bh),
        {"id": "y100", "op": "matmul", "inputs": ["a100", "B"], "shape": [100, 200]},
        {"id": "yh", "op": "matmul", "inputs": ["a5", "Bh"], "shape": [5, 200]},
        {"id": "y5", "op": "matmul", "inputs": ["a5", "B"], "shape": [5, 200]},
        {"id": "yv", "op": "matmul", "inputs": ["a1", "B"], "shape": [1, 200]},
        {"id": "yt", "op": "matmul", "inputs": ["at", "B"], "attrs": {"transpose_a": True}, "shape": [5, 200]},
        {"id": "ym", "op": "linear", "inputs": ["am", "Wm"], "shape": [2000, 30]},
    ], {"a5": a5, "a1": a1, "at": at, "B": B, "am": am, "Wm": Wm, "a100": a100, "Bh": Bh},
        {"y100": a100.astype(np.float64) @ B, "yh": a5.astype(np.float64) @ Bh.astype(np.float64),
         "y5": a5.astype(np.float64) @ B, "yv": a1.astype(np.float64) @ B, "yt": at.T.astype(np.float64) @ B,
         "ym": am.astype(np.float64) @ Wm.T.astype(np.float64)}, 1e-3))

    # batched products: batches of their own (a, b [4, 100, 64] and [4, 64, 100]: 100 KB each),
    # and a shared b (batches folded into rows).
    ba, bb, bs = f(4, 100, 64), f(4, 64, 100), f(64, 80)
    out.append(("matmul_batched", [
        inp("ba", ba), inp("bb", bb), inp("bs", bs),
        {"id": "yb", "op": "matmul", "inputs": ["ba", "bb"], "shape": [4, 100, 100]},
        {"id": "yf", "op": "matmul", "inputs": ["ba", "bs"], "shape": [4, 100, 80]},
    ], {"ba": ba, "bb": bb, "bs": bs},
        {"yb": ba.astype(np.float64) @ bb, "yf": ba.astype(np.float64) @ bs}, 1e-3))

    # elementwise chain over [300, 257] (308 KB): broadcast row and column operands, unary ops
    # (fused in compiled mode), a cast to f16 and back, softmax and layer_norm rows.
    e, r, c = f(300, 257), f(257), f(300, 1)
    t = np.tanh((e + r) * c)
    s = 1 / (1 + np.exp(-e.astype(np.float64)))
    z = t.astype(np.float64) - s
    sm = np.exp(z - z.max(-1, keepdims=True))
    sm /= sm.sum(-1, keepdims=True)
    mu, var = e.astype(np.float64).mean(-1, keepdims=True), e.astype(np.float64).var(-1, keepdims=True)
    out.append(("elementwise_chain", [
        inp("e", e), inp("r", r), inp("c", c),
        {"id": "p", "op": "add", "inputs": ["e", "r"], "shape": [300, 257]},
        {"id": "q", "op": "mul", "inputs": ["p", "c"], "shape": [300, 257]},
        {"id": "t", "op": "tanh", "inputs": ["q"], "shape": [300, 257]},
        {"id": "s", "op": "sigmoid", "inputs": ["e"], "shape": [300, 257]},
        {"id": "z", "op": "sub", "inputs": ["t", "s"], "shape": [300, 257]},
        {"id": "h", "op": "cast", "inputs": ["z"], "attrs": {"dtype": "f16"}, "shape": [300, 257], "dtype": "f16"},
        {"id": "zh", "op": "cast", "inputs": ["h"], "attrs": {"dtype": "f32"}, "shape": [300, 257]},
        {"id": "sm", "op": "softmax", "inputs": ["z"], "attrs": {"axis": -1}, "shape": [300, 257]},
        {"id": "ln", "op": "layer_norm", "inputs": ["e"], "shape": [300, 257]},
        {"id": "rs", "op": "sum", "inputs": ["e"], "attrs": {"axes": [1]}, "shape": [300]},
        {"id": "rm", "op": "max", "inputs": ["e"], "attrs": {"axes": [-1], "keepdims": True}, "shape": [300, 1]},
    ], {"e": e, "r": r, "c": c},
        {"z": z, "zh": z.astype(np.float16).astype(np.float64), "sm": sm, "ln": (e - mu) / np.sqrt(var + 1e-5),
         "rs": e.astype(np.float64).sum(1), "rm": e.max(1, keepdims=True).astype(np.float64)},
        2e-3))

    # copies: transpose, narrow, concat, broadcast_to, reshape of tensors above the limit.
    m, row = f(300, 257), f(1, 257)
    out.append(("copies", [
        inp("m", m), inp("row", row),
        {"id": "tr", "op": "transpose", "inputs": ["m"], "shape": [257, 300]},
        {"id": "nw", "op": "narrow", "inputs": ["m"], "attrs": {"axis": 1, "start": 7, "length": 200}, "shape": [300, 200]},
        {"id": "cc", "op": "concat", "inputs": ["m", "m"], "attrs": {"axis": 1}, "shape": [300, 514]},
        {"id": "bc", "op": "broadcast_to", "inputs": ["row"], "attrs": {"shape": [300, 257]}, "shape": [300, 257]},
        {"id": "rs", "op": "reshape", "inputs": ["tr"], "attrs": {"shape": [300, 257]}, "shape": [300, 257]},
    ], {"m": m, "row": row},
        {"tr": m.T, "nw": m[:, 7:207], "cc": np.concatenate([m, m], 1), "bc": np.broadcast_to(row, (300, 257)),
         "rs": m.T.reshape(300, 257)}, 0))

    # convolution and pooling over 8 images (x 96 KB, y 256 KB), by images.
    xc, wc, bcv = f(8, 3, 32, 32), f(8, 3, 3, 3) * 0.3, f(8)
    xp = np.pad(xc.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((8, 8, 32, 32))
    for i in range(3):
        for j in range(3):
            conv += np.einsum("nchw,mc->nmhw", xp[:, :, i:i + 32, j:j + 32], wc[:, :, i, j].astype(np.float64))
    conv += bcv[None, :, None, None]
    pool = conv.reshape(8, 8, 16, 2, 16, 2).max(axis=(3, 5))
    out.append(("conv_pool", [
        inp("xc", xc), inp("wc", wc), inp("bcv", bcv),
        {"id": "cv", "op": "conv2d", "inputs": ["xc", "wc", "bcv"], "attrs": {"pads": [1, 1, 1, 1]}, "shape": [8, 8, 32, 32]},
        {"id": "mp", "op": "max_pool2d", "inputs": ["cv"], "attrs": {"kernel": [2, 2], "strides": [2, 2]}, "shape": [8, 8, 16, 16]},
    ], {"xc": xc, "wc": wc, "bcv": bcv}, {"cv": conv, "mp": pool}, 1e-3))

    # conv2d weights above the limit: [128, 16, 3, 3] in 2 groups (74 KB: by whole groups) and
    # [40, 64, 3, 3] in one group (92 KB: by blocks of output channels), per image.
    def conv_ref(xx, ww, bb, groups):
        n, cin, hh, wd = xx.shape
        m = ww.shape[0]
        cg, mg = cin // groups, m // groups
        xq = np.pad(xx.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        y = np.zeros((n, m, hh, wd))
        for gi in range(groups):
            for i in range(3):
                for j in range(3):
                    y[:, gi * mg:(gi + 1) * mg] += np.einsum(
                        "nchw,mc->nmhw", xq[:, gi * cg:(gi + 1) * cg, i:i + hh, j:j + wd],
                        ww[gi * mg:(gi + 1) * mg, :, i, j].astype(np.float64))
        return y + bb[None, :, None, None]
    xg, wg, bg = f(2, 32, 6, 6), f(128, 16, 3, 3) * 0.2, f(128)
    x1, w1, b1 = f(3, 64, 5, 7), f(40, 64, 3, 3) * 0.1, f(40)
    out.append(("conv_big_weights", [
        inp("xg", xg), inp("wg", wg), inp("bg", bg), inp("x1", x1), inp("w1", w1), inp("b1", b1),
        {"id": "cg", "op": "conv2d", "inputs": ["xg", "wg", "bg"], "attrs": {"pads": [1, 1, 1, 1], "groups": 2}, "shape": [2, 128, 6, 6]},
        {"id": "c1", "op": "conv2d", "inputs": ["x1", "w1", "b1"], "attrs": {"pads": [1, 1, 1, 1]}, "shape": [3, 40, 5, 7]},
    ], {"xg": xg, "wg": wg, "bg": bg, "x1": x1, "w1": w1, "b1": b1},
        {"cg": conv_ref(xg, wg, bg, 2), "c1": conv_ref(x1, w1, b1, 1)}, 1e-3))

    # x, w and y bind whole but the im2col matrix (512 x 72 f32, 147 KB) does not: the product
    # route over groups of 3 images (3, 3, 2), not the direct loop.
    xi, wi, bi = f(8, 8, 8, 8), f(8, 8, 3, 3) * 0.2, f(8)
    out.append(("conv_im2col_groups", [
        inp("xi", xi), inp("wi", wi), inp("bi", bi),
        {"id": "ci", "op": "conv2d", "inputs": ["xi", "wi", "bi"], "attrs": {"pads": [1, 1, 1, 1]}, "shape": [8, 8, 8, 8]},
    ], {"xi": xi, "wi": wi, "bi": bi}, {"ci": conv_ref(xi, wi, bi, 1)}, 1e-3))

    # embedding: a [600, 40] table (96 KB) and a [300, 64] f16 table with an f16 output, by
    # blocks of the table's rows and of the output's rows.
    tab, tabh = f(600, 40), f(300, 64).astype(np.float16)
    ids = rng.integers(0, 600, (5, 90)).astype(np.int32)
    idh = rng.integers(0, 300, (700,)).astype(np.int32)
    out.append(("embedding", [
        inp("tab", tab), inp("tabh", tabh), {"id": "ids", "op": "input", "shape": [5, 90], "dtype": "i32"},
        {"id": "idh", "op": "input", "shape": [700], "dtype": "i32"},
        {"id": "em", "op": "embedding", "inputs": ["tab", "ids"], "shape": [5, 90, 40]},
        {"id": "eh", "op": "embedding", "inputs": ["tabh", "idh"], "shape": [700, 64], "dtype": "f16"},
        {"id": "ehf", "op": "cast", "inputs": ["eh"], "attrs": {"dtype": "f32"}, "shape": [700, 64]},
    ], {"tab": tab, "tabh": tabh, "ids": ids, "idh": idh},
        {"em": tab[ids].astype(np.float64), "ehf": tabh[idh].astype(np.float64)}, 0))
    return out


# The golden cases of the ops split above (their expected values come from NumPy or PyTorch via
# scripts/gen_goldens.py), on Vulkan under a 4096-byte binding limit, lazy mode: most of their
# tensors are then larger than a binding. op_conv2d_tiles must be refused (one image's input,
# 31680 bytes, is larger than 4096), by name.
GOLDEN_RE = (r"^op_(matmul|conv|max_pool|avg_pool|layer_norm|rms_norm|softmax|add|mul|cast|transpose|concat|"
             r"embedding|sum|mean|linear|narrow|broadcast)|^example_(mlp|tiny_llama|norms|gelu_chain)$")
REFUSED = {"op_conv2d_tiles": "input 0 'x' ([1, 8, 30, 33] f32, 31680 bytes on the device)"}


def goldens(rlx):
    import glob
    import re
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
    n = 0
    for cj in sorted(glob.glob(os.path.join(root, "*", "case.json"))):
        d = os.path.dirname(cj)
        name = os.path.basename(d)
        if not re.search(GOLDEN_RE, name):
            continue
        c = json.load(open(cj))
        a = [rlx, "run", os.path.join(d, c["graph"]), "--backend", "vulkan", "--mode", "lazy",
             "--atol", str(c["atol"]), "--rtol", str(c["rtol"])]
        for q in c["params"]:
            a += ["--params", os.path.join(d, q)]
        for k, v in c["inputs"].items():
            a += ["--input", "%s=@%s" % (k, os.path.join(d, v))]
        for k, v in c["expected"].items():
            a += ["--expect", "%s=@%s" % (k, os.path.join(d, v))]
        p = subprocess.run(a, capture_output=True, text=True, env=dict(os.environ, RLX_VK_MAX_BINDING_BYTES="4096"))
        n += 1
        m3 = re.match(r"op_(conv3d|conv_transpose3d|max_pool3d|avg_pool3d)", name)
        if m3:  # the 3-D family is not split (docs/backends.md): it fits and matches, or is refused by op
            check(p.returncode == 0 or (p.returncode == 3 and "op %s cannot be split" % m3.group(1) in p.stderr),
                  "golden %s (3-D, not split) matches or is refused under a 4096-byte limit: %s" % (name, p.stderr.strip()[-300:]))
        elif name in REFUSED:
            check(p.returncode == 3 and REFUSED[name] in p.stderr and "cannot be split" in p.stderr,
                  "golden %s refused under a 4096-byte limit: %s" % (name, p.stderr.strip()[-300:]))
        else:
            check(p.returncode == 0, "golden %s on Vulkan under a 4096-byte limit%s" %
                  (name, "" if p.returncode == 0 else ": rc %d %s" % (p.returncode, p.stderr.strip()[-300:])))
    check(n >= 80, "%d golden cases run under the 4096-byte limit" % n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlx", required=True)
    args = ap.parse_args()
    rng = np.random.default_rng(30)
    bes = backends(args.rlx)
    env = {"RLX_VK_MAX_BINDING_BYTES": str(LIMIT)}
    with tempfile.TemporaryDirectory() as d:
        for name, nodes, inputs, expected, tol in cases(rng):
            big = max(v.nbytes for v in list(inputs.values()) + list(expected.values()))
            # the point: something exceeds the binding limit (conv_im2col_groups: its scratch)
            assert big > LIMIT or name == "conv_im2col_groups", name
            g = write_graph(d, name, nodes, list(expected))
            for be in bes:
                for mode in MODES:
                    got, p = run(args.rlx, g, inputs, list(expected), be, mode, d, env)
                    if got is None:
                        check(False, "%s %s %s: rlx failed (%d): %s" % (name, be, mode, p.returncode, p.stderr.strip()))
                        continue
                    for k, want in expected.items():
                        err = float(np.max(np.abs(got[k].astype(np.float64) - want) / (1 + np.abs(want))))
                        check(got[k].shape == want.shape and err <= tol,
                              "%s %s %s %s: max rel err %.3g (tol %g)" % (name, be, mode, k, err, tol))

        # What cannot be split (a reduction of a whole tensor above the limit) is refused, naming it.
        x = rng.standard_normal((300, 257)).astype(np.float32)
        g = write_graph(d, "refused", [inp("big", x), {"id": "s", "op": "sum", "inputs": ["big"], "shape": []}], ["s"])
        if "vulkan" in bes:
            for mode in MODES:
                got, p = run(args.rlx, g, {"big": x}, ["s"], "vulkan", mode, d, env)
                msg = "" if got is not None else p.stderr
                check(got is None and p.returncode == 3 and "input 0 'big' ([300, 257] f32, 308400 bytes" in msg
                      and "exceeds the largest storage-buffer binding, 65536 bytes (RLX_VK_MAX_BINDING_BYTES" in msg
                      and "op sum cannot be split" in msg, "refused sum %s: rc %s: %s" % (mode, None if got else p.returncode, msg.strip()))
            got, p = run(args.rlx, g, {"big": x}, ["s"], "vulkan", "lazy", d, {"RLX_VK_MAX_BINDING_BYTES": "64k"})
            check(got is None and p.returncode == 2 and "RLX_VK_MAX_BINDING_BYTES must be a number of bytes" in p.stderr,
                  "a bad RLX_VK_MAX_BINDING_BYTES is refused (exit 2): %s" % (p.stderr.strip() if got is None else "ran"))
            # A bad index into a split embedding table is still reported (by the first block).
            tab = rng.standard_normal((600, 40)).astype(np.float32)
            ids = np.array([[3, 600, 5]], dtype=np.int32)
            ge = write_graph(d, "bad_index", [inp("tab", tab), {"id": "ids", "op": "input", "shape": [1, 3], "dtype": "i32"},
                                              {"id": "em", "op": "embedding", "inputs": ["tab", "ids"], "shape": [1, 3, 40]}], ["em"])
            got, p = run(args.rlx, ge, {"tab": tab, "ids": ids}, ["em"], "vulkan", "lazy", d, env)
            check(got is None and p.returncode == 3 and "index 600 is outside [0, 600)" in p.stderr,
                  "bad index into a split table: %s" % (p.stderr.strip() if got is None else "ran"))
        # Without the lower limit the reduction runs (the device's own limit is far above 300 KB).
        for be in bes:
            got, p = run(args.rlx, g, {"big": x}, ["s"], be, "lazy", d, {})
            check(got is not None and abs(float(got["s"]) - x.astype(np.float64).sum()) < 1e-2,
                  "sum without the lowered limit on %s" % be)
    if "vulkan" in bes:
        goldens(args.rlx)
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
