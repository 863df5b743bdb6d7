#!/usr/bin/python3
"""Planning cost against graph size (issue 21): wall time and peak RSS of one `rlx run` of an
elementwise chain of N nodes and of a torch-exported LSTM over N steps (unrolled by the importer),
in lazy and compiled mode. Linear cost shows as a constant time per node across the sizes.

  bench/node_scaling.py --rlx build/apps/rlx/rlx [--chains 10000,30000,100000] [--lstm 2000,10000]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def chain(path, n):
    nodes = [{"id": "x", "op": "input", "shape": [64]}]
    ops = ["exp", "tanh", "neg", "sin"]
    for i in range(n):
        nodes.append({"id": f"n{i}", "op": ops[i % 4], "inputs": [nodes[-1]["id"]]})
    with open(path, "w") as f:
        json.dump({"format": "rlx.graph", "version": 1, "nodes": nodes, "outputs": [nodes[-1]["id"]]}, f)
    return ["-i", "x=random:1"]


def lstm(path, n):
    import numpy as np
    import torch
    torch.manual_seed(0)
    m = torch.nn.LSTM(8, 16, batch_first=True)
    x = torch.randn(1, n, 8)
    torch.onnx.export(m, (x,), path, input_names=["x"], output_names=["y", "h", "c"], opset_version=14)
    np.save(path + ".x.npy", x.numpy())
    return ["-i", "x=@" + path + ".x.npy"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--chains", default="10000,30000,100000")
    ap.add_argument("--lstm", default="2000,10000")
    a = ap.parse_args()
    print("| graph | nodes or steps | mode | wall s | peak RSS MiB | µs per node or step |")
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as d:
        for kind, sizes, make in [("chain", a.chains, chain), ("lstm", a.lstm, lstm)]:
            for n in [int(s) for s in sizes.split(",") if s]:
                path = os.path.join(d, f"{kind}{n}" + (".json" if kind == "chain" else ".onnx"))
                args = make(path, n)
                for mode in ["lazy", "compiled"]:
                    r = subprocess.run(["/usr/bin/time", "-f", "%e %M", a.rlx, "run", path, *args, "--mode", mode,
                                        "--no-cache"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                    if r.returncode != 0:
                        sys.exit(f"rlx failed on {kind} {n} ({mode}): {r.stderr[-300:]}")
                    wall, rss = r.stderr.strip().splitlines()[-1].split()
                    print(f"| {kind} | {n} | {mode} | {float(wall):.2f} | {int(rss) / 1024:.0f} | "
                          f"{float(wall) / n * 1e6:.0f} |", flush=True)


if __name__ == "__main__":
    main()
