#!/usr/bin/python3
"""Loop and Scan bodies whose shapes follow from values computed inside them, through `rlx run`,
against the same loops written in NumPy (docs/onnx.md, "Control flow", "Data-dependent output
shapes"). Such a body is imported again for each input value it reads (the iteration number, a
carried value), cached per body (a repeated value plans nothing); a data-dependent node inside a
body continues in a body made for its observed size.

Hand-written models (onnx.helper):
  * loop_sizes: a Loop (M given by value) whose body computes n = i + 1 and then slices a
    captured vector x[:n], resizes a captured 2x3 image to (n+1) x 2n (nearest, asymmetric,
    floor), and builds Range(0, n), ConstantOfShape([n]), Expand(3, [n]) and Reshape(x[:2n],
    [2, n]); their sums go to a carried total and a scan output per iteration.
  * scan_state_slice: a Scan whose state s (an int64 scalar, s + 2 each step) is the start of a
    Slice of a captured vector, its end min(s + 3, 16) (not the start plus a constant, which the
    importer turns into a gather without a body per value), read per scan element.
  * loop_nonzero: a Loop whose body keeps the positive entries of row i of a captured [M, 7]
    matrix (NonZero, a data-dependent size inside the body, a different size per row).
  * loop_grow: as Keypoint R-CNN's heatmap loop, a body whose Resize size is gathered from a
    captured tensor computed from the data (so the body is imported only when it runs) and
    whose carried value grows by a row per iteration (a Concat); a ReduceSum after the loop
    runs in the graph made for the observed shape. Two inputs give different sizes.
Every case runs in eager, lazy and compiled mode on the chosen backend; the cache is checked by
--repeat 3 --json (the last run plans nothing). Also: `rlx convert` refuses such a body, and
loop_grow with a scan output is still refused (exit 2, naming the node; docs/onnx.md, Limits),
and an unknown operator inside such a body is refused when the model is loaded.

  tests/onnx/body_shapes.py --rlx build/apps/rlx/rlx [--out DIR] [--backend cpu|vulkan] [--modes eager,lazy,compiled]
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from onnx_build import case_args, finish, model, vi  # noqa: E402

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name + "_v"))


def resize_nearest(img, oh, ow):
    """Resize nearest, coordinate_transformation_mode asymmetric, nearest_mode floor."""
    h, w = img.shape
    ys = np.floor(np.arange(oh) * (h / oh)).astype(int)
    xs = np.floor(np.arange(ow) * (w / ow)).astype(int)
    return img[ys][:, xs]


def loop_sizes():
    M = 5
    x = np.linspace(-1, 2, 12).astype(np.float32)  # a capture (an initializer of the outer graph)
    img = np.array([[1, 2, 3], [4, 5, 6]], np.float32).reshape(1, 1, 2, 3)
    body = helper.make_graph([
        const("one", np.int64(1)), const("zero1", np.array([0], np.int64)), const("ax0", np.array([0], np.int64)),
        const("c11", np.array([1, 1], np.int64)), const("two", np.int64(2)), const("three", np.float32(3)),
        const("twoshape", np.array([2], np.int64)),
        helper.make_node("Add", ["i", "one"], ["n"]),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
        helper.make_node("Slice", ["x", "zero1", "n1"], ["xs"]),  # x[:n]
        helper.make_node("ReduceSum", ["xs"], ["s_slice"], keepdims=0),
        helper.make_node("Add", ["n", "one"], ["h"]),
        helper.make_node("Mul", ["n", "two"], ["w"]),
        helper.make_node("Unsqueeze", ["h", "ax0"], ["h1"]),
        helper.make_node("Unsqueeze", ["w", "ax0"], ["w1"]),
        helper.make_node("Concat", ["c11", "h1", "w1"], ["sizes"], axis=0),
        helper.make_node("Resize", ["img", "", "", "sizes"], ["r"], mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        helper.make_node("ReduceSum", ["r"], ["s_resize"], keepdims=0),
        helper.make_node("Range", ["zero", "n", "one"], ["rg"]),
        helper.make_node("Cast", ["rg"], ["rgf"], to=F),
        helper.make_node("ReduceSum", ["rgf"], ["s_range"], keepdims=0),
        helper.make_node("ConstantOfShape", ["n1"], ["cs"], value=numpy_helper.from_array(np.array([2], np.float32), "cv")),
        helper.make_node("ReduceSum", ["cs"], ["s_cos"], keepdims=0),
        helper.make_node("Expand", ["three", "n1"], ["ex"]),
        helper.make_node("ReduceSum", ["ex"], ["s_expand"], keepdims=0),
        helper.make_node("Slice", ["x", "zero1", "w1"], ["x2n"]),  # x[:2n]
        helper.make_node("Concat", ["twoshape", "n1"], ["rs"], axis=0),
        helper.make_node("Reshape", ["x2n", "rs"], ["x2"]),  # [2, n]
        helper.make_node("ReduceSum", ["x2", "ax0"], ["colsum"], keepdims=0),  # [n] (opset 13: axes an input)
        helper.make_node("ReduceMax", ["colsum"], ["s_reshape"], keepdims=0),
        helper.make_node("Sum", ["s_slice", "s_resize", "s_range", "s_cos", "s_expand", "s_reshape"], ["s"]),
        helper.make_node("Add", ["acc", "s"], ["acc_out"]),
        helper.make_node("Unsqueeze", ["s_resize", "ax0"], ["sr1"]),
        helper.make_node("Unsqueeze", ["s_reshape", "ax0"], ["sp1"]),
        helper.make_node("Concat", ["sr1", "sp1"], ["scan"], axis=0),
        helper.make_node("Identity", ["cond"], ["cond_out"]),
    ], "body", [vi("i", [], I64), vi("cond", [], B), vi("acc", [])],
        [vi("cond_out", [], B), vi("acc_out", []), vi("scan", [2])],
        [numpy_helper.from_array(np.int64(0), "zero")])
    nodes = [helper.make_node("Loop", ["M", "", "acc0"], ["total", "per_iter"], body=body, name="the_loop")]
    m = model(nodes, [vi("M", [], I64), vi("acc0", [])], [vi("total", []), vi("per_iter", [M, 2])],
              [numpy_helper.from_array(x, "x"), numpy_helper.from_array(img, "img")])
    acc, per = np.float32(0.5), []
    for i in range(M):
        n = i + 1
        s_resize = resize_nearest(img[0, 0], n + 1, 2 * n).sum()
        s_reshape = x[:2 * n].reshape(2, n).sum(0).max()
        s = x[:n].sum() + s_resize + np.arange(n).sum() + 2.0 * n + 3.0 * n + s_reshape
        acc = acc + s
        per.append([s_resize, s_reshape])
    cases = [({"M": np.array(M, np.int64), "acc0": np.array(0.5, np.float32)},
              {"total": np.array(acc, np.float32), "per_iter": np.array(per, np.float32)})]
    return m, cases


def scan_state_slice():
    L = 4
    x = (np.arange(16, dtype=np.float32) - 5) * 0.25
    body = helper.make_graph([
        const("two", np.int64(2)), const("ax0", np.array([0], np.int64)), const("three", np.int64(3)),
        helper.make_node("Add", ["s", "two"], ["s_out"]),
        const("len", np.int64(16)),
        helper.make_node("Add", ["s", "three"], ["e_raw"]),
        helper.make_node("Min", ["e_raw", "len"], ["e"]),  # clamped to x's length, as exporters write it
        helper.make_node("Unsqueeze", ["s", "ax0"], ["s1"]),
        helper.make_node("Unsqueeze", ["e", "ax0"], ["e1"]),
        helper.make_node("Slice", ["x", "s1", "e1"], ["xs"]),  # x[s:min(s+3, 16)]
        helper.make_node("Mul", ["xs", "u"], ["y"]),  # [3] * the scanned scalar
    ], "body", [vi("s", [], I64), vi("u", [])], [vi("s_out", [], I64), vi("y", [3])])
    nodes = [helper.make_node("Scan", ["s0", "us"], ["s_last", "ys"], body=body, num_scan_inputs=1, name="the_scan")]
    m = model(nodes, [vi("s0", [], I64), vi("us", [L])], [vi("s_last", [], I64), vi("ys", [L, 3])], [numpy_helper.from_array(x, "x")])
    us = np.array([1, -2, 0.5, 3], np.float32)
    s, ys = 1, []
    for t in range(L):
        ys.append(x[s:s + 3] * us[t])
        s += 2
    return m, [({"s0": np.array(1, np.int64), "us": us}, {"s_last": np.array(s, np.int64), "ys": np.array(ys, np.float32)})]


def loop_nonzero():
    M = 6
    rs = np.random.RandomState(3)
    a = rs.randn(M, 7).astype(np.float32)  # a capture: a graph input of 42 elements, data
    body = helper.make_graph([
        const("zf", np.float32(0)),
        helper.make_node("Gather", ["a", "i"], ["row"], axis=0),
        helper.make_node("Greater", ["row", "zf"], ["pos"]),
        helper.make_node("NonZero", ["pos"], ["nz"]),
        helper.make_node("Squeeze", ["nz"], ["idx"], axes=[0]),  # (opset 11: axes an attribute)
        helper.make_node("Gather", ["row", "idx"], ["vals"], axis=0),
        helper.make_node("ReduceSum", ["vals"], ["s"], keepdims=0),
        helper.make_node("Add", ["acc", "s"], ["acc_out"]),
        helper.make_node("Identity", ["cond"], ["cond_out"]),
    ], "body", [vi("i", [], I64), vi("cond", [], B), vi("acc", [])],
        [vi("cond_out", [], B), vi("acc_out", []), vi("s", [])])
    nodes = [helper.make_node("Mul", ["a_in", "one"], ["a"]),  # computed: not bound by value
             helper.make_node("Loop", ["M", "", "acc0"], ["total", "per_row"], body=body, name="the_loop")]
    m = model(nodes, [vi("M", [], I64), vi("a_in", [M, 7]), vi("acc0", [])], [vi("total", []), vi("per_row", [M])],
              [numpy_helper.from_array(np.float32(1), "one")], opset=11)
    per = np.array([r[r > 0].sum() for r in a], np.float32)
    return m, [({"M": np.array(M, np.int64), "a_in": a, "acc0": np.array(0, np.float32)},
                {"total": np.array(per.sum(), np.float32), "per_row": per})]


def loop_grow(scan_output=False):
    """A body whose Resize size is gathered from a captured data tensor (as Keypoint R-CNN's
    heatmap loop): imported when it runs; its carried `rows` grows by one row per iteration, so
    the graph after the loop is made for the observed shape. With a scan output: refused."""
    img = np.array([[1, 2], [3, 4]], np.float32).reshape(1, 1, 2, 2)
    outs = [vi("cond_out", [], B), vi("rows_out", ["r", 2])] + ([vi("s", [])] if scan_output else [])
    body = helper.make_graph([
        const("ax0", np.array([0], np.int64)), const("c11", np.array([1, 1], np.int64)), const("one", np.int64(1)),
        helper.make_node("Gather", ["hs", "i"], ["hf"], axis=0),
        helper.make_node("Ceil", ["hf"], ["hc"]),
        helper.make_node("Cast", ["hc"], ["h"], to=I64),
        helper.make_node("Add", ["h", "one"], ["w"]),
        helper.make_node("Unsqueeze", ["h", "ax0"], ["h1"]),
        helper.make_node("Unsqueeze", ["w", "ax0"], ["w1"]),
        helper.make_node("Concat", ["c11", "h1", "w1"], ["sizes"], axis=0),
        helper.make_node("Resize", ["img", "", "", "sizes"], ["r"], mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        helper.make_node("ReduceSum", ["r"], ["s"], keepdims=0),
        helper.make_node("Cast", ["h"], ["hf2"], to=F),
        helper.make_node("Unsqueeze", ["s", "ax0"], ["s1"]),
        helper.make_node("Unsqueeze", ["hf2", "ax0"], ["hh1"]),
        helper.make_node("Concat", ["s1", "hh1"], ["row"], axis=0),
        helper.make_node("Unsqueeze", ["row", "ax0"], ["row1"]),
        helper.make_node("Concat", ["rows", "row1"], ["rows_out"], axis=0),  # [i + 1, 2]
        helper.make_node("Identity", ["cond"], ["cond_out"]),
    ], "body", [vi("i", [], I64), vi("cond", [], B), vi("rows", ["r", 2])], outs,
        [numpy_helper.from_array(img, "img")])
    K = 5
    nodes = [helper.make_node("Mul", ["hs_in", "half"], ["hs"]),  # computed from the data: not known when the model is specialised
             helper.make_node("Loop", ["M", "", "rows0"], ["rows_all"] + (["per"] if scan_output else []), body=body, name="loop_grow"),
             helper.make_node("ReduceSum", ["rows_all", "axo"], ["colsum"], keepdims=0)]
    # (hs_in has over 64 elements: not bound by value)
    m = model(nodes, [vi("M", [], I64), vi("hs_in", [100])], [vi("rows_all", [K, 2]), vi("colsum", [2])] + ([vi("per", [K])] if scan_output else []),
              [numpy_helper.from_array(np.float32(0.5), "half"), numpy_helper.from_array(np.zeros((0, 2), np.float32), "rows0"),
               numpy_helper.from_array(np.array([0], np.int64), "axo")])
    cases = []
    for hs_in in (np.array([2.5, 6, 1, 9.2, 4], np.float32), np.array([3, 3, 7.5, 1, 2], np.float32)):
        rows = []
        for i in range(K):
            h = int(np.ceil(hs_in[i] * 0.5))
            rows.append([resize_nearest(img[0, 0], h, h + 1).sum(), h])
        rows = np.array(rows, np.float32)
        hs_full = np.ones(100, np.float32)
        hs_full[:K] = hs_in
        cases.append(({"M": np.array(K, np.int64), "hs_in": hs_full}, {"rows_all": rows, "colsum": rows.sum(0)}))
    return m, cases


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--out", default=None)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--modes", default="eager,lazy,compiled")
    a = ap.parse_args()
    rlx = os.path.abspath(a.rlx)
    out = a.out or os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(rlx))), "onnx-body-shapes")
    os.makedirs(out, exist_ok=True)
    modes = a.modes.split(",")
    fails, runs = [], 0
    for name, (m, cases) in {"loop_sizes": loop_sizes(), "scan_state_slice": scan_state_slice(),
                             "loop_nonzero": loop_nonzero(), "loop_grow": loop_grow()}.items():
        p = os.path.join(out, name + ".onnx")
        with open(p, "wb") as f:
            f.write(m.SerializeToString())
        for k, (ins, exps) in enumerate(cases):
            args = case_args(out, f"{name}.{k}", ins, exps)
            for mode in modes:
                r = subprocess.run([rlx, "run", p, "-b", a.backend, "-m", mode] + args, capture_output=True, text=True, timeout=300)
                runs += 1
                if r.returncode != 0:
                    fails.append(f"{name} case {k} {a.backend}/{mode}: exit {r.returncode}: {r.stderr.strip()[-600:]}")
                # the cache: the first of 3 runs plans each value the body reads, the repeats reuse them
                r = subprocess.run([rlx, "run", p, "-b", a.backend, "-m", mode, "--repeat", "3", "--json"] + args,
                                   capture_output=True, text=True, timeout=300)
                runs += 1
                try:
                    d = json.loads(r.stdout)["data_dependent_sizes"]
                except (ValueError, KeyError) as e:
                    fails.append(f"{name} cache {mode}: no data_dependent_sizes in --json ({e}): {r.stderr.strip()[-300:]}")
                    continue
                if not (r.returncode == 0 and d["planned"] == 0 and d["reused"] > 0 and d["planned_total"] > 0):
                    fails.append(f"{name} cache {mode}: expected the last of 3 runs to plan nothing and reuse; got {d}")
    # rlx convert refuses a body made again per value (a graph file holds one body)
    conv = subprocess.run([rlx, "convert", os.path.join(out, "loop_sizes.onnx"), "-o", os.path.join(out, "loop_sizes.json"),
                           "--params-out", os.path.join(out, "loop_sizes.safetensors"), "-i",
                           f"M=@{os.path.join(out, 'loop_sizes.0.in.M.npy')}", "-i", f"acc0=@{os.path.join(out, 'loop_sizes.0.in.acc0.npy')}"],
                          capture_output=True, text=True, timeout=300)
    runs += 1
    if conv.returncode != 2 or "the_loop" not in conv.stderr or "rlx convert cannot write it" not in conv.stderr:
        fails.append(f"convert: expected exit 2 naming the_loop; got {conv.returncode}: {conv.stderr.strip()[-400:]}")
    # still refused: such a body (its values known only when it runs) with a scan output, whose
    # shape the graph after the loop would need before it runs (docs/onnx.md, Limits)
    p = os.path.join(out, "loop_grow_scan.onnx")
    with open(p, "wb") as f:
        f.write(loop_grow(scan_output=True)[0].SerializeToString())
    ins, _ = loop_grow()[1][0]
    args = case_args(out, "loop_grow_scan", ins, {})
    r = subprocess.run([rlx, "run", p, "-b", a.backend] + args, capture_output=True, text=True, timeout=300)
    runs += 1
    if r.returncode != 2 or "Resize" not in r.stderr or "sizes" not in r.stderr:
        fails.append(f"loop_grow_scan: expected exit 2 naming the Resize; got {r.returncode}: {r.stderr.strip()[-400:]}")
    # an operator rlx lacks inside such a body is refused when the model is loaded, not deferred
    m, cases = loop_grow()
    m.graph.node[1].attribute[0].g.node.insert(0, helper.make_node("NoSuchOp", ["i"], ["unused"]))
    p = os.path.join(out, "loop_unknown_op.onnx")
    with open(p, "wb") as f:
        f.write(m.SerializeToString())
    r = subprocess.run([rlx, "inspect", p], capture_output=True, text=True, timeout=300)
    runs += 1
    if r.returncode != 2 or "NoSuchOp" not in r.stderr:
        fails.append(f"loop_unknown_op: expected rlx inspect to exit 2 naming NoSuchOp; got {r.returncode}: {r.stderr.strip()[-400:]}")
    return finish(f"onnx body shapes ({a.backend})", runs, fails)


if __name__ == "__main__":
    sys.exit(main())
