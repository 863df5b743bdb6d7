#!/usr/bin/python3
"""AlexNet on Vulkan against PyTorch (issue 30): its fc6 weight, 4096 x 9216 f32 (151 MB), is
larger than lavapipe's 128 MiB maxStorageBufferRange, so the Vulkan executor must split the
product over several bindings. Exports torchvision's alexnet (seeded random weights) with
torch.onnx.export, runs it with rlx on the given backend in every mode, and compares with
PyTorch's output. Outside CI (the export and lavapipe's run take a minute):

  /usr/bin/python3 bench/vulkan_alexnet.py --rlx build/apps/rlx/rlx [--backend vulkan] [--batch 2] [--model vgg11]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torchvision


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--backend", default="vulkan")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--modes", default="eager,lazy,compiled")
    ap.add_argument("--dir", default=None, help="keep the export here")
    ap.add_argument("--model", default="alexnet", help="another torchvision classifier (e.g. vgg11: fc6 411 MB)")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)(weights=None).eval()
    x = torch.randn(args.batch, 3, 224, 224)
    with torch.no_grad():
        want = model(x).double().numpy()
    d = args.dir or tempfile.mkdtemp()
    onnx_path = os.path.join(d, args.model + ".onnx")
    if not os.path.exists(onnx_path):
        torch.onnx.export(model, x, onnx_path, input_names=["x"], output_names=["y"], opset_version=13)
    np.save(os.path.join(d, "x.npy"), x.numpy())
    big = max(model.parameters(), key=lambda p: p.numel())
    print("largest weight %s: %d bytes" % (list(big.shape), big.numel() * 4))
    fails = 0
    for mode in args.modes.split(","):
        out = os.path.join(d, "y_%s.npy" % mode)
        t0 = time.time()
        p = subprocess.run([args.rlx, "run", onnx_path, "--backend", args.backend, "--mode", mode,
                            "--input", "x=@" + os.path.join(d, "x.npy"), "--output", "y=" + out],
                           capture_output=True, text=True)
        dt = time.time() - t0
        if p.returncode != 0:
            print("FAIL %s %s: exit %d: %s" % (args.backend, mode, p.returncode, p.stderr.strip()))
            fails += 1
            continue
        got = np.load(out).astype(np.float64)
        err = float(np.max(np.abs(got - want)))
        ok = got.shape == want.shape and err <= 1e-4 * np.max(np.abs(want))
        fails += not ok
        print("%s %s %s: max abs err %.3g vs PyTorch (outputs up to %.3g), %.1f s for the process" %
              ("ok  " if ok else "FAIL", args.backend, mode, err, np.max(np.abs(want)), dt))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
