#!/usr/bin/python3
"""PyTorch's figures for bench/graphs/gemv_nbits_14336x4096.json's work on the same GPU (issue 19):
the gemv 14336x4096 with f32, fp16 and bf16 weights and, where this PyTorch has it, with 4-bit
weights (torch's int4 tinygemm kernel, _weight_int4pack_mm: bf16 activations, group 32), each as
GB/s on the weight bytes it reads, beside a device copy (bytes read + written) for HBM.

  python3 bench/torch_nbits.py [--reps 50]
"""
import argparse
import json

import torch
import torch.nn.functional as F


def timed(fn, reps, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / reps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    out = lambda **k: print(json.dumps(k), flush=True)
    out(torch=torch.__version__, device=torch.cuda.get_device_name())
    N, K, G = 14336, 4096, 32
    with torch.inference_mode():
        X = torch.randn(8192, 8192, device="cuda")
        ms = timed(lambda: X.clone(), a.reps)
        out(what="device copy 256 MiB", ms=ms, gbs_rw=2 * X.numel() * 4 / ms / 1e6)
        del X
        for dt, size in [(torch.float32, 4), (torch.float16, 2), (torch.bfloat16, 2)]:
            W = torch.randn(N, K, device="cuda", dtype=dt)
            x = torch.randn(1, K, device="cuda", dtype=dt)
            ms = timed(lambda: F.linear(x, W), a.reps)
            out(what=f"gemv {N}x{K} {dt}", ms=ms, gbs_weights=N * K * size / ms / 1e6)
            del W
        try:
            q = torch.randint(0, 16, (N, K), dtype=torch.int32, device="cuda")
            packed_u8 = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)
            wp = torch.ops.aten._convert_weight_to_int4pack(packed_u8, 8)
            sz = torch.rand(K // G, N, 2, device="cuda", dtype=torch.bfloat16)
            x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
            ms = timed(lambda: torch.ops.aten._weight_int4pack_mm(x, wp, G, sz), a.reps)
            wbytes = N * K // 2 + sz.numel() * 2
            out(what=f"gemv {N}x{K} int4 (tinygemm, group {G}, bf16 scales+zeros)", ms=ms,
                gbs_weights_scales=wbytes / ms / 1e6)
        except Exception as e:  # noqa: BLE001 - report what this PyTorch lacks
            out(what="gemv int4 (tinygemm)", error=str(e).splitlines()[0][:200])


if __name__ == "__main__":
    main()
