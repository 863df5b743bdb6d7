#!/usr/bin/python3
"""i8/u8 tensors as bytes (issue 19): data movement of byte tensors, matmul_nbits (the gemv
kernel for few rows of 4-bit weights and the general kernel), matmul_integer at byte offsets
that are not multiples of 4, and the device memory a u8 tensor takes, on every built backend
(the CPU always; Vulkan where `rlx devices` lists a device) in eager, lazy and compiled mode.
Every expected value is computed here with NumPy from the same inputs.

  tests/vulkan_bytes.py --rlx build/apps/rlx/rlx
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import backends, run_graph, write_graph  # noqa: E402

MODES = ["eager", "lazy", "compiled"]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(rlx, graph, inputs, outputs, backend, mode, d, env=None):
    """run_graph with --json: ({output: array}, the printed report), or (None, stderr)."""
    got, p = run_graph(rlx, graph, inputs, outputs, backend, mode, d, env, extra=["--json"])
    return (got, json.loads(p.stdout)) if got is not None else (None, p.stderr)


def data_movement(rlx, d, be):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (3, 5, 7), dtype=np.uint8)  # odd sizes: elements straddle words
    w = rng.integers(-128, 128, (5, 3), dtype=np.int8)
    idx = np.array([[4, 0], [-3, 2]], dtype=np.int32)
    cond = rng.integers(0, 2, (3, 5, 7)).astype(bool)
    f = (rng.standard_normal((3, 5)) * 200).astype(np.float32)
    gi = np.array([[4, 0, 1], [2, 3, 4]], dtype=np.int32)
    nodes = [
        {"id": "x", "op": "input", "shape": [3, 5, 7], "dtype": "u8"},
        {"id": "w", "op": "input", "shape": [5, 3], "dtype": "i8"},
        {"id": "idx", "op": "input", "shape": [2, 2], "dtype": "i32"},
        {"id": "cond", "op": "input", "shape": [3, 5, 7], "dtype": "bool"},
        {"id": "f", "op": "input", "shape": [3, 5]},
        {"id": "gi", "op": "input", "shape": [2, 3], "dtype": "i32"},
        {"id": "t", "op": "transpose", "inputs": ["x"], "attrs": {"perm": [2, 0, 1]}, "shape": [7, 3, 5]},
        {"id": "wt", "op": "transpose", "inputs": ["w"], "shape": [3, 5]},
        {"id": "nw", "op": "narrow", "inputs": ["x"], "attrs": {"axis": 2, "start": 1, "length": 5}, "shape": [3, 5, 5]},
        {"id": "cc", "op": "concat", "inputs": ["x", "nw"], "attrs": {"axis": 2}, "shape": [3, 5, 12]},
        {"id": "g", "op": "gather", "inputs": ["x", "idx"], "attrs": {"axis": 1}, "shape": [3, 2, 2, 7]},
        {"id": "pd", "op": "pad", "inputs": ["w"], "attrs": {"pads": [1, 0, 2, 1], "value": -3}, "shape": [8, 4]},
        {"id": "pe", "op": "pad", "inputs": ["x"], "attrs": {"pads": [0, 2, 1, 0, 1, 3], "mode": "reflect"}, "shape": [3, 8, 11]},
        {"id": "ge", "op": "gather_elements", "inputs": ["w", "gi"], "attrs": {"axis": 0}, "shape": [2, 3]},
        {"id": "sl", "op": "slice", "inputs": ["x"], "attrs": {"starts": [6, 1], "ends": [-100, 5], "axes": [2, 1], "steps": [-2, 3]}, "shape": [3, 2, 4]},
        {"id": "zero", "op": "constant", "shape": [], "dtype": "u8", "value": 7},
        {"id": "wh", "op": "where", "inputs": ["cond", "x", "zero"], "shape": [3, 5, 7]},
        {"id": "bc", "op": "broadcast_to", "inputs": ["wt"], "attrs": {"shape": [2, 3, 5]}, "shape": [2, 3, 5]},
        {"id": "rs", "op": "reshape", "inputs": ["t"], "attrs": {"shape": [5, -1]}, "shape": [5, 21]},
        {"id": "c8", "op": "cast", "inputs": ["x"], "attrs": {"dtype": "i8"}, "shape": [3, 5, 7]},
        {"id": "cf", "op": "cast", "inputs": ["f"], "attrs": {"dtype": "u8"}, "shape": [3, 5]},
        {"id": "ci", "op": "cast", "inputs": ["w"], "attrs": {"dtype": "i32"}, "shape": [5, 3]},
    ]
    outs = ["t", "wt", "nw", "cc", "g", "pd", "pe", "ge", "sl", "wh", "bc", "rs", "c8", "cf", "ci"]
    g = write_graph(d, "bytes_moves", nodes, outs)
    nw = x[:, :, 1:6]
    want = {
        "t": x.transpose(2, 0, 1), "wt": w.T, "nw": nw, "cc": np.concatenate([x, nw], axis=2),
        "g": np.take(x, idx, axis=1), "pd": np.pad(w, ((1, 2), (0, 1)), constant_values=-3),
        "pe": np.pad(x, ((0, 0), (2, 1), (1, 3)), mode="reflect"), "ge": np.take_along_axis(w, gi, axis=0),
        "sl": x[:, 1:5:3, 6::-2], "wh": np.where(cond, x, np.uint8(7)), "bc": np.broadcast_to(w.T, (2, 3, 5)),
        "rs": x.transpose(2, 0, 1).reshape(5, 21), "c8": x.astype(np.int8),
        # f32 -> u8: truncated toward zero and saturated (core/dtype.h)
        "cf": np.clip(np.trunc(f), 0, 255).astype(np.uint8), "ci": w.astype(np.int32),
    }
    for mode in MODES:
        got, info = run(rlx, g, {"x": x, "w": w, "idx": idx, "cond": cond, "f": f, "gi": gi}, outs, be, mode, d)
        if got is None:
            check(False, "%s %s data movement of u8/i8 tensors runs: %s" % (be, mode, info))
            continue
        for k in outs:
            ok = got[k].dtype == want[k].dtype and got[k].shape == want[k].shape and np.array_equal(got[k], want[k])
            check(ok, "%s %s %s (%s %s)" % (be, mode, k, want[k].dtype, want[k].shape))


def nbits_ref(a, b, scales, zp, K, N, bits, bs):
    kb = (K + bs - 1) // bs
    per = 8 // bits
    q = np.zeros((N, kb * bs), dtype=np.float64)
    flat = b.reshape(N, -1)
    for j in range(kb * bs):
        q[:, j] = (flat[:, j // per] >> ((j % per) * bits)) & ((1 << bits) - 1)
    if zp is None:
        z = np.full((N, kb), 1 << (bits - 1), dtype=np.float64)
    else:
        z = np.zeros((N, kb))
        for blk in range(kb):
            z[:, blk] = (zp[:, blk // per] >> ((blk % per) * bits)) & ((1 << bits) - 1)
    deq = (q - np.repeat(z, bs, axis=1)) * np.repeat(scales.astype(np.float64), bs, axis=1)
    return a.astype(np.float64) @ deq[:, :K].T


def matmul_nbits(rlx, d, be):
    rng = np.random.default_rng(2)
    # (a shape, K, N, bits, block, zero points): the first ones take the gemv kernel on Vulkan
    # (4 bits, K and block multiples of 32, at most 8 rows); the rest the general kernel.
    cases = [([1, 256], 256, 13, 4, 32, True), ([3, 128], 128, 10, 4, 64, False), ([2, 4, 64], 64, 5, 4, 32, True),
             ([1, 1024], 1024, 33, 4, 128, True), ([9, 96], 96, 6, 4, 32, True), ([2, 40], 40, 7, 4, 16, True),
             ([3, 48], 48, 5, 8, 16, True)]
    for ci, (ashape, K, N, bits, bs, has_zp) in enumerate(cases):
        kb = (K + bs - 1) // bs
        blob = bs * bits // 8
        a = rng.standard_normal(ashape).astype(np.float32)
        b = rng.integers(0, 256, (N, kb, blob), dtype=np.uint8)
        scales = (rng.random((N, kb)) * 0.1 + 0.01).astype(np.float32)
        zcols = (kb * bits + 7) // 8
        zp = rng.integers(0, 256, (N, zcols), dtype=np.uint8) if has_zp else None
        oshape = ashape[:-1] + [N]
        nodes = [{"id": "a", "op": "input", "shape": ashape}, {"id": "b", "op": "input", "shape": [N, kb, blob], "dtype": "u8"},
                 {"id": "s", "op": "input", "shape": [N, kb]}]
        ins = {"a": a, "b": b, "s": scales}
        if has_zp:
            nodes.append({"id": "z", "op": "input", "shape": [N, zcols], "dtype": "u8"})
            ins["z"] = zp
        nodes.append({"id": "y", "op": "matmul_nbits", "inputs": ["a", "b", "s"] + (["z"] if has_zp else []),
                      "attrs": {"k": K, "n": N, "bits": bits, "block_size": bs}, "shape": oshape})
        g = write_graph(d, "nbits%d" % ci, nodes, ["y"])
        want = nbits_ref(a.reshape(-1, K), b, scales, zp, K, N, bits, bs).reshape(oshape)
        envs = [({}, "")]
        if be == "vulkan":  # the general kernel, and the gemv's unrolled variant loading 4 chunks per pass
            envs += [({"RLX_VK_NBITS_GENERIC": "1"}, " general kernel"), ({"RLX_VK_NBITS_GEMV": "16x4x4x1"}, " gemv 16x4x4x1")]
        for env, tag in envs:
            for mode in MODES:
                got, info = run(rlx, g, ins, ["y"], be, mode, d, env)
                what = "%s %s matmul_nbits a %s K %d N %d bits %d block %d zp %s%s" % (be, mode, ashape, K, N, bits, bs, has_zp, tag)
                if got is None:
                    check(False, what + ": " + info)
                    continue
                err = np.abs(got["y"] - want).max()
                check(np.allclose(got["y"], want, atol=1e-4, rtol=1e-4), what + " (max error %.2g)" % err)


def matmul_integer(rlx, d, be):
    rng = np.random.default_rng(3)
    M, K, N = 5, 37, 7  # rows of a start at byte offsets that are not multiples of 4
    for at, bt in [(np.uint8, np.int8), (np.int8, np.uint8)]:
        info_a, info_b = np.iinfo(at), np.iinfo(bt)
        a = rng.integers(info_a.min, info_a.max + 1, (M, K), dtype=at)
        b = rng.integers(info_b.min, info_b.max + 1, (K, N), dtype=bt)
        za = rng.integers(info_a.min, info_a.max + 1, (M,), dtype=at)
        zb = rng.integers(info_b.min, info_b.max + 1, (N,), dtype=bt)
        an, bn = ("u8" if at == np.uint8 else "i8"), ("u8" if bt == np.uint8 else "i8")
        nodes = [{"id": "a", "op": "input", "shape": [M, K], "dtype": an}, {"id": "b", "op": "input", "shape": [K, N], "dtype": bn},
                 {"id": "za", "op": "input", "shape": [M], "dtype": an}, {"id": "zb", "op": "input", "shape": [N], "dtype": bn},
                 {"id": "y", "op": "matmul_integer", "inputs": ["a", "b", "za", "zb"], "shape": [M, N]}]
        g = write_graph(d, "mmint_" + an + bn, nodes, ["y"])
        want = (a.astype(np.int64) - za[:, None].astype(np.int64)) @ (b.astype(np.int64) - zb[None, :].astype(np.int64))
        what = "%%s %%s matmul_integer %s x %s K 37" % (an, bn)
        for mode in MODES:
            got, info = run(rlx, g, {"a": a, "b": b, "za": za, "zb": zb}, ["y"], be, mode, d)
            if got is None:
                check(False, what % (be, mode) + ": " + info)
                continue
            check(got["y"].dtype == np.int32 and np.array_equal(got["y"], want), what % (be, mode))


def memory(rlx, d, be):
    # A u8 input of n elements dequantized to f32: the device holds n bytes for it (1 byte per
    # element, not 4) plus 4n for the output; peak_bytes counts both (and a little alignment).
    n = 1 << 20
    q = np.arange(n, dtype=np.uint32).astype(np.uint8)
    nodes = [{"id": "q", "op": "input", "shape": [n], "dtype": "u8"}, {"id": "s", "op": "constant", "shape": [], "value": 0.5},
             {"id": "y", "op": "dequantize", "inputs": ["q", "s"], "shape": [n]}]
    g = write_graph(d, "bytes_mem", nodes, ["y"])
    for mode in ["lazy", "compiled"]:
        got, info = run(rlx, g, {"q": q}, ["y"], be, mode, d)
        if got is None:
            check(False, "%s %s dequantize of 1M u8: %s" % (be, mode, info))
            continue
        check(np.array_equal(got["y"], q.astype(np.float32) * 0.5), "%s %s dequantize of 1M u8 values" % (be, mode))
        peak = info["peak_bytes"]
        check(5 * n <= peak <= 5 * n + 65536, "%s %s a u8 tensor of %d elements takes 1 byte each: peak %d bytes, "
              "expected 5n..5n+64KiB (4n f32 output)" % (be, mode, n, peak))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlx", required=True)
    args = ap.parse_args()
    bes = backends(args.rlx)
    print("backends:", ", ".join(bes))
    with tempfile.TemporaryDirectory() as d:
        for be in bes:
            data_movement(args.rlx, d, be)
            matmul_nbits(args.rlx, d, be)
            matmul_integer(args.rlx, d, be)
            memory(args.rlx, d, be)
    if failures:
        print("%d checks failed" % len(failures))
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
