#!/usr/bin/python3
"""Data-dependent output shapes (NonZero, Compress, Unique, NonMaxSuppression, TopK with a
run-time k) through `rlx run`, against independent references (docs/onnx.md).

Hand-written models (onnx.helper) whose data-dependent sizes are known only at run time (inputs
of more than 64 elements, so none is bound by value), each followed by ordinary nodes planned for
the size produced, checked against the same computation in NumPy, written here:
  * topk_runtime_k: k = the number of elements above a threshold (a reduction), TopK(x, k), then
    arithmetic on the values; inputs where k is 0, some, and all.
  * nonzero_gather: NonZero of a mask, the selected values gathered and scaled, then Unique of
    integer labels (all four outputs) and Compress along an axis: three host steps in a row.
  * nms_tail: NonMaxSuppression (center-point boxes, every optional input) whose selected
    indices gather the kept boxes and their scores, as a detector's last stage does.
  * empty: a mask with no element set (size 0) flowing into the rest of the graph.
  * topk_large_k: TopK of 1000 of 2700 scores and a Gather of them (a detector's RPN).
  * detector_pieces: a ScatterElements of 200 pooled boxes into 300 rows (a host step), a Concat of
    70 inputs, a Concat of empty inputs ([0, 4]), a ConstantOfShape too large to fold.
A torchvision.ops.roi_align export (RoiAlign: a host step of a fixed shape) against PyTorch.
And a torchvision-style detector head exported by PyTorch (a conv backbone, sigmoid scores,
torch.nonzero for the boxes above a threshold, torchvision.ops.nms, a topk whose k is min(4, the number that
survive), exported as Shape/Gather/Min: rlx folds it once the size is known), checked against PyTorch's own forward pass and, with --ort, ONNX Runtime.

Every case runs in eager, lazy and compiled mode on the chosen backend. The plan cache is
checked by its counter: `rlx run --repeat 3 --json` reports data_dependent_sizes; the repeated
runs plan nothing (planned 0, reused > 0) and the process planned each size once; and with
--steps/--feed making the size alternate between two values, 2 are planned in all.

  tests/onnx/dynamic_shapes.py --rlx build/apps/rlx/rlx [--out DIR] [--backend cpu|vulkan] [--modes ...] [--ort NODE_MODULES_DIR]
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

import onnx_build  # noqa: E402
from onnx import TensorProto, helper

from onnx_build import case_args, init, model, vi  # noqa: E402

ATOL, RTOL = 1e-5, 1e-5
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
HERE = os.path.dirname(os.path.abspath(__file__))




# ---------- references (plain NumPy) ----------

def topk_ref(x, k):
    order = sorted(range(len(x)), key=lambda i: (-x[i], i))[:k]  # largest first, ties: lower index
    return x[order], np.array(order, np.int64)


def nms_ref(boxes, scores, max_out, iou_t, score_t, center):
    sel = []
    for b in range(boxes.shape[0]):
        bx = boxes[b].astype(np.float64)
        if center:
            xc, yc, w, h = bx[:, 0], bx[:, 1], bx[:, 2], bx[:, 3]
            cor = np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], 1)
        else:
            cor = np.stack([np.minimum(bx[:, 0], bx[:, 2]), np.minimum(bx[:, 1], bx[:, 3]),
                            np.maximum(bx[:, 0], bx[:, 2]), np.maximum(bx[:, 1], bx[:, 3])], 1)

        def iou(i, j):
            a, c = cor[i], cor[j]
            ih = min(a[2], c[2]) - max(a[0], c[0])
            iw = min(a[3], c[3]) - max(a[1], c[1])
            if ih <= 0 or iw <= 0:
                return 0.0
            inter = ih * iw
            return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (c[2] - c[0]) * (c[3] - c[1]) - inter)
        for c in range(scores.shape[1]):
            s = scores[b, c].astype(np.float64)
            cand = sorted([i for i in range(len(s)) if s[i] > score_t], key=lambda i: (-s[i], i))
            kept = []
            for i in cand:
                if len(kept) >= max_out:
                    break
                if all(iou(k, i) <= iou_t for k in kept):
                    kept.append(i)
            sel += [[b, c, i] for i in kept]
    return np.array(sel, np.int64).reshape(-1, 3)


# ---------- models ----------

def topk_runtime_k():
    nodes = [
        helper.make_node("Greater", ["x", "t"], ["m"]),
        helper.make_node("Cast", ["m"], ["mf"], to=F),
        helper.make_node("ReduceSum", ["mf"], ["cnt"], keepdims=1),  # [1]
        helper.make_node("Cast", ["cnt"], ["k"], to=I64),
        helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=0),
        helper.make_node("Mul", ["v", "two"], ["v2"]),
        helper.make_node("Add", ["i", "one"], ["i1"]),
    ]
    m = model(nodes, [vi("x", [100])], [vi("v2", None), vi("i1", None, I64)],
              [init("t", np.float32(0.5)), init("two", np.float32(2)), init("one", np.int64(1))])
    rs = np.random.RandomState(1)
    cases = []
    for x in [rs.rand(100).astype(np.float32) - 0.7, rs.rand(100).astype(np.float32), rs.rand(100).astype(np.float32) + 1]:
        x[3] = x[7]  # a tie
        k = int((x > 0.5).sum())
        v, i = topk_ref(x, k)
        cases.append(({"x": x}, {"v2": v * 2, "i1": i + 1}))
    return m, cases


def nonzero_gather():
    nodes = [
        helper.make_node("Greater", ["x", "t"], ["m"]),
        helper.make_node("NonZero", ["m"], ["nz"]),                    # [2, n]
        helper.make_node("Transpose", ["nz"], ["nzt"], perm=[1, 0]),   # [n, 2]
        helper.make_node("GatherND", ["x", "nzt"], ["sel"]),           # [n]
        helper.make_node("Mul", ["sel", "two"], ["y"]),
        helper.make_node("Unique", ["labels"], ["u", "ui", "uinv", "ucnt"], sorted=0),
        helper.make_node("Greater", ["rowsum", "zero"], ["rm"]),
        helper.make_node("Compress", ["x", "rm"], ["rows"], axis=0),
        helper.make_node("ReduceSum", ["rows", "ax1"], ["rs"], keepdims=0),
        helper.make_node("ReduceSum", ["x", "ax1"], ["rowsum"], keepdims=0),
    ]
    # (the ONNX graph must be topologically sorted: rowsum before its use)
    nodes = nodes[:6] + [nodes[9], nodes[6], nodes[7], nodes[8]]
    m = model(nodes, [vi("x", [12, 10]), vi("labels", [80], I64)],
              [vi("nz", None, I64), vi("y", None), vi("u", None, I64), vi("ui", None, I64), vi("uinv", None, I64), vi("ucnt", None, I64),
               vi("rs", None)],
              [init("t", np.float32(0.8)), init("two", np.float32(2)), init("zero", np.float32(0)), init("ax1", np.array([1], np.int64))])
    rs = np.random.RandomState(2)
    cases = []
    for scale in [1.0, 0.9]:
        x = (rs.rand(12, 10).astype(np.float32) - 0.45) * scale
        labels = rs.randint(0, 9 if scale == 1 else 30, size=80).astype(np.int64)
        nz = np.array(np.nonzero(x > 0.8), np.int64).reshape(2, -1)
        u, ui, uinv, ucnt = np.unique(labels, return_index=True, return_inverse=True, return_counts=True)
        order = np.argsort(ui, kind="stable")  # ONNX's sorted=0: order of first occurrence
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        rows = x[x.sum(1) > 0]
        cases.append(({"x": x, "labels": labels},
                      {"nz": nz, "y": x[x > 0.8] * 2, "u": u[order], "ui": ui[order], "uinv": rank[uinv], "ucnt": ucnt[order],
                       "rs": rows.sum(1)}))
    return m, cases


def nms_tail():
    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_t"], ["sel"], center_point_box=1),
        helper.make_node("Gather", ["sel", "two_i"], ["bi"], axis=1),  # the box column [n]
        helper.make_node("Squeeze", ["boxes", "zero_i"], ["b0"]),      # [N, 4]
        helper.make_node("Gather", ["b0", "bi"], ["kept"], axis=0),
        helper.make_node("Gather", ["sel", "one_i"], ["ci"], axis=1),  # the class column
    ]
    m = model(nodes, [vi("boxes", [1, 40, 4]), vi("scores", [1, 2, 40])],
              [vi("sel", None, I64), vi("kept", None), vi("ci", None, I64)],
              [init("max_out", np.array([5], np.int64)), init("iou", np.array([0.3], np.float32)),
               init("score_t", np.array([0.2], np.float32)), init("two_i", np.int64(2)), init("one_i", np.int64(1)),
               init("zero_i", np.array([0], np.int64))])
    rs = np.random.RandomState(3)
    cases = []
    for n_clusters in [3, 8]:
        centers = rs.rand(n_clusters, 2) * 10
        c = centers[rs.randint(0, n_clusters, 40)] + rs.randn(40, 2) * 0.3
        wh = 1 + rs.rand(40, 2)
        boxes = np.concatenate([c, wh], 1)[None].astype(np.float32)
        scores = rs.rand(1, 2, 40).astype(np.float32)
        sel = nms_ref(boxes, scores, 5, 0.3, 0.2, True)
        cases.append(({"boxes": boxes, "scores": scores}, {"sel": sel, "kept": boxes[0][sel[:, 2]], "ci": sel[:, 1]}))
    return m, cases


def empty():
    nodes = [
        helper.make_node("Greater", ["x", "t"], ["m"]),
        helper.make_node("NonZero", ["m"], ["nz"]),
        helper.make_node("Cast", ["nz"], ["nzf"], to=F),
        helper.make_node("ReduceSum", ["nzf"], ["s"], keepdims=0),
        helper.make_node("Add", ["s", "one"], ["y"]),
    ]
    m = model(nodes, [vi("x", [100])], [vi("nz", None, I64), vi("y", None)], [init("t", np.float32(5)), init("one", np.float32(1))])
    x = np.linspace(-1, 1, 100).astype(np.float32)
    return m, [({"x": x}, {"nz": np.zeros((1, 0), np.int64), "y": np.array(1, np.float32)}),
               ({"x": x * 10}, {"nz": np.array([np.nonzero(x * 10 > 5)[0]], np.int64),
                                "y": np.array(np.nonzero(x * 10 > 5)[0].sum() + 1, np.float32)})]


def detector_pieces():
    """What torchvision's detectors add: MultiScaleRoIAlign's ScatterElements of K pooled boxes
    into N rows (a host step: matching every row against every index would take K x N x C*7*7
    entries), a Concat of 70 inputs (SSD's heads), a Concat whose inputs are all empty (no box
    survives: [0, 1] x 4 -> [0, 4]) and a ConstantOfShape too large to fold (zeros of the
    pooled size, broadcast at run time). Expected values from NumPy."""
    N, K, C = 300, 200, 128
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["zeros"], value=helper.make_tensor("v", F, [1], [0.0])),
        helper.make_node("Reshape", ["idx", "col"], ["idx1"]),
        helper.make_node("Expand", ["idx1", "ushape"], ["idx4"]),
        helper.make_node("ScatterElements", ["zeros", "idx4", "upd"], ["pooled"], axis=0),
        helper.make_node("Concat", [f"p{j}" for j in range(70)], ["heads"], axis=1),
        helper.make_node("Concat", ["e0", "e1", "e2", "e3"], ["none"], axis=1),
    ]
    inits = [init("shape", np.array([N, C, 7, 7], np.int64)), init("col", np.array([K, 1, 1, 1], np.int64)),
             init("ushape", np.array([K, C, 7, 7], np.int64))]
    ins = [vi("idx", [K], I64), vi("upd", [K, C, 7, 7])] + [vi(f"p{j}", [2, 3]) for j in range(70)] + \
        [vi(f"e{j}", ["n", 1]) for j in range(4)]
    m = model(nodes, ins, [vi("pooled", None), vi("heads", None), vi("none", None)], inits)
    rng = np.random.default_rng(3)
    idx = rng.permutation(N)[:K].astype(np.int64)
    upd = rng.standard_normal((K, C, 7, 7)).astype(np.float32)
    parts = {f"p{j}": rng.standard_normal((2, 3)).astype(np.float32) for j in range(70)}
    pooled = np.zeros((N, C, 7, 7), np.float32)
    pooled[idx] = upd
    x = {"idx": idx, "upd": upd, **parts, **{f"e{j}": np.zeros((0, 1), np.float32) for j in range(4)}}
    return m, [(x, {"pooled": pooled, "heads": np.concatenate([parts[f"p{j}"] for j in range(70)], axis=1),
                    "none": np.zeros((0, 4), np.float32)})]


def topk_large_k():
    """A detector RPN's pre-NMS pick: TopK of 1000 of 2700 scores (on Vulkan one invocation per
    element: a pick-by-pick loop of 2.7M iterations was cut short on llvmpipe), then a Gather."""
    n, k = 2700, 1000
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1),
             helper.make_node("Reshape", ["x", "flat"], ["xf"]),
             helper.make_node("Gather", ["xf", "i"], ["g"], axis=0)]
    m = model(nodes, [vi("x", [1, n])], [vi("v", None), vi("i", None, I64), vi("g", None)],
              [init("k", np.array([k], np.int64)), init("flat", np.array([n], np.int64))])
    x = np.random.default_rng(11).standard_normal((1, n)).astype(np.float32)
    idx = np.argsort(-x[0], kind="stable")[:k]
    return m, [({"x": x}, {"v": x[:, idx], "i": idx[None].astype(np.int64), "g": x[0][idx][None]})]


def torch_detector(out):
    """A detector head: PyTorch export; the reference is PyTorch's own forward pass."""
    import torch
    import torchvision

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.body = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.cls = torch.nn.Conv2d(8, 2, 1)
            self.box = torch.nn.Conv2d(8, 4, 1)
            ys, xs = torch.meshgrid(torch.arange(12.0), torch.arange(12.0), indexing="ij")
            self.register_buffer("anchors", torch.stack([xs, ys, xs + 2, ys + 2], -1).reshape(-1, 4))

        def forward(self, img):
            f = torch.relu(self.body(img))
            scores = torch.sigmoid(self.cls(f)).flatten(2)[0]   # [2, 144]
            best, labels = scores.max(0)                        # [144]
            deltas = self.box(f).flatten(2)[0].t()              # [144, 4]
            keep = torch.nonzero(best > 0.65).squeeze(1)        # data-dependent
            boxes = self.anchors[keep] + deltas[keep]
            s = best[keep]
            k2 = torchvision.ops.nms(boxes, s, 0.3)             # NonMaxSuppression
            # k = min(4, survivors): Shape -> Gather -> Min in the export, a run-time k for ONNX
            k = torch.minimum(torch._shape_as_tensor(k2)[0], torch.tensor(4))
            top = torch.topk(s[k2], k)
            idx = k2[top.indices]
            return boxes[idx], top.values, labels[keep][idx]

    net = Head().eval()
    path = os.path.join(out, "torch_detector.onnx")
    img0 = torch.randn(1, 3, 12, 12)
    torch.onnx.export(net, (img0,), path, input_names=["img"], output_names=["boxes", "scores", "labels"], opset_version=13)
    cases = []
    for seed, scale in [(4, 0.1), (5, 1.0), (6, 3.0)]:  # 0, 5 and 43 boxes above the threshold
        g = torch.Generator().manual_seed(seed)
        img = torch.randn(1, 3, 12, 12, generator=g) * scale
        with torch.no_grad():
            b, s, l = net(img)
        cases.append(({"img": img.numpy()}, {"boxes": b.numpy(), "scores": s.numpy(), "labels": l.numpy().astype(np.int64)}))
    return path, cases


def torch_roi_align(out):
    """torchvision.ops.roi_align (aligned, adaptive sampling) after a conv, exported at opset 16."""
    import torch
    import torchvision

    class Pool(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(1)
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, img, boxes):
            f = torch.relu(self.conv(img))
            return torchvision.ops.roi_align(f, boxes, output_size=(3, 2), spatial_scale=0.5, sampling_ratio=-1, aligned=True)

    net = Pool().eval()
    path = os.path.join(out, "torch_roi_align.onnx")
    rs = np.random.RandomState(9)
    img = rs.randn(2, 3, 16, 20).astype(np.float32)
    # [batch, x1, y1, x2, y2] in image coordinates (twice the feature map's), sizes from 3 to 30 pixels
    boxes = np.array([[0, 1, 2, 9, 7], [1, 0, 0, 30, 28], [0, 14.5, 3.2, 17.8, 30.1], [1, -3, 5, 6, 9]], np.float32)
    torch.onnx.export(net, (torch.from_numpy(img), torch.from_numpy(boxes)), path, input_names=["img", "boxes"], output_names=["pooled"],
                      opset_version=16)
    with torch.no_grad():
        ref = net(torch.from_numpy(img), torch.from_numpy(boxes)).numpy()
    return path, [({"img": img, "boxes": boxes}, {"pooled": ref})]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--out", default="/tmp/rlx-dynamic-shapes")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--modes", default="eager,lazy,compiled")
    ap.add_argument("--ort", default=None, help="a node_modules folder holding onnxruntime-node: also check against ONNX Runtime")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    modes = a.modes.split(",")
    fails, runs = [], 0
    all_cases = []
    for name, fn in [("topk_runtime_k", topk_runtime_k), ("nonzero_gather", nonzero_gather), ("nms_tail", nms_tail), ("empty", empty),
                     ("detector_pieces", detector_pieces), ("topk_large_k", topk_large_k)]:
        m, cases = fn()
        path = os.path.join(a.out, name + ".onnx")
        open(path, "wb").write(m.SerializeToString())
        all_cases.append((name, path, cases, ATOL))
    all_cases.append(("torch_detector",) + torch_detector(a.out) + (1e-4,))
    all_cases.append(("torch_roi_align",) + torch_roi_align(a.out) + (1e-5,))

    for name, path, cases, atol in all_cases:
        for k, (ins, exps) in enumerate(cases):
            args = case_args(a.out, f"{name}.{k}", ins, exps)
            for mode in modes:
                r = subprocess.run([a.rlx, "run", path, "-b", a.backend, "-m", mode, "--atol", str(atol), "--rtol", str(RTOL)] + args,
                                   capture_output=True, text=True, timeout=300)
                runs += 1
                if r.returncode != 0:
                    fails.append(f"{name} case {k} {a.backend}/{mode}: exit {r.returncode}: {r.stderr.strip()[-600:]}")
            if a.ort:  # ONNX Runtime on the same inputs: the same outputs
                od = os.path.join(a.out, f"{name}.{k}.ort")
                os.makedirs(od, exist_ok=True)
                r = subprocess.run(["node", os.path.join(HERE, "ort_run.js"), path, od] +
                                   [f"{n}={os.path.join(a.out, f'{name}.{k}.in.{n}.npy')}" for n in ins],
                                   capture_output=True, text=True, env=dict(os.environ, NODE_PATH=a.ort), timeout=300)
                runs += 1
                if r.returncode != 0:
                    fails.append(f"{name} case {k}: ONNX Runtime: {r.stderr.strip()[-400:]}")
                    continue
                for n, v in exps.items():
                    got = np.load(os.path.join(od, n + ".npy"))
                    if got.shape != v.shape or not np.allclose(got, v, atol=atol, rtol=RTOL):
                        fails.append(f"{name} case {k}: ONNX Runtime's {n} {got.shape} differs from the reference {v.shape}")

    # The cache: three runs of one input plan its sizes once; the repeats reuse them.
    for mode in modes:
        name, path, cases, _ = all_cases[1]
        args = case_args(a.out, f"{name}.0", *cases[0])
        r = subprocess.run([a.rlx, "run", path, "-b", a.backend, "-m", mode, "--repeat", "3", "--json"] + args,
                           capture_output=True, text=True, timeout=300)
        runs += 1
        try:
            d = json.loads(r.stdout)["data_dependent_sizes"]
        except (ValueError, KeyError) as e:
            fails.append(f"cache {mode}: no data_dependent_sizes in --json ({e}): {r.stderr.strip()[-300:]}")
            continue
        # nonzero_gather has three host steps, each with a size other than its provisional one
        if not (r.returncode == 0 and d["planned"] == 0 and d["reused"] == 3 and d["planned_total"] == 3):
            fails.append(f"cache {mode}: expected the last of 3 runs to plan 0 sizes and reuse 3, 3 planned in all; got {d}")

    # Sizes that alternate within one process: --steps 5 feeds y = 1 - x back as x, so the count
    # of x > 0.5 alternates between two sizes; each is planned once (2 in all), and the last step
    # reuses its plan. The collected counts are checked against NumPy.
    nodes = [helper.make_node("Greater", ["x", "half"], ["m"]), helper.make_node("NonZero", ["m"], ["nz"]),
             helper.make_node("Shape", ["nz"], ["shp"]), helper.make_node("Gather", ["shp", "one_i"], ["count"], axis=0),
             helper.make_node("Sub", ["one", "x"], ["y"])]
    m = model(nodes, [vi("x", [100])], [vi("count", None, I64), vi("y", None)],
              [init("half", np.float32(0.5)), init("one_i", np.int64(1)), init("one", np.float32(1))])
    ap_ = os.path.join(a.out, "alternating.onnx")
    open(ap_, "wb").write(m.SerializeToString())
    x0 = np.random.RandomState(5).rand(100).astype(np.float32) * 0.8  # 36 above 0.5, 64 after 1 - x
    np.save(os.path.join(a.out, "alternating.x.npy"), x0)
    want = np.array([(x0 > 0.5).sum() if s % 2 == 0 else ((1 - x0) > 0.5).sum() for s in range(5)], np.int64)
    np.save(os.path.join(a.out, "alternating.counts.npy"), want)
    for mode in modes:
        r = subprocess.run([a.rlx, "run", ap_, "-b", a.backend, "-m", mode, "-i", "x=@" + os.path.join(a.out, "alternating.x.npy"),
                            "--steps", "5", "--feed", "y=x", "--collect", "count", "--json",
                            "--expect", "count=@" + os.path.join(a.out, "alternating.counts.npy")], capture_output=True, text=True, timeout=300)
        runs += 1
        try:
            d = json.loads(r.stdout)["data_dependent_sizes"]
        except (ValueError, KeyError) as e:
            fails.append(f"alternating sizes {mode}: exit {r.returncode} ({e}): {r.stderr.strip()[-300:]}")
            continue
        if not (r.returncode == 0 and d["planned"] == 0 and d["reused"] == 1 and d["planned_total"] == 2 and want[0] != want[1]):
            fails.append(f"alternating sizes {mode}: exit {r.returncode}, expected 2 sizes planned in all and the last step reusing one; got {d}")

    # Refusals (exit 2, naming the node): rlx convert cannot write a data-dependent size; a graph
    # file's nonzero declares its result's size, and another size at run time is an error.
    name, path, cases, _ = all_cases[3]
    r = subprocess.run([a.rlx, "convert", path, "-o", os.path.join(a.out, "empty.json"), "--params-out",
                        os.path.join(a.out, "empty.safetensors")] + case_args(a.out, f"{name}.0", cases[0][0], {}),
                       capture_output=True, text=True, timeout=300)
    runs += 1
    if r.returncode != 2 or "data-dependent output size" not in r.stderr or "'nz/nonzero'" not in r.stderr:
        fails.append(f"convert refusal: exit {r.returncode}: {r.stderr.strip()[-300:]}")
    g = {"format": "rlx.graph", "version": 1, "name": "nz", "nodes": [
        {"id": "x", "op": "input", "shape": [4], "dtype": "f32"},
        {"id": "n", "op": "nonzero", "inputs": ["x"]},
        {"id": "idx", "op": "result", "inputs": ["n"], "attrs": {"index": 0}, "shape": [1, 2], "dtype": "i64"}], "outputs": ["idx"]}
    gp = os.path.join(a.out, "nonzero_graph.json")
    json.dump(g, open(gp, "w"))
    np.save(os.path.join(a.out, "nz_expect.npy"), np.array([[1, 3]], np.int64))
    r = subprocess.run([a.rlx, "run", gp, "-b", a.backend, "-i", "x=4xf32=0,1,0,2", "--expect", "idx=@" + os.path.join(a.out, "nz_expect.npy")],
                       capture_output=True, text=True, timeout=300)
    runs += 1
    if r.returncode != 0:
        fails.append(f"graph file nonzero: exit {r.returncode}: {r.stderr.strip()[-300:]}")
    r = subprocess.run([a.rlx, "run", gp, "-b", a.backend, "-i", "x=4xf32=1,1,0,2"], capture_output=True, text=True, timeout=300)
    runs += 1
    if r.returncode != 2 or "node 'n' (nonzero)" not in r.stderr or "size 3" not in r.stderr:
        fails.append(f"graph file nonzero, another size: exit {r.returncode}: {r.stderr.strip()[-300:]}")

    return onnx_build.finish(f"data-dependent shapes ({a.backend})", runs, fails)


if __name__ == "__main__":
    sys.exit(main())
