#!/usr/bin/python3
"""Issue 30: does splitting tensors over several Vulkan bindings cost anything where tensors fit,
and what does a split cost? Runs `rlx bench` (compiled mode, Vulkan) alternately with a baseline
rlx (built from the commit before the change) and this one, several rounds, and prints the median
of the per-round medians and the ratio. Cases: a 1024^3 matmul, a linear of one row against a
4096 x 4096 weight (64 MB: the gemv AlexNet's classifier uses), graphs/small_cnn.onnx at batch
64, with --resnet18 torchvision's resnet18 (seeded weights, exported here); then, with this rlx only, the same gemv with RLX_VK_MAX_BINDING_BYTES
lowered so that its weight is split into 2 and 3 parts, and AlexNet (fc6 weight 151 MB, above
lavapipe's 128 MiB, which the baseline refuses).

  /usr/bin/python3 bench/vulkan_split_bench.py --base BASE/rlx --rlx build/apps/rlx/rlx [--rounds 5] [--resnet18]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def bench(rlx, graph, inputs, env, reps):
    args = [rlx, "bench", graph, "-b", "vulkan", "--modes", "compiled", "--reps", str(reps), "--format", "json"]
    for i in inputs:
        args += ["--dim", i[4:]] if i.startswith("dim:") else ["--input", i]
    p = subprocess.run(args, capture_output=True, text=True, env=dict(os.environ, **env))
    if p.returncode != 0:
        return None, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "exit %d" % p.returncode
    row = json.loads(p.stdout)["rows"][0]
    return (row["median_ms"], row["device_ms"]), ""


def export(d, name, batch):
    import torch
    import torchvision
    path = os.path.join(d, "%s_b%d.onnx" % (name, batch))
    if not os.path.exists(path):
        torch.manual_seed(0)
        m = getattr(torchvision.models, name)(weights=None).eval()
        torch.onnx.export(m, torch.randn(batch, 3, 224, 224), path, input_names=["x"], output_names=["y"],
                          opset_version=13)
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--resnet18", action="store_true", help="also resnet18 (about 20 s a run on a busy 2-core lavapipe)")
    ap.add_argument("--no-alexnet", action="store_true")
    a = ap.parse_args()
    d = a.dir or tempfile.mkdtemp()
    gemv = os.path.join(d, "gemv_4096.json")
    with open(gemv, "w") as f:
        json.dump({"format": "rlx.graph", "version": 1, "name": "gemv_4096", "nodes": [
            {"id": "x", "op": "input", "shape": [1, 4096]}, {"id": "w", "op": "input", "shape": [4096, 4096]},
            {"id": "y", "op": "linear", "inputs": ["x", "w"]}], "outputs": ["y"]}, f)
    here = os.path.dirname(os.path.abspath(__file__))
    cases = [
        ("matmul 1024^3", os.path.join(here, "graphs", "matmul_1024.json"), ["a=random:1", "b=random:2"]),
        ("linear 1x4096 . 4096x4096 (gemv)", gemv, ["x=random:1", "w=random:2"]),
        ("small_cnn batch 64 (3 conv, pools, gemm)", os.path.join(here, "..", "graphs", "small_cnn.onnx"),
         ["image=random:1", "dim:batch=64"]),
    ]
    if a.resnet18:
        cases.append(("resnet18 batch 1", export(d, "resnet18", 1), ["x=random:1"]))
    print("| case | baseline ms (device ms) | this rlx ms (device ms) | ratio |")
    print("|---|---:|---:|---:|")
    for name, g, ins in cases:
        res = {"base": [], "new": []}
        for _ in range(a.rounds):
            for who, rlx in (("base", a.base), ("new", a.rlx)):
                r, err = bench(rlx, g, ins, {}, a.reps)
                if r is None:
                    sys.exit("%s failed with %s: %s" % (name, rlx, err))
                res[who].append(r)
        med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in res.items()}
        print("| %s | %.1f (%.1f) | %.1f (%.1f) | %.3f |" % (name, med["base"][0], med["base"][1], med["new"][0],
                                                          med["new"][1], med["new"][0] / med["base"][0]))
    # The cost of a split: the gemv's 64 MB weight whole, in 2 parts and in 3 (this rlx only).
    print("\n| gemv 4096x4096, this rlx | ms (device ms) | ratio to whole |")
    print("|---|---:|---:|")
    limits = [("whole (128 MiB bindings)", {}), ("2 parts (RLX_VK_MAX_BINDING_BYTES=40000000)",
              {"RLX_VK_MAX_BINDING_BYTES": "40000000"}), ("3 parts (RLX_VK_MAX_BINDING_BYTES=30000000)",
              {"RLX_VK_MAX_BINDING_BYTES": "30000000"})]
    res = {n: [] for n, _ in limits}
    for _ in range(a.rounds):
        for n, env in limits:
            r, err = bench(a.rlx, gemv, ["x=random:1", "w=random:2"], env, a.reps)
            if r is None:
                sys.exit("gemv %s failed: %s" % (n, err))
            res[n].append(r)
    whole = statistics.median(x[0] for x in res[limits[0][0]])
    for n, _ in limits:
        m, dm = statistics.median(x[0] for x in res[n]), statistics.median(x[1] for x in res[n])
        print("| %s | %.1f (%.1f) | %.3f |" % (n, m, dm, m / whole))
    # AlexNet: fc6 (151 MB) above lavapipe's binding limit.
    if a.no_alexnet:
        return
    alex = export(d, "alexnet", 1)
    r, err = bench(a.base, alex, ["x=random:1"], {}, a.reps)
    print("\nalexnet batch 1, baseline: %s" % ("%.1f ms" % r[0] if r else "refused: " + err))
    r, err = bench(a.rlx, alex, ["x=random:1"], {}, a.reps)
    print("alexnet batch 1, this rlx: %s" % ("%.1f ms (device %.1f ms)" % r if r else "failed: " + err))


if __name__ == "__main__":
    main()
