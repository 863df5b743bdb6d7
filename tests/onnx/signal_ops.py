#!/usr/bin/python3
"""ONNX's DFT, STFT and MelWeightMatrix forms that the node tests leave out, through `rlx run`,
against NumPy's FFT (docs/onnx.md):
  * DFT of a real signal, onesided, with dft_length longer (zero padding) and shorter (cut) than
    the axis, along a middle axis;
  * DFT of a complex signal, forward and inverse, along axis 2 (a transpose there and back);
  * STFT of a complex signal (onesided=0) with a Hann window and a step that leaves a tail;
  * a front end: STFT (real, onesided) -> power spectrum -> MatMul with MelWeightMatrix (folded),
    checked against the same steps in NumPy, the mel matrix written out as ONNX's reference.
Every case runs in eager, lazy and compiled mode on the chosen backend.

  tests/onnx/signal_ops.py --rlx build/apps/rlx/rlx [--out DIR] [--backend cpu|vulkan] [--modes ...]
"""
import argparse
import os
import subprocess
import sys

import numpy as np
from onnx import TensorProto, helper

import onnx_build  # noqa: E402
from onnx_build import case_args, init, vi  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def model(nodes, inputs, outputs, inits=()):
    return onnx_build.model(nodes, inputs, outputs, inits, opset=17)


def ri(z):  # complex -> [..., 2]
    return np.stack([z.real, z.imag], -1).astype(np.float32)


def mel_ref(mels, dft, rate, lo, hi):  # ONNX's reference for MelWeightMatrix, written out
    bins = dft // 2 + 1
    mlo, mhi = 2595 * np.log10(1 + lo / 700), 2595 * np.log10(1 + hi / 700)
    f = np.arange(mels + 2) * ((mhi - mlo) / (mels + 2)) + mlo
    f = (((dft + 1) * (700 * (10 ** (f / 2595) - 1))) // rate).astype(int)
    out = np.zeros((bins, mels))
    for i in range(mels):
        l, c, r = f[i], f[i + 1], f[i + 2]
        if c == l:
            out[c, i] = 1
        else:
            for j in range(l, c + 1):
                out[j, i] = (j - l) / (c - l)
        for j in range(c, r):
            out[j, i] = (r - j) / (r - c)
    return out.astype(np.float32)


def cases():
    rs = np.random.RandomState(7)
    out = []
    x = rs.randn(2, 12, 3, 1).astype(np.float32)
    for n in (16, 9):  # padded, cut
        m = model([helper.make_node("DFT", ["x", "n"], ["y"], axis=1, onesided=1)], [vi("x", [2, 12, 3, 1])], [vi("y", None)],
                  [init("n", np.int64(n))])
        out.append((f"dft_real_onesided_{n}", m, {"x": x}, {"y": ri(np.fft.rfft(x[..., 0], n=n, axis=1))}))
    z = (rs.randn(2, 3, 10) + 1j * rs.randn(2, 3, 10)).astype(np.complex64)
    for inv in (0, 1):
        m = model([helper.make_node("DFT", ["x"], ["y"], axis=2, inverse=inv)], [vi("x", [2, 3, 10, 2])], [vi("y", None)])
        ref = np.fft.ifft(z, axis=2) if inv else np.fft.fft(z, axis=2)
        out.append((f"dft_complex_{'inverse' if inv else 'forward'}", m, {"x": ri(z)}, {"y": ri(ref)}))
    sig = (rs.randn(1, 70) + 1j * rs.randn(1, 70)).astype(np.complex64)
    L, step = 16, 6
    win = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(L) / L)).astype(np.float32)
    m = model([helper.make_node("STFT", ["s", "step", "w"], ["y"], onesided=0)], [vi("s", [1, 70, 2])], [vi("y", None)],
              [init("step", np.int64(step)), init("w", win)])
    frames = np.stack([sig[0, f * step:f * step + L] * win for f in range((70 - L) // step + 1)])
    out.append(("stft_complex_window", m, {"s": ri(sig)}, {"y": ri(np.fft.fft(frames, axis=1))[None]}))
    # a speech front end: |STFT|^2 -> mel
    audio = rs.randn(1, 400).astype(np.float32)
    L, step, mels, rate = 64, 32, 10, 16000
    nodes = [
        helper.make_node("STFT", ["a", "step", "", "len"], ["spec"]),
        helper.make_node("Mul", ["spec", "spec"], ["sq"]),
        helper.make_node("ReduceSum", ["sq", "last"], ["power"], keepdims=0),
        helper.make_node("MelWeightMatrix", ["mels", "len", "rate", "lo", "hi"], ["mel_w"]),
        helper.make_node("MatMul", ["power", "mel_w"], ["mel"]),
    ]
    m = model(nodes, [vi("a", [1, 400, 1])], [vi("mel", None)],
              [init("step", np.int64(step)), init("len", np.int64(L)), init("last", np.array([-1], np.int64)),
               init("mels", np.int64(mels)), init("rate", np.int64(rate)), init("lo", np.float32(20)), init("hi", np.float32(8000))])
    frames = np.stack([audio[0, f * step:f * step + L] for f in range((400 - L) // step + 1)]).astype(np.float64)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    out.append(("mel_front_end", m, {"a": audio[..., None]}, {"mel": (power @ mel_ref(mels, L, rate, 20.0, 8000.0))[None].astype(np.float32)}))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--out", default="/tmp/rlx-signal-ops")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--modes", default="eager,lazy,compiled")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    fails, runs = [], 0
    for name, m, ins, exps in cases():
        path = os.path.join(a.out, name + ".onnx")
        open(path, "wb").write(m.SerializeToString())
        args = case_args(a.out, name, ins, exps)
        # f32 products of up to 64 terms against float64 references
        tol = ["--atol", "2e-3" if name == "mel_front_end" else "2e-4", "--rtol", "1e-3"]
        for mode in a.modes.split(","):
            r = subprocess.run([a.rlx, "run", path, "-b", a.backend, "-m", mode] + tol + args, capture_output=True, text=True, timeout=300)
            runs += 1
            if r.returncode != 0:
                fails.append(f"{name} {a.backend}/{mode}: exit {r.returncode}: {r.stderr.strip()[-500:]}")
    return onnx_build.finish(f"signal ops ({a.backend})", runs, fails)


if __name__ == "__main__":
    sys.exit(main())
