#!/usr/bin/env python3
"""PyTorch CUDA reference figures for the Vulkan benchmarks (docs/benchmarks.md, "Vulkan on
the lent NVIDIA H100"): the same work as rlx's GPU graphs, fp32 with TF32 off, timed with
CUDA events (median of --reps after warm-up). Prints one JSON object per line.

    python3 bench/torch_gpu.py [--reps 20] [--half]

--half: the fp16 figures instead (issue 9): matmul 4096^3 (and bf16, issue 22), the d-4096 decoder's linears and the
decoder block with weights, activations and rope tables in fp16 (and bf16).
"""
import argparse
import json
import math

import torch
import torch.nn.functional as F


def timed(fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def block_fn(d, hq, hkv, head, ffn, seq, dtype=torch.float32, device="cuda"):
    g = torch.Generator(device=device).manual_seed(0)
    r = lambda *s: (torch.randn(*s, device=device, generator=g) * 0.02).to(dtype)
    W = dict(q=r(hq * head, d), k=r(hkv * head, d), v=r(hkv * head, d), o=r(d, hq * head), gate=r(ffn, d),
             up=r(ffn, d), down=r(d, ffn), n1=torch.ones(d, device=device, dtype=dtype), n2=torch.ones(d, device=device, dtype=dtype))
    x = torch.randn(1, seq, d, device=device, generator=g).to(dtype)
    pos = torch.arange(seq, device=device, dtype=torch.float32)
    inv = 10000.0 ** (-torch.arange(0, head, 2, device=device, dtype=torch.float32) / head)
    ang = pos[:, None] * inv[None, :]
    cos, sin = torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)

    def rms(t, w):
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def rope(t):  # [1, h, s, head], interleaved pairs
        t2 = t.view(*t.shape[:-1], head // 2, 2)
        a, b = t2[..., 0], t2[..., 1]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)

    def fn():
        h = rms(x, W["n1"])
        q = F.linear(h, W["q"]).view(1, seq, hq, head).transpose(1, 2)
        k = F.linear(h, W["k"]).view(1, seq, hkv, head).transpose(1, 2)
        v = F.linear(h, W["v"]).view(1, seq, hkv, head).transpose(1, 2)
        q, k = rope(q), rope(k)
        k = k.repeat_interleave(hq // hkv, 1)
        v = v.repeat_interleave(hq // hkv, 1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = a.transpose(1, 2).reshape(1, seq, hq * head)
        r1 = x + F.linear(a, W["o"])
        m = rms(r1, W["n2"])
        return r1 + F.linear(F.silu(F.linear(m, W["gate"])) * F.linear(m, W["up"]), W["down"])

    return fn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--half", action="store_true")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    out = lambda **k: print(json.dumps(k), flush=True)
    out(torch=torch.__version__, device=torch.cuda.get_device_name())
    if a.half:
        with torch.inference_mode():
            h = torch.float16
            A = torch.randn(4096, 4096, device="cuda", dtype=h)
            B = torch.randn(4096, 4096, device="cuda", dtype=h)
            ms = timed(lambda: A @ B, a.reps)
            out(what="matmul 4096^3 fp16", ms=ms, tflops=2 * 4096**3 / ms / 1e9)
            Ab, Bb = A.to(torch.bfloat16), B.to(torch.bfloat16)
            ms = timed(lambda: Ab @ Bb, a.reps)
            out(what="matmul 4096^3 bf16", ms=ms, tflops=2 * 4096**3 / ms / 1e9)
            for (m, n, k) in [(512, 4096, 4096), (512, 1024, 4096), (512, 14336, 4096), (512, 4096, 14336)]:
                X = torch.randn(m, k, device="cuda", dtype=h)
                Wt = torch.randn(n, k, device="cuda", dtype=h)
                ms = timed(lambda: F.linear(X, Wt), a.reps)
                out(what=f"linear M{m} N{n} K{k} fp16", ms=ms, tflops=2 * m * n * k / ms / 1e9)
            ms = timed(block_fn(4096, 32, 8, 128, 14336, 512, h), a.reps)
            out(what="decoder block d4096 seq512 fp16", ms=ms)
            ms = timed(block_fn(4096, 32, 8, 128, 14336, 512, torch.bfloat16), a.reps)
            out(what="decoder block d4096 seq512 bf16", ms=ms)
        return
    with torch.inference_mode():
        A = torch.randn(4096, 4096, device="cuda")
        B = torch.randn(4096, 4096, device="cuda")
        ms = timed(lambda: A @ B, a.reps)
        out(what="matmul 4096^3 fp32", ms=ms, tflops=2 * 4096**3 / ms / 1e9)
        for (m, n, k) in [(512, 4096, 4096), (512, 1024, 4096), (512, 14336, 4096), (512, 4096, 14336)]:
            X = torch.randn(m, k, device="cuda")
            Wt = torch.randn(n, k, device="cuda")
            ms = timed(lambda: F.linear(X, Wt), a.reps)
            out(what=f"linear M{m} N{n} K{k} fp32", ms=ms, tflops=2 * m * n * k / ms / 1e9)
        Wg = torch.randn(14336, 4096, device="cuda")
        xg = torch.randn(1, 4096, device="cuda")
        ms = timed(lambda: F.linear(xg, Wg), a.reps)
        out(what="gemv 14336x4096 fp32", ms=ms, weight_tbps=Wg.numel() * 4 / ms / 1e9)
        X = torch.randn(8192, 8192, device="cuda")
        ms = timed(lambda: X.clone(), a.reps)
        out(what="device copy 256 MiB", ms=ms, tbps_rw=2 * X.numel() * 4 / ms / 1e9)
        ms = timed(lambda: torch.softmax(X, -1), a.reps)
        out(what="softmax 8192x8192", ms=ms, tbps_rw=2 * X.numel() * 4 / ms / 1e9)
        ms = timed(lambda: X.t().contiguous(), a.reps)
        out(what="transpose 8192x8192", ms=ms, tbps_rw=2 * X.numel() * 4 / ms / 1e9)
        G = torch.randn(32, 1000, 4096, device="cuda")
        ms = timed(lambda: G * 0.5 * (1 + torch.erf(G * 0.7071067811865476)), a.reps)
        out(what="gelu chain 32x1000x4096 eager", ms=ms)
        del G
        ms = timed(block_fn(4096, 32, 8, 128, 14336, 512), a.reps)
        out(what="decoder block d4096 seq512 fp32", ms=ms)
        ms = timed(block_fn(1024, 16, 4, 64, 2816, 256), a.reps)
        out(what="decoder block d1024 seq256 fp32", ms=ms)
        host = torch.randn(64 << 18)  # 64 MiB pageable
        pinned = host.pin_memory()
        dev = torch.empty_like(host, device="cuda")
        for name, h in [("pageable", host), ("pinned", pinned)]:
            ms = timed(lambda: dev.copy_(h), 10)
            out(what=f"host->device 64 MiB {name}", ms=ms, gbps=64 * 2**20 / ms / 1e6)
            ms = timed(lambda: h.copy_(dev), 10)
            out(what=f"device->host 64 MiB {name}", ms=ms, gbps=64 * 2**20 / ms / 1e6)


if __name__ == "__main__":
    main()
