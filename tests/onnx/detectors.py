#!/usr/bin/python3
"""torchvision's detection models exported with torch.onnx, run through `rlx run`, against
ONNX Runtime on the same export (docs/onnx.md, "Detection models"). They exercise what detectors are made of: If and
Loop, NonZero, TopK with a run-time k, NonMaxSuppression, RoiAlign, a ScatterElements over
pooled boxes (MultiScaleRoIAlign), Concats of more than 64 inputs, empty results.

Weights are seeded random ones (nothing is downloaded); the classification layers are scaled up
so that scores spread out: with the plain random init most scores tie, and which of several
equal-scored boxes a top-k keeps is then a matter of float rounding (PyTorch, ONNX Runtime and
rlx all differ there; boxes over the image's padding or its edges still tie). ONNX Runtime
(onnxruntime-node, installed into --cache from npm) is the reference: it runs the same graph
with ONNX's tie rules, where PyTorch's own forward pass may keep another of several equal
boxes. The check, for fasterrcnn_mobilenet_v3_large_320_fpn (and with --all
retinanet_resnet50_fpn and ssdlite320_mobilenet_v3_large): the same output shapes, and every
detection whose score is unique in ONNX Runtime's output (no other within 1e-4; at least 5 of
them) is in rlx's output with the same label and box (within 1e-2); tied scores are not
compared one by one, and a detection at the end of a full output may fall past the model's cap
when more tied ones than ONNX Runtime keeps sit above it (`unique_scores` says when; the run
prints how many). How many of PyTorch's unique-score detections rlx reproduces is printed.

With --models keypointrcnn_resnet50_fpn (or --all), Keypoint R-CNN (ResNet-50-FPN, 256x320): its
heatmap Loop resizes each box's heatmaps to that box's size (a body imported per iteration) and
its keypoints and keypoints_scores of every unique-score detection are compared too (within
1e-2 of their largest value). Not in CI: the export takes about a minute and a run tens of
seconds on 2 cores.

  tests/onnx/detectors.py --rlx build/apps/rlx/rlx [--out DIR] [--backend cpu|vulkan]
                          [--modes eager,lazy,compiled] [--all | --models NAME,...] [--cache NPM_PREFIX]
                          [--rlx-args '--repeat 2'] [--timeout 600]
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np

import onnx_build  # noqa: E402

MODELS = {  # name: (scale of the classification layers, input H, W)
    "fasterrcnn_mobilenet_v3_large_320_fpn": (30.0, 240, 320),
    "retinanet_resnet50_fpn": (2.0, 256, 320),
    "ssdlite320_mobilenet_v3_large": (2.0, 256, 320),
    "keypointrcnn_resnet50_fpn": (30.0, 256, 320),
}


def export(name, out):
    """Exports `name` with seeded weights; saves the image and PyTorch's outputs beside it."""
    import torch
    import torchvision
    path = os.path.join(out, name + ".onnx")
    if os.path.exists(path):
        return path
    cls, H, W = MODELS[name]
    kw = dict(weights=None, weights_backbone=None)
    if "rcnn" in name or "retina" in name:
        kw.update(min_size=256, max_size=320)
    if "rcnn" in name:
        kw["box_score_thresh"] = 0.0
    if "retina" in name:
        kw["score_thresh"] = 0.0
    torch.manual_seed(0)
    m = getattr(torchvision.models.detection, name)(**kw).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.5 / max(1, p[0].numel()) ** 0.5))
        for n, p in m.named_parameters():
            if n.endswith("weight") and any(k in n for k in ("cls_score", "cls_logits", "classification_head")):
                p.mul_(cls)
        for n, b in m.named_buffers():
            if n.endswith("running_var"):
                b.uniform_(0.5, 1.5, generator=g)
            elif n.endswith("running_mean"):
                b.normal_(0, 0.1, generator=g)
        yy, xx = torch.meshgrid(torch.linspace(0, 1, H), torch.linspace(0, 1, W), indexing="ij")
        x = torch.stack([torch.sin(7 * xx + 3 * yy), torch.cos(5 * yy - 2 * xx), torch.sin(11 * xx * yy)]) * 0.4 + 0.5
        x = (x + 0.1 * torch.rand(3, H, W, generator=g)).clamp(0, 1)
        ref = m([x])[0]
    np.save(os.path.join(out, name + ".image.npy"), x.numpy())
    for k, v in ref.items():
        np.save(os.path.join(out, f"{name}.ref.{k}.npy"), v.numpy())
    import warnings
    warnings.filterwarnings("ignore")
    torch.onnx.export(m, ([x],), path + ".tmp", opset_version=13, input_names=["image"], output_names=list(ref.keys()))
    os.replace(path + ".tmp", path)
    return path


def load(prefix):
    """boxes, scores, labels, and Keypoint R-CNN's keypoints and keypoints_scores where present."""
    out = [np.load(f"{prefix}{k}.npy") for k in ("boxes", "scores", "labels")]
    if os.path.exists(f"{prefix}keypoints.npy"):
        out += [np.load(f"{prefix}{k}.npy") for k in ("keypoints", "keypoints_scores")]
    return out


def box_close(a, b):
    return np.abs(a - b).max() <= 1e-2 * (1 + np.abs(b).max())


def tied(scores):
    """For each detection: does another share its score (within 1e-4)?"""
    return np.array([(np.abs(scores - v) < 1e-4).sum() > 1 for v in scores], dtype=bool)


def unique_scores(ref, got, notes=None):
    """Same shapes; the detections whose score is unique in the reference agree.

    One exception, at the cut: a model keeps at most N detections, and which members of a group
    of tied scores survive NonMaxSuppression depends on the order it meets equal scores in (the
    ONNX operator leaves it open; PyTorch, ONNX Runtime and rlx differ). Where the output checked
    holds more tied detections above a reference detection than the reference does, that many
    detections at the reference's end may fall past the cut; such a one is not required if its
    score is below every score the output kept. Everything above the cut is compared. How many
    were let go so is appended to notes."""
    rb, rs, rl = ref[:3]
    gb, gs, gl = got[:3]
    if rb.shape != gb.shape or rs.shape != gs.shape:
        return f"{gb.shape[0]} detections, PyTorch {rb.shape[0]}"
    if len(ref) != len(got) or any(r.shape != g.shape for r, g in zip(ref[3:], got[3:])):
        return f"keypoint outputs {[g.shape for g in got[3:]]}, expected {[r.shape for r in ref[3:]]}"
    rt, gt = tied(rs), tied(gs)
    n, cut = 0, 0
    for i in range(len(rs)):
        if rt[i]:
            continue
        n += 1
        j = np.where(np.abs(gs - rs[i]) < 1e-4)[0]
        if len(j) == 0 and rs[i] < gs.min() - 1e-4:
            surplus = int((gt & (gs > rs[i])).sum() - (rt & (rs > rs[i])).sum())
            if surplus > 0 and i >= len(rs) - surplus:
                n, cut = n - 1, cut + 1  # pushed past the cut by tied detections (docstring)
                continue
        if len(j) != 1 or gl[j[0]] != rl[i] or not box_close(gb[j[0]], rb[i]):
            return f"PyTorch's detection {i} (label {rl[i]}, score {rs[i]:.6f}, box {rb[i]}) differs in the output checked"
        # Keypoint R-CNN: that detection's 17 keypoints (x, y, visibility) and their scores
        for what, r, g in zip(("keypoints", "keypoints_scores"), ref[3:], got[3:]):
            if not box_close(g[j[0]], r[i]):
                err = np.abs(g[j[0]] - r[i]).max()
                return f"detection {i} (score {rs[i]:.6f}): {what} differ by up to {err:.4g}"
    if cut and notes is not None:
        notes.append(f"{cut} unique-score detection(s) past the cut, below {cut} more tied ones")
    return "" if n >= 5 else f"only {n} detections have a unique score: too few to compare"


def ort_outputs(cache, path, image, od):
    """ONNX Runtime's outputs (tests/onnx/ort_run.js) for the export, written into od."""
    import real_models
    real_models.npm_install(cache, real_models.ORT_PACKAGE, "onnxruntime-node")
    env = dict(os.environ, NODE_PATH=os.path.join(cache, "node_modules"))
    r = subprocess.run(["node", os.path.join(os.path.dirname(os.path.abspath(__file__)), "ort_run.js"), path, od, f"image={image}"],
                       capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        sys.exit(f"ONNX Runtime failed on {path}:\n{r.stderr[-1500:]}")
    return load(od + "/")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--out", default="/tmp/rlx-detectors")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--modes", default="eager,lazy,compiled")
    ap.add_argument("--rlx-args", default="", help="more `rlx run` arguments, e.g. '--repeat 2' to time a repeat")
    ap.add_argument("--all", action="store_true", help="also RetinaNet (ResNet-50), SSDlite and Keypoint R-CNN")
    ap.add_argument("--models", default=None, help="comma-separated names from MODELS (instead of the default or --all)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds a run may take (default 600)")
    ap.add_argument("--cache", default=None, help="npm install prefix for onnxruntime-node (default: BUILD/onnx-npm)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cache = a.cache or os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(a.rlx)))), "onnx-npm")
    names = a.models.split(",") if a.models else list(MODELS) if a.all else ["fasterrcnn_mobilenet_v3_large_320_fpn"]
    for n in names:
        if n not in MODELS:
            sys.exit(f"--models: no model '{n}' (known: {', '.join(MODELS)})")
    fails, runs = [], 0
    for name in names:
        t = time.time()
        path = export(name, a.out)
        image = os.path.join(a.out, name + ".image.npy")
        torch_ref = load(os.path.join(a.out, f"{name}.ref."))
        ref = ort_outputs(cache, path, image, os.path.join(a.out, name + ".ort"))
        print(f"{name}: exported ({time.time() - t:.1f} s), {len(ref[1])} detections; ONNX Runtime against PyTorch: "
              f"{unique_scores(torch_ref, ref) or 'agree'}", flush=True)
        for mode in a.modes.split(","):
            od = os.path.join(a.out, f"{name}.{a.backend}.{mode}")
            t = time.time()
            runs += 1
            try:
                r = subprocess.run([a.rlx, "run", path, "-b", a.backend, "-m", mode, "-i", f"image=@{image}",
                                    "--out-dir", od] + a.rlx_args.split(), capture_output=True, text=True, timeout=a.timeout)
            except subprocess.TimeoutExpired:
                fails.append(f"{name} {a.backend}/{mode}: no result within --timeout {a.timeout} s")
                print(f"  {a.backend}/{mode}: TIMEOUT ({a.timeout} s)", flush=True)
                continue
            if r.returncode != 0:
                fails.append(f"{name} {a.backend}/{mode}: exit {r.returncode}: {r.stderr.strip()[-400:]}")
                continue
            got = load(od + "/")
            notes = []
            why = unique_scores(ref, got, notes)
            vs_torch = unique_scores(torch_ref, got)
            print(f"  {a.backend}/{mode}: {'ok' if not why else 'FAIL: ' + why}{''.join(' (' + n + ')' for n in notes)} "
                  f"({time.time() - t:.1f} s); against PyTorch: {vs_torch or 'agree'}", flush=True)
            if why:
                fails.append(f"{name} {a.backend}/{mode}: {why}")
    return onnx_build.finish(f"detectors ({a.backend})", runs, fails)


if __name__ == "__main__":
    sys.exit(main())
