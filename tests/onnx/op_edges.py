#!/usr/bin/python3
"""The operator forms issue 20 added, at the edges ONNX's node tests leave out: MaxPool's Indices
output (several images and channels, asymmetric pads, dilations, ceil_mode, storage_order 1,
1-D), GridSample in every mode x padding x align_corners, Einsum diagonals, Resize's
tf_crop_and_resize with an roi reaching outside the image and extrapolation_value (linear,
nearest, cubic), opset 8's Scan with a batch of 2 and a reversed input, and a Slice whose start
is a loop's iteration number; and their refusals (exit 2 naming the node, or exit 3 at run
time). Each case runs through `rlx run` in every mode on the CPU and, where `rlx devices` lists a
Vulkan device, compiled on Vulkan.

Expected values: PyTorch (max_pool1d/2d with return_indices, grid_sample), NumPy (einsum, the
scan and loop written out) and ONNX 1.12's own NumPy reference for Resize
(onnx.backend.test.case.node.resize.interpolate_nd), never rlx's output.

  tests/onnx/op_edges.py --rlx build/apps/rlx/rlx [--out DIR]
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_build as ob  # noqa: E402

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def onnx_indices(idx_padded, wp, pt, pl, h, w, col_major):
    """Torch's index into a padded [Hp, Wp] plane (per image and channel) as ONNX's flat index into
    the unpadded [N, C, H, W] input."""
    n, c = idx_padded.shape[:2]
    hp, wpos = idx_padded // wp - pt, idx_padded % wp - pl
    plane = (np.arange(n * c).reshape(n, c, 1, 1) * h * w)
    return (plane + (wpos * h + hp if col_major else hp * w + wpos)).astype(np.int64)


def maxpool_cases(rng):
    out = []
    x = rng.standard_normal((2, 3, 7, 8)).astype(np.float32)
    # asymmetric pads [top, left, bottom, right] and dilations: torch on the input padded with -inf
    k, s, d, p = [3, 2], [2, 3], [2, 1], [1, 0, 2, 1]
    xp = F.pad(torch.from_numpy(x), (p[1], p[3], p[0], p[2]), value=-math.inf)
    y, idx = F.max_pool2d(xp, k, s, dilation=d, return_indices=True)
    for order in (0, 1):
        z = onnx_indices(idx.numpy(), xp.shape[3], p[0], p[1], 7, 8, order == 1)
        node = helper.make_node("MaxPool", ["x"], ["y", "z"], kernel_shape=k, strides=s, dilations=d, pads=p, storage_order=order)
        out.append((f"maxpool_indices_pads_dilations_order{order}", node, {"x": x}, {"y": y.numpy(), "z": z}, 13))
    # ceil_mode with symmetric pads (torch pads with -inf itself; its indices are into the input)
    y, idx = F.max_pool2d(torch.from_numpy(x), [3, 3], [2, 2], padding=1, ceil_mode=True, return_indices=True)
    z = onnx_indices(idx.numpy(), 8, 0, 0, 7, 8, False)
    node = helper.make_node("MaxPool", ["x"], ["y", "z"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
    out.append(("maxpool_indices_ceil_mode", node, {"x": x}, {"y": y.numpy(), "z": z}, 13))
    # uint8 with many ties (values 0..3): the first maximum in the window's row-major order wins, as
    # in torch's loop (run on the same numbers as f32); pads so that padding never wins over a 0
    xu = rng.integers(0, 4, (1, 2, 6, 5)).astype(np.uint8)
    y, idx = F.max_pool2d(torch.from_numpy(xu.astype(np.float32)), [3, 3], [2, 2], padding=1, return_indices=True)
    z = onnx_indices(idx.numpy(), 5, 0, 0, 6, 5, False)
    node = helper.make_node("MaxPool", ["x"], ["y", "z"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    out.append(("maxpool_indices_uint8_ties", node, {"x": xu}, {"y": y.numpy().astype(np.uint8), "z": z}, 12))
    # 1-D: (n * C + c) * W + w
    x1 = rng.standard_normal((2, 3, 9)).astype(np.float32)
    y, idx = F.max_pool1d(torch.from_numpy(x1), 3, 2, padding=1, return_indices=True)
    z = (idx.numpy() + np.arange(6).reshape(2, 3, 1) * 9).astype(np.int64)
    node = helper.make_node("MaxPool", ["x"], ["y", "z"], kernel_shape=[3], strides=[2], pads=[1, 1])
    out.append(("maxpool_indices_1d", node, {"x": x1}, {"y": y.numpy(), "z": z}, 13))
    return out


def gridsample_cases(rng):
    out = []
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    grid = rng.uniform(-1.7, 1.7, (2, 4, 7, 2)).astype(np.float32)
    for mode in ("nearest", "bilinear", "bicubic"):
        for pad in ("zeros", "border", "reflection"):
            for ac in (0, 1):
                y = F.grid_sample(torch.from_numpy(x), torch.from_numpy(grid), mode=mode, padding_mode=pad, align_corners=bool(ac))
                node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=pad, align_corners=ac)
                out.append((f"gridsample_{mode}_{pad}_ac{ac}", node, {"x": x, "grid": grid}, {"y": y.numpy()}, 16))
    return out


def einsum_cases(rng):
    out = []
    for name, eq, shapes in (("diag", "ii->i", [(4, 4)]), ("trace", "ii", [(5, 5)]), ("batch_diag", "bii->bi", [(3, 4, 4)]),
                             ("diag_then_product", "bii,bij->bj", [(2, 3, 3), (2, 3, 5)]), ("diag_moved", "iij->ji", [(3, 3, 2)]),
                             ("triple", "iii->i", [(3, 3, 3)]), ("ellipsis_diag", "...ii->...i", [(2, 3, 4, 4)])):
        ins = {f"x{k}": rng.standard_normal(s).astype(np.float32) for k, s in enumerate(shapes)}
        y = np.einsum(eq, *ins.values()).astype(np.float32)
        out.append((f"einsum_{name}", helper.make_node("Einsum", list(ins), ["y"], equation=eq), ins, {"y": y}, 12))
    return out


def resize_cases(rng):
    from onnx.backend.test.case.node.resize import cubic_coeffs, interpolate_nd, linear_coeffs, nearest_coeffs
    out = []
    x = rng.standard_normal((1, 2, 4, 5)).astype(np.float32)
    roi = np.array([0, 0, -0.2, 0.3, 1, 1, 0.9, 1.3], np.float32)  # reaches outside the image on both spatial axes
    sizes = np.array([1, 2, 5, 4], np.int64)
    for mode, coeffs in (("linear", linear_coeffs), ("nearest", nearest_coeffs), ("cubic", cubic_coeffs)):
        y = interpolate_nd(x, coeffs, output_size=sizes, roi=roi, coordinate_transformation_mode="tf_crop_and_resize",
                           extrapolation_value=10.0).astype(np.float32)
        node = helper.make_node("Resize", ["x", "roi", "", "sizes"], ["y"], mode=mode, coordinate_transformation_mode="tf_crop_and_resize",
                                extrapolation_value=10.0)
        out.append((f"resize_tf_crop_{mode}", node, {"x": x}, {"y": y}, 13, {"roi": roi, "sizes": sizes}))
    # rank 3, the roi cropping only the last axis, scales instead of sizes, default extrapolation 0
    x3 = rng.standard_normal((2, 3, 6)).astype(np.float32)
    roi3 = np.array([0, 0, 0.25, 1, 1, 0.75], np.float32)
    scales = np.array([1, 1, 1.5], np.float32)
    y = interpolate_nd(x3, linear_coeffs, scale_factors=scales, roi=roi3, coordinate_transformation_mode="tf_crop_and_resize").astype(np.float32)
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="linear", coordinate_transformation_mode="tf_crop_and_resize")
    out.append(("resize_tf_crop_rank3_scales", node, {"x": x3}, {"y": y}, 13, {"roi": roi3, "scales": scales}))
    return out


def scan8_body():
    add = helper.make_node("Add", ["s_in", "x_t"], ["s_out"])
    dbl = helper.make_node("Mul", ["s_out", "two"], ["y_t"])
    two = helper.make_node("Constant", [], ["two"], value=helper.make_tensor("two", F32, [], [2.0]))
    return helper.make_graph([two, add, dbl], "body", [ob.vi("s_in", [2]), ob.vi("x_t", [2])], [ob.vi("s_out", [2]), ob.vi("y_t", [2])])


def scan8_cases(rng):
    s0 = rng.standard_normal((2, 2)).astype(np.float32)
    x = rng.standard_normal((2, 4, 2)).astype(np.float32)
    fin, ys = np.zeros_like(s0), np.zeros((2, 4, 2), np.float32)
    for b in range(2):  # directions [1]: the scan input read back to front, the outputs stacked in step order
        s = s0[b].copy()
        for t, xt in enumerate(x[b][::-1]):
            s = s + xt
            ys[b, t] = s * 2
        fin[b] = s
    node = helper.make_node("Scan", ["", "s0", "x"], ["s", "ys"], body=scan8_body(), num_scan_inputs=1, directions=[1])
    full = helper.make_node("Scan", ["lens", "s0", "x"], ["s", "ys"], body=scan8_body(), num_scan_inputs=1, directions=[1])
    return [("scan8_batch2_reversed", node, {"s0": s0, "x": x}, {"s": fin, "ys": ys}, 8),
            ("scan8_full_sequence_lens", full, {"s0": s0, "x": x}, {"s": fin, "ys": ys}, 8, {"lens": np.array([4, 4], np.int32)})]


def loop_slice_model(trips, lo=1):
    """acc += sum(x[i + lo : i + lo + 2]) for i < trips, the Slice's start computed in the body."""
    nodes = [helper.make_node("Constant", [], ["ax"], value=helper.make_tensor("ax", I64, [1], [0])),
             helper.make_node("Constant", [], ["one"], value=helper.make_tensor("one", I64, [], [lo])),
             helper.make_node("Constant", [], ["three"], value=helper.make_tensor("three", I64, [], [lo + 2])),
             helper.make_node("Identity", ["c_in"], ["c_out"]),
             helper.make_node("Add", ["i", "one"], ["b"]),
             helper.make_node("Add", ["i", "three"], ["e"]),
             helper.make_node("Unsqueeze", ["b", "ax"], ["starts"]),
             helper.make_node("Unsqueeze", ["e", "ax"], ["ends"]),
             helper.make_node("Slice", ["x", "starts", "ends", "ax"], ["part"]),
             helper.make_node("ReduceSum", ["part", "ax"], ["ps"], keepdims=0),
             helper.make_node("Add", ["acc_in", "ps"], ["acc_out"])]
    body = helper.make_graph(nodes, "body", [ob.vi("i", [], I64), ob.vi("c_in", [], TensorProto.BOOL), ob.vi("acc_in", [])],
                             [ob.vi("c_out", [], TensorProto.BOOL), ob.vi("acc_out", [])])
    loop = helper.make_node("Loop", ["M", "", "acc0"], ["acc"], body=body)
    return loop, {"M": np.array(trips, np.int64)}


def loop_cases(rng):
    x = rng.standard_normal(6).astype(np.float32)
    acc0 = np.array(0.5, np.float32)
    want = acc0 + sum(x[i + 1:i + 3].sum() for i in range(4))
    loop, inits = loop_slice_model(4)
    return [("loop_slice_runtime_start", loop, {"x": x, "acc0": acc0}, {"acc": np.array(want, np.float32)}, 13, inits)]


def refusals(rng):
    """(name, node, inputs, initializers, opset, exit code, words the message must hold)."""
    x = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    x3 = rng.standard_normal((1, 1, 3, 3, 3)).astype(np.float32)
    loop, inits = loop_slice_model(5)  # i = 4 reads x[5:7]: past the end of the 6 values
    loop_neg, inits_neg = loop_slice_model(2, lo=-1)
    s0 = np.zeros((2, 2), np.float32)
    xs = np.zeros((2, 4, 2), np.float32)
    return [
        ("maxpool_storage_order_2", helper.make_node("MaxPool", ["x"], ["y", "z"], kernel_shape=[2, 2], storage_order=2, name="mp"),
         {"x": x}, {}, 13, 2, ["'mp'", "storage_order"]),
        ("maxpool_indices_3d", helper.make_node("MaxPool", ["x"], ["y", "z"], kernel_shape=[2, 2, 2], name="mp3"),
         {"x": x3}, {}, 13, 2, ["'mp3'", "Indices", "3-D"]),
        ("einsum_diag_not_square", helper.make_node("Einsum", ["a"], ["y"], equation="ii->i", name="es"),
         {"a": np.zeros((3, 4), np.float32)}, {}, 12, 2, ["'es'", "index 'i' has sizes 3 and 4"]),
        ("resize_tf_crop_roi_length", helper.make_node("Resize", ["x", "roi", "", "sizes"], ["y"], name="rz", mode="linear",
                                                       coordinate_transformation_mode="tf_crop_and_resize"),
         {"x": x}, {"roi": np.array([0, 0, 1, 1], np.float32), "sizes": np.array([1, 1, 2, 2], np.int64)}, 13, 2, ["'rz'", "roi has 4 entries"]),
        ("resize_tf_crop_no_roi", helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="rz2", mode="linear",
                                                   coordinate_transformation_mode="tf_crop_and_resize"),
         {"x": x}, {"sizes": np.array([1, 1, 2, 2], np.int64)}, 13, 2, ["'rz2'", "roi"]),
        ("scan8_short_sequence", helper.make_node("Scan", ["lens", "s0", "x"], ["s", "ys"], body=scan8_body(), num_scan_inputs=1, name="sc"),
         {"s0": s0, "x": xs}, {"lens": np.array([4, 3], np.int32)}, 8, 2, ["'sc'", "sequence_lens 3"]),
        ("loop_slice_past_the_end", loop, {"x": np.zeros(6, np.float32), "acc0": np.array(0, np.float32)}, inits, 13, 3,
         ["index 6", "outside"]),
        # x[i - 1 : i + 1]: at i = 0 ONNX would count the start from the end (a shorter slice); refused at run time
        ("loop_slice_negative_start", loop_neg, {"x": np.zeros(6, np.float32), "acc0": np.array(0, np.float32)}, inits_neg, 13, 3,
         ["index 6", "outside"]),
    ]


def vi_for(name, v):
    et = {np.dtype(np.float32): F32, np.dtype(np.int64): I64, np.dtype(np.int32): TensorProto.INT32, np.dtype(np.uint8): TensorProto.UINT8}[v.dtype]
    return ob.vi(name, list(v.shape), et)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="rlx-op-edges-")
    os.makedirs(out, exist_ok=True)
    devices = subprocess.run([a.rlx, "devices"], capture_output=True, text=True).stdout
    runs_on = [("cpu", m) for m in ("eager", "lazy", "compiled")] + ([("vulkan", "compiled")] if "vulkan device 0" in devices else [])
    rng = np.random.default_rng(20)
    fails, runs = [], 0
    cases = maxpool_cases(rng) + gridsample_cases(rng) + einsum_cases(rng) + resize_cases(rng) + scan8_cases(rng) + loop_cases(rng)
    for case in cases:
        name, node, ins, exps, opset = case[:5]
        inits = case[5] if len(case) > 5 else {}
        m = ob.model([node], [vi_for(n, v) for n, v in ins.items()], [ob.vi(n, None, vi_for(n, v).type.tensor_type.elem_type) for n, v in exps.items()],
                     [ob.init(n, v) for n, v in inits.items()], opset=opset)
        path = os.path.join(out, name + ".onnx")
        with open(path, "wb") as f:
            f.write(m.SerializeToString())
        args = ob.case_args(out, name, ins, exps)
        for be, mode in runs_on:
            r = subprocess.run([a.rlx, "run", path, "-b", be, "-m", mode, "--atol", "1e-4", "--rtol", "1e-4"] + args,
                               capture_output=True, text=True, timeout=120)
            runs += 1
            if r.returncode != 0:
                fails.append(f"{name} {be} {mode}: exit {r.returncode}: {r.stderr.strip()[-400:]}")
    for name, node, ins, inits, opset, code, words in refusals(rng):
        outs = [ob.vi(o, None) for o in node.output]
        if node.op_type == "Loop":
            outs = [ob.vi("acc", None)]
        m = ob.model([node], [vi_for(n, v) for n, v in ins.items()], outs, [ob.init(n, v) for n, v in inits.items()], opset=opset)
        path = os.path.join(out, name + ".onnx")
        with open(path, "wb") as f:
            f.write(m.SerializeToString())
        args = ob.case_args(out, name, ins, {})
        r = subprocess.run([a.rlx, "run", path, "-m", "lazy"] + args, capture_output=True, text=True, timeout=120)
        runs += 1
        missing = [w for w in words if w not in r.stderr]
        if r.returncode != code or missing or "Traceback" in r.stderr:
            fails.append(f"{name}: exit {r.returncode} (expected {code}), missing {missing} in: {r.stderr.strip()[-400:]}")
    return ob.finish(f"issue 20 operator edges ({', '.join(sorted({b for b, _ in runs_on}))})", runs, fails)


if __name__ == "__main__":
    sys.exit(main())
