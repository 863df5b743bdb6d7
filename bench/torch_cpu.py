#!/usr/bin/env python3
"""PyTorch on the CPU, the figures issue 26 compares rlx with on the lent machine's Xeon (AMX):
matmul 4096^3 in f32 and bf16 (torch.matmul), int8 through torch.ao's dynamic quantized linear
(x [4096, 4096] f32 -> Linear(4096, 4096) with int8 weights, activations quantized per call,
as ONNX Runtime's dynamic quantization does), and the f32 decoder block of
bench/graphs/decoder_block.json (d 1024, 16/4 heads of 64, FFN 2816, seq 256). One JSON line each,
medians of --reps runs after warm-up, --threads threads (default: every core).

  python3 bench/torch_cpu.py [--reps 10] [--threads N]
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpu import block_fn  # noqa: E402


def timed(fn, reps, warmup=2):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    out = lambda **k: print(json.dumps(k), flush=True)
    isa = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "?"
    out(torch=torch.__version__, threads=torch.get_num_threads(), cpu_capability=isa)
    n = 4096
    flop = 2 * n**3
    with torch.inference_mode():
        A, B = torch.randn(n, n), torch.randn(n, n)
        ms = timed(lambda: A @ B, a.reps)
        out(what="matmul 4096^3 f32", ms=ms, gflops=flop / ms / 1e6)
        Ah, Bh = A.bfloat16(), B.bfloat16()
        ms = timed(lambda: Ah @ Bh, a.reps)
        out(what="matmul 4096^3 bf16", ms=ms, gflops=flop / ms / 1e6)
        lin = torch.nn.Linear(n, n, bias=False)
        q = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(lin), {torch.nn.Linear}, dtype=torch.qint8)
        X = torch.randn(n, n)
        ms = timed(lambda: q(X), a.reps)
        out(what="int8 dynamic quantized linear 4096x4096x4096", ms=ms, gops=flop / ms / 1e6)
        fn = block_fn(1024, 16, 4, 64, 2816, 256, torch.float32, device="cpu")
        ms = timed(fn, a.reps)
        out(what="decoder block d1024 seq256 f32", ms=ms)


if __name__ == "__main__":
    main()
