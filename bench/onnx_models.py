#!/usr/bin/python3
"""The PyTorch models of tests/onnx/torch_models.py at benchmark sizes, exported with
torch.onnx.export (dynamic axes, as a user would), then timed in rlx (compiled, CPU) and in
ONNX Runtime side by side with bench/compare_ort.py (same file, same inputs, same threads,
warm-up, medians over rounds that alternate the two).

  bench/onnx_models.py [--models bert,llama,cnn] [--out DIR] [--rounds 3] [--reps 10] [--threads 2]

Sizes: bert = one BERT-base encoder layer (d 768, 12 heads, FFN 3072, embeddings, padding
mask) at batch 1, seq 128; llama = one Llama-style decoder layer (d 1024, 16 query / 4 kv
heads, FFN 2816, RoPE, causal mask, vocab 2048 head) at batch 1, seq 128; cnn = the small CNN
(Conv + BatchNorm + ReLU, depthwise conv, pools, linear head) at batch 8, 3 x 128 x 128.
"""
import argparse
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "onnx"))


def export(name, out):
    import torch
    import torch_models
    c = torch_models.classes()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if name == "bert":
        mod = c["BertLayer"](vocab=1000, d=768, heads=12, ff=3072, max_pos=512)
        ids = torch.randint(0, 1000, (1, 128), generator=g)
        mask = torch.ones(1, 128, dtype=torch.long)
        mask[0, 120:] = 0
        inputs, in_names, out_names = (ids, mask), ["input_ids", "attention_mask"], ["hidden"]
        dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}, "hidden": {0: "batch", 1: "seq"}}
    elif name == "llama":
        mod = c["LlamaLayer"](vocab=2048, d=1024, heads=16, kv_heads=4, ff=2816)
        inputs, in_names, out_names = (torch.randint(0, 2048, (1, 128), generator=g),), ["input_ids"], ["logits"]
        dyn = {"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
    elif name == "cnn":
        mod = c["CNN"]()
        for bn in (mod.b1, mod.b2, mod.b3):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
        inputs, in_names, out_names = (torch.randn(8, 3, 128, 128, generator=g),), ["image"], ["logits"]
        dyn = {"image": {0: "batch"}, "logits": {0: "batch"}}
    else:
        raise SystemExit(f"onnx_models: unknown model {name}")
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
    model = os.path.join(d, "model.onnx")
    mod.eval()
    with torch.no_grad():
        torch.onnx.export(mod, inputs, model, input_names=in_names, output_names=out_names, dynamic_axes=dyn,
                          opset_version=14, do_constant_folding=True)
    for n, t in zip(in_names, inputs):
        np.save(os.path.join(d, "inputs", n + ".npy"), t.numpy())
    return model, os.path.join(d, "inputs")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="bert,llama,cnn")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench-onnx-models"))
    ap.add_argument("--rounds", default="3")
    ap.add_argument("--reps", default="10")
    ap.add_argument("--warmup", default="2")
    ap.add_argument("--threads", default=os.environ.get("RLX_NUM_THREADS", "2"))
    ap.add_argument("--rlx", default=os.path.join(ROOT, "build", "apps", "rlx", "rlx"))
    ap.add_argument("--export-only", action="store_true")
    a = ap.parse_args()
    status = 0
    for name in a.models.split(","):
        model, inputs = export(name, a.out)
        if a.export_only:
            print(model)
            continue
        cmd = [sys.executable, os.path.join(HERE, "compare_ort.py"), "--onnx", model, "--inputs", inputs, "--rlx", a.rlx,
               "--rounds", a.rounds, "--reps", a.reps, "--warmup", a.warmup, "--threads", a.threads]
        print("$ " + " ".join(cmd), flush=True)
        status |= subprocess.run(cmd).returncode
    return status


if __name__ == "__main__":
    sys.exit(main())
