#!/usr/bin/python3
"""ONNX Conv, ConvTranspose, MaxPool and AveragePool on 3-D data (NCDHW, issue 30), written with
python3-onnx's helper, for the attributes PyTorch's exports do not write: auto_pad SAME_UPPER,
SAME_LOWER and VALID, ConvTranspose's output_shape, and asymmetric explicit pads. Each case runs
through `rlx run` in every mode on the CPU and, where `rlx devices` lists a Vulkan device, on
Vulkan. Expected values: PyTorch (torch.nn.functional.conv3d, conv_transpose3d, max_pool3d,
avg_pool3d) on the input padded as the ONNX specification says (auto_pad's total padding
max(0, (ceil(in / s) - 1) s + (k - 1) d + 1 - in), the odd unit at the end for SAME_UPPER and at
the start for SAME_LOWER), never rlx's output.

  tests/onnx/conv3d_attrs.py --rlx build/apps/rlx/rlx [--out DIR]
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
from onnx import helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_build as ob  # noqa: E402


def same_pads(ins, k, s, d, upper):
    """ONNX auto_pad SAME_*: [x1_begin, x2_begin, x3_begin, x1_end, x2_end, x3_end]."""
    b, e = [], []
    for n, kk, ss, dd in zip(ins, k, s, d):
        total = max(0, (math.ceil(n / ss) - 1) * ss + (kk - 1) * dd + 1 - n)
        lo = total // 2 if upper else total - total // 2
        b.append(lo)
        e.append(total - lo)
    return b + e


def tpad(x, pads, value=0.0):
    """x padded by ONNX pads [d0, h0, w0, d1, h1, w1] (torch's F.pad takes the last axis first)."""
    return F.pad(x, (pads[2], pads[5], pads[1], pads[4], pads[0], pads[3]), value=value)


def cases(rng):
    """(name, onnx node, inputs {name: array}, initializers {name: array}, expected array)."""
    out = []
    x = rng.standard_normal((1, 4, 5, 7, 6)).astype(np.float32)
    w = (rng.standard_normal((6, 2, 3, 2, 3)) / 4).astype(np.float32)
    b = (rng.standard_normal(6) / 4).astype(np.float32)
    tx, tw, tb = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)
    for ap in ("SAME_UPPER", "SAME_LOWER"):
        s, d = [2, 1, 2], [1, 2, 1]
        p = same_pads(x.shape[2:], w.shape[2:], s, d, ap == "SAME_UPPER")
        y = F.conv3d(tpad(tx, p), tw, tb, stride=s, dilation=d, groups=2)
        out.append((f"conv_{ap.lower()}", helper.make_node("Conv", ["x", "w", "b"], ["y"], auto_pad=ap, strides=s, dilations=d, group=2),
                    {"x": x}, {"w": w, "b": b}, y.numpy()))
    y = F.conv3d(tx, tw, None, stride=[1, 2, 1], groups=2)
    out.append(("conv_valid", helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="VALID", strides=[1, 2, 1], group=2),
                {"x": x}, {"w": w}, y.numpy()))
    p = [2, 0, 1, 0, 1, 2]
    y = F.conv3d(tpad(tx, p), tw, tb, stride=[1, 1, 2], groups=2)
    out.append(("conv_asymmetric_pads", helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=p, strides=[1, 1, 2], group=2),
                {"x": x}, {"w": w, "b": b}, y.numpy()))
    # ConvTranspose: output_shape and SAME_UPPER, the pads generated as the spec says
    wt = (rng.standard_normal((4, 3, 2, 3, 3)) / 4).astype(np.float32)
    twt = torch.from_numpy(wt)
    # (ONNX: total = full - output_shape; SAME_UPPER puts total // 2 at the start, NOTSET and
    # SAME_LOWER total - total // 2), cropped from the full transposed convolution
    for name, attrs, want, upper in (("convtranspose_output_shape", {"output_shape": [10, 14, 11]}, [10, 14, 11], False),
                                     ("convtranspose_same_upper", {"auto_pad": "SAME_UPPER"}, [10, 14, 12], True)):
        s = [2, 2, 2]
        full = F.conv_transpose3d(tx, twt, stride=s)  # no pads: the full transposed convolution
        fs = list(full.shape[2:])
        assert all(fs[a] >= want[a] for a in range(3)), (fs, want)
        starts = [(fs[a] - want[a]) // 2 if upper else (fs[a] - want[a]) - (fs[a] - want[a]) // 2 for a in range(3)]
        y = full[(slice(None), slice(None)) + tuple(slice(starts[a], starts[a] + want[a]) for a in range(3))]
        out.append((name, helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=s, **attrs), {"x": x}, {"w": wt}, y.numpy()))
    # pools with auto_pad and ceil_mode
    for ap in ("SAME_UPPER", "SAME_LOWER"):
        k, s = [2, 3, 3], [2, 2, 1]
        p = same_pads(x.shape[2:], k, s, [1, 1, 1], ap == "SAME_UPPER")
        y = F.max_pool3d(tpad(tx, p, -math.inf), k, s)
        out.append((f"maxpool_{ap.lower()}", helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=k, strides=s, auto_pad=ap),
                    {"x": x}, {}, y.numpy()))
        # count_include_pad 0: window sums over the zero-padded input divided by the covered count
        ones = torch.ones_like(tx)
        y = F.avg_pool3d(tpad(tx, p), k, s, divisor_override=1) / F.avg_pool3d(tpad(ones, p), k, s, divisor_override=1)
        out.append((f"averagepool_{ap.lower()}", helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=k, strides=s, auto_pad=ap),
                    {"x": x}, {}, y.numpy()))
    k, s, p = [3, 2, 3], [2, 2, 2], [1, 0, 1, 1, 1, 0]
    y = F.max_pool3d(tpad(tx, p, -math.inf), k, s, dilation=[1, 2, 1], ceil_mode=True)
    out.append(("maxpool_ceil_dilations_asymmetric",
                helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=k, strides=s, pads=p, dilations=[1, 2, 1], ceil_mode=1),
                {"x": x}, {}, y.numpy()))
    y = F.avg_pool3d(tpad(tx, p), k, s)  # count_include_pad 1 (no ceil_mode: every window inside the padded input)
    out.append(("averagepool_count_include_pad_asymmetric",
                helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=k, strides=s, pads=p, count_include_pad=1),
                {"x": x}, {}, y.numpy()))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="rlx-conv3d-attrs-")
    os.makedirs(out, exist_ok=True)
    devices = subprocess.run([a.rlx, "devices"], capture_output=True, text=True).stdout
    backends = ["cpu"] + (["vulkan"] if "vulkan device 0" in devices else [])
    fails, runs = 0, 0
    for name, node, ins, inits, want in cases(np.random.default_rng(30)):
        m = ob.model([node], [ob.vi(n, list(v.shape)) for n, v in ins.items()], [ob.vi("y", None)],
                     [ob.init(n, v) for n, v in inits.items()], opset=13)
        path = os.path.join(out, name + ".onnx")
        with open(path, "wb") as f:
            f.write(m.SerializeToString())
        args = ob.case_args(out, name, ins, {"y": want.astype(np.float32)})
        for be in backends:
            for mode in ("eager", "lazy", "compiled"):
                r = subprocess.run([a.rlx, "run", path, "-b", be, "-m", mode, "--atol", "1e-5", "--rtol", "1e-5"] + args,
                                   capture_output=True, text=True, timeout=120)
                runs += 1
                if r.returncode != 0:
                    fails += 1
                    print(f"FAIL {name} {be} {mode}: exit {r.returncode}: {r.stderr.strip()[-500:]}")
    print(f"3-D conv/pool attributes: {runs} runs on {', '.join(backends)}, {runs - fails} match PyTorch")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
