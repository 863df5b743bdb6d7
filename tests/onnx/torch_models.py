#!/usr/bin/python3
"""PyTorch models exported with torch.onnx.export (dynamic axes), run through `rlx run`,
compared with PyTorch's own outputs (Debian's python3-torch; the reference is PyTorch's
forward pass, never rlx's output).

Models: an MLP (GELU, softmax), a small CNN (Conv + BatchNorm + ReLU, depthwise conv,
max/avg pooling), a BERT-style encoder layer with a padding mask, and a Llama-style decoder
layer (RMSNorm, RoPE, grouped-query attention, causal mask, SiLU-gated MLP) written the way
Hugging Face writes them, a conv net exported with its BatchNormalization nodes kept
(TrainingMode.PRESERVE: torch.onnx otherwise folds them into the convs itself), recurrent nets
(a 2-layer bidirectional LSTM tagger with batch_first, a GRU given its initial state), grid
sampling (bilinear and nearest, zeros and border padding), and ten of
torchvision's architectures (torchvision_models below). Each model is
run in eager, lazy and compiled mode at two input shapes (the dynamic axes are bound from the
inputs). In compiled mode the plan (--dump-plan) must show the fused ops the exporters'
decomposed forms are rewritten into (LayerNorm, RMSNorm, GELU, MatMul + bias, attention,
Conv + BatchNorm: lib/passes/patterns.cpp). Exports are cached in --out.

A model whose ONNX operators need registry ops this build lacks (`rlx onnx-ops --json`) is
reported as NOT RUN with the missing ops and does not fail; any other mismatch or error fails.

  tests/onnx/torch_models.py --rlx build/apps/rlx/rlx [--out DIR] [--backend cpu] [-k NAME] [--published | --video | --video-small] [--timeout S]
"""
import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

ATOL, RTOL = 1e-4, 1e-4


def classes():
    """The model classes (also used at benchmark sizes by bench/onnx_models.py)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = nn.Linear(16, 32), nn.Linear(32, 10)

        def forward(self, x):
            return torch.softmax(self.l2(F.gelu(self.l1(x))), dim=-1)

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
            self.c2, self.b2 = nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.BatchNorm2d(8)  # depthwise
            self.c3, self.b3 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16)
            self.fc = nn.Linear(16, 5)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2)
            x = F.relu6(self.b2(self.c2(x)))
            x = F.avg_pool2d(F.relu(self.b3(self.c3(x))), 2, ceil_mode=True)
            x = F.adaptive_avg_pool2d(x, 1).flatten(1)
            return self.fc(x)

    class BertLayer(nn.Module):
        def __init__(self, vocab=64, d=32, heads=4, ff=64, max_pos=32):
            super().__init__()
            self.h, self.dh = heads, d // heads
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(max_pos, d)
            self.ln0, self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
            self.q, self.k, self.v, self.o = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
            self.f1, self.f2 = nn.Linear(d, ff), nn.Linear(ff, d)

        def split(self, t):
            b, s, _ = t.shape
            return t.view(b, s, self.h, self.dh).transpose(1, 2)

        def forward(self, input_ids, attention_mask):
            b, s = input_ids.shape
            pos = torch.arange(s, dtype=torch.long).unsqueeze(0).expand(b, s)
            x = self.ln0(self.tok(input_ids) + self.pos(pos))
            ext = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * torch.finfo(torch.float32).min
            q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
            att = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dh) + ext
            ctx = torch.matmul(torch.softmax(att, dim=-1), v).transpose(1, 2).reshape(b, s, -1)
            x = self.ln1(x + self.o(ctx))
            return self.ln2(x + self.f2(F.gelu(self.f1(x))))

    class RMSNorm(nn.Module):
        def __init__(self, d, eps=1e-6):
            super().__init__()
            self.weight, self.eps = nn.Parameter(torch.randn(d) * 0.1 + 1), eps

        def forward(self, x):
            var = x.pow(2).mean(-1, keepdim=True)
            return self.weight * (x * torch.rsqrt(var + self.eps))

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    class LlamaLayer(nn.Module):
        def __init__(self, vocab=64, d=32, heads=4, kv_heads=2, ff=48):
            super().__init__()
            self.h, self.kvh, self.dh = heads, kv_heads, d // heads
            self.emb = nn.Embedding(vocab, d)
            self.n1, self.n2, self.nf = RMSNorm(d), RMSNorm(d), RMSNorm(d)
            self.q = nn.Linear(d, heads * self.dh, bias=False)
            self.k = nn.Linear(d, kv_heads * self.dh, bias=False)
            self.v = nn.Linear(d, kv_heads * self.dh, bias=False)
            self.o = nn.Linear(d, d, bias=False)
            self.gate, self.up, self.down = nn.Linear(d, ff, bias=False), nn.Linear(d, ff, bias=False), nn.Linear(ff, d, bias=False)
            self.lm = nn.Linear(d, vocab, bias=False)
            inv = 1.0 / (10000 ** (torch.arange(0, self.dh, 2).float() / self.dh))
            self.register_buffer("inv_freq", inv, persistent=False)

        def repeat_kv(self, x, n):
            b, kvh, s, dh = x.shape
            return x[:, :, None, :, :].expand(b, kvh, n, s, dh).reshape(b, kvh * n, s, dh)

        def forward(self, input_ids):
            b, s = input_ids.shape
            x = self.emb(input_ids)
            pos = torch.arange(s, dtype=torch.long).unsqueeze(0)
            freqs = pos[:, :, None].float() * self.inv_freq[None, None, :]
            embf = torch.cat((freqs, freqs), dim=-1)
            cos, sin = embf.cos()[:, None], embf.sin()[:, None]
            hsd = self.n1(x)
            q = self.q(hsd).view(b, s, self.h, self.dh).transpose(1, 2)
            k = self.k(hsd).view(b, s, self.kvh, self.dh).transpose(1, 2)
            v = self.v(hsd).view(b, s, self.kvh, self.dh).transpose(1, 2)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k, v = self.repeat_kv(k, self.h // self.kvh), self.repeat_kv(v, self.h // self.kvh)
            mask = torch.full((s, s), torch.finfo(torch.float32).min).triu(1)
            att = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.dh) + mask[None, None]
            att = torch.softmax(att.float(), dim=-1)
            x = x + self.o(torch.matmul(att, v).transpose(1, 2).reshape(b, s, -1))
            hsd = self.n2(x)
            x = x + self.down(F.silu(self.gate(hsd)) * self.up(hsd))
            return self.lm(self.nf(x))

    class ConvBN(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
            self.c2, self.b2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)

        def forward(self, x):
            return F.relu6(self.b2(self.c2(F.relu(self.b1(self.c1(x))))))

    class LstmTagger(nn.Module):  # a sequence tagger: embedding, 2-layer bidirectional LSTM, per-token classes
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(64, 12)
            self.rnn = nn.LSTM(12, 16, num_layers=2, bidirectional=True, batch_first=True)
            self.out = nn.Linear(32, 5)

        def forward(self, input_ids):
            return self.out(self.rnn(self.emb(input_ids))[0])

    class GruEncoder(nn.Module):  # a GRU given its initial state, returning the outputs and the final state
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(8, 10, num_layers=1)

        def forward(self, x, h0):
            y, h = self.rnn(x, h0)
            return torch.tanh(y), h

    class Warp(nn.Module):  # spatial-transformer style sampling: bilinear with zeros, nearest with border
        def forward(self, x, grid):
            a = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
            b = F.grid_sample(x, grid, mode="nearest", padding_mode="border", align_corners=True)
            return a + 2 * b

    class Cnn3d(nn.Module):  # a small video CNN: every 3-D conv and pool form, BatchNorm3d, a transposed conv
        def __init__(self):
            super().__init__()
            self.c1, self.b1 = nn.Conv3d(3, 8, (3, 5, 3), stride=(1, 2, 2), padding=(1, 2, 1)), nn.BatchNorm3d(8)
            self.c2 = nn.Conv3d(8, 8, 3, padding=(2, 1, 2), dilation=(2, 1, 2), groups=2, bias=False)
            self.c3 = nn.Conv3d(8, 8, 3, padding=1, groups=8)  # depthwise
            self.up = nn.ConvTranspose3d(8, 6, (2, 3, 3), stride=(2, 2, 1), padding=(0, 1, 1), output_padding=(1, 1, 0),
                                         groups=2)
            self.fc = nn.Linear(6, 5)

        def forward(self, x):
            x = F.relu(self.b1(self.c1(x)))
            x = F.max_pool3d(x, (2, 3, 3), stride=(1, 2, 2), padding=(1, 1, 1), ceil_mode=True)
            x = F.relu(self.c2(x)) + self.c3(x)
            x = F.avg_pool3d(x, 3, stride=(2, 1, 2), padding=1, ceil_mode=True, count_include_pad=False)
            x = torch.tanh(self.up(x))
            x = F.avg_pool3d(x, (2, 2, 2), padding=(1, 0, 1), count_include_pad=True)
            return self.fc(F.adaptive_avg_pool3d(x, 1).flatten(1))

    return {"MLP": MLP, "CNN": CNN, "BertLayer": BertLayer, "LlamaLayer": LlamaLayer, "ConvBN": ConvBN,
            "LstmTagger": LstmTagger, "GruEncoder": GruEncoder, "Warp": Warp, "Cnn3d": Cnn3d}


def build_models():
    import torch
    c = classes()
    MLP, CNN, BertLayer, LlamaLayer, ConvBN = c["MLP"], c["CNN"], c["BertLayer"], c["LlamaLayer"], c["ConvBN"]
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)

    def ids(shape, hi):
        return torch.randint(0, hi, shape, generator=g)

    def bert_inputs(b, s):
        mask = torch.ones(b, s, dtype=torch.long)
        mask[0, s - 2:] = 0  # padding at the end of the first sequence
        return (ids((b, s), 64), mask)

    cnn, convbn = CNN(), ConvBN()
    for bn in (cnn.b1, cnn.b2, cnn.b3, convbn.b1, convbn.b2):  # non-trivial running statistics
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.data.uniform_(0.5, 1.5)
        bn.bias.data.uniform_(-0.3, 0.3)
    return {**torchvision_models(g), **{
        # name: (module, input names, output names, dynamic axes, [inputs at shape 1, at shape 2], opset)
        "mlp": (MLP(), ["x"], ["probs"], {"x": {0: "batch"}, "probs": {0: "batch"}},
                [(torch.randn(3, 16, generator=g),), (torch.randn(7, 16, generator=g),)], 14),
        "cnn": (cnn, ["image"], ["logits"], {"image": {0: "batch"}, "logits": {0: "batch"}},
                [(torch.randn(2, 3, 16, 16, generator=g),), (torch.randn(1, 3, 16, 16, generator=g),)], 13),
        # BatchNormalization kept in the file (not folded by the exporter): rlx folds it.
        "conv_bn": (convbn, ["image"], ["features"], {"image": {0: "batch"}, "features": {0: "batch"}},
                    [(torch.randn(2, 3, 12, 12, generator=g),), (torch.randn(1, 3, 12, 12, generator=g),)], 13,
                    {"training": torch.onnx.TrainingMode.PRESERVE}),
        "bert_layer": (BertLayer(), ["input_ids", "attention_mask"], ["hidden"],
                       {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}, "hidden": {0: "batch", 1: "seq"}},
                       [bert_inputs(2, 8), bert_inputs(3, 5)], 14),
        "llama_layer": (LlamaLayer(), ["input_ids"], ["logits"],
                        {"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}},
                        [(ids((2, 7), 64),), (ids((1, 12), 64),)], 14),
        "lstm_tagger": (c["LstmTagger"](), ["input_ids"], ["tags"],
                        {"input_ids": {0: "batch", 1: "seq"}, "tags": {0: "batch", 1: "seq"}},
                        [(ids((2, 9), 64),), (ids((3, 4), 64),)], 14),
        # grid points up to 1.3 outside [-1, 1]: the padding modes matter
        "warp": (c["Warp"](), ["x", "grid"], ["y"], {"x": {0: "batch"}, "grid": {0: "batch"}, "y": {0: "batch"}},
                 [(torch.randn(2, 3, 5, 7, generator=g), torch.rand(2, 4, 6, 2, generator=g) * 2.6 - 1.3),
                  (torch.randn(1, 3, 5, 7, generator=g), torch.rand(1, 4, 6, 2, generator=g) * 2.6 - 1.3)], 16),
        # 3-D convolution and pooling (issue 30): strides, dilations, groups, pads, ceil_mode, count_include_pad
        "cnn3d": (with_bn_statistics(c["Cnn3d"](), g), ["clip"], ["logits"], {"clip": {0: "batch", 2: "time"}, "logits": {0: "batch"}},
                  [(torch.randn(2, 3, 6, 12, 10, generator=g),), (torch.randn(1, 3, 5, 12, 10, generator=g),)], 14,
                  {"training": torch.onnx.TrainingMode.PRESERVE}),  # BatchNormalization kept: rlx folds it into conv3d
        "gru_encoder": (c["GruEncoder"](), ["x", "h0"], ["y", "h"],
                        {"x": {0: "seq", 1: "batch"}, "h0": {1: "batch"}, "y": {0: "seq", 1: "batch"}, "h": {1: "batch"}},
                        [(torch.randn(6, 2, 8, generator=g), torch.randn(1, 2, 10, generator=g)),
                         (torch.randn(11, 1, 8, generator=g), torch.randn(1, 1, 10, generator=g))], 14),
    }}


def torchvision_models(g):
    """torchvision's own architectures (Debian's python3-torchvision), randomly initialised, with
    non-trivial BatchNorm statistics: the classic CNNs at their published configurations (small
    images, 10 classes) and the transformers and ConvNeXt at reduced widths and depths (the same
    code paths: patch embedding, class token, shifted windows with their ScatterND mask and
    torch.roll, LayerNorm over channels, layer scale)."""
    import torch
    import torchvision.models as tvm
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    from torchvision.models.densenet import DenseNet
    from torchvision.models.swin_transformer import SwinTransformer
    from torchvision.models.vision_transformer import VisionTransformer

    def img(b, h, w=None):
        return (torch.randn(b, 3, h, w or h, generator=g),)

    spatial = {"image": {0: "batch", 2: "height", 3: "width"}, "logits": {0: "batch"}}
    batch = {"image": {0: "batch"}, "logits": {0: "batch"}}
    cnn_sets = [img(1, 64), img(2, 48, 40)]
    models = {
        "tv_resnet18": (tvm.resnet18(num_classes=10), spatial, cnn_sets),
        "tv_mobilenet_v3_small": (tvm.mobilenet_v3_small(num_classes=10), spatial, cnn_sets),
        "tv_squeezenet1_1": (tvm.squeezenet1_1(num_classes=10), spatial, cnn_sets),
        "tv_shufflenet_v2_x0_5": (tvm.shufflenet_v2_x0_5(num_classes=10), spatial, cnn_sets),
        "tv_efficientnet_b0": (tvm.efficientnet_b0(num_classes=10), spatial, cnn_sets),
        "tv_regnet_y_400mf": (tvm.regnet_y_400mf(num_classes=10), spatial, cnn_sets),
        "tv_densenet": (DenseNet(growth_rate=8, block_config=(2, 2), num_init_features=16, num_classes=10), spatial, cnn_sets),
        "tv_convnext": (ConvNeXt([CNBlockConfig(24, 48, 2), CNBlockConfig(48, None, 2)], num_classes=10), spatial, cnn_sets),
        "tv_vit": (VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
                                     num_classes=10), batch, [img(1, 32), img(3, 32)]),
        "tv_swin": (SwinTransformer(patch_size=[2, 2], embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4],
                                    num_classes=10), batch, [img(1, 32), img(2, 32)]),
    }
    return {name: (with_bn_statistics(m, g), ["image"], ["logits"], dyn, sets, 14) for name, (m, dyn, sets) in models.items()}


def with_bn_statistics(m, g):
    """Non-trivial BatchNorm running statistics (a fresh model's are 0 and 1)."""
    import torch
    for mod in m.modules():
        if isinstance(mod, (torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)):
            mod.running_mean.uniform_(-0.3, 0.3, generator=g)
            mod.running_var.uniform_(0.5, 2.0, generator=g)
    return m


PUBLISHED = ["resnet18", "mobilenet_v2", "mobilenet_v3_small", "squeezenet1_1", "shufflenet_v2_x0_5", "efficientnet_b0",
             "densenet121", "regnet_y_400mf", "convnext_tiny", "vit_b_16", "swin_t"]


def published_models():
    """--published: torchvision's architectures at their published sizes (1000 classes, one
    224x224 image), randomly initialised. Not part of the test suite (about 700 MB of files and
    a few minutes); its result is recorded in docs/onnx.md."""
    import torch
    import torchvision.models as tvm
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(2)
    return {f"pub_{n}": (with_bn_statistics(getattr(tvm, n)(), g), ["image"], ["logits"], {},
                         [(torch.randn(1, 3, 224, 224, generator=g),)], 14) for n in PUBLISHED}


VIDEO = ["r3d_18", "mc3_18", "r2plus1d_18", "s3d"]


def video_models(small=False):
    """--video: torchvision 0.14's four video networks (3-D convolutions and pools), randomly
    initialised with non-trivial BatchNorm statistics, on one 8-frame 112x112 clip (S3D: 16 frames
    of 224x224, the least its final 2x7x7 average pool accepts). --video-small: 4 frames of 56x56
    (S3D unchanged), for lavapipe, whose direct convolution shader takes minutes per run at the
    full size. Not part of the test suite; the result is recorded in docs/onnx.md."""
    import torch
    import torchvision.models.video as tvv
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(3)
    clip = {"s3d": (1, 3, 16, 224, 224)}
    return {f"video_{n}": (with_bn_statistics(getattr(tvv, n)(num_classes=10), g), ["clip"], ["logits"], {},
                           [(torch.randn(*clip.get(n, (1, 3, 4, 56, 56) if small else (1, 3, 8, 112, 112)), generator=g),)], 14)
            for n in VIDEO}


def export(out, published=False, video=None):
    """Exports every model with its references; cached by this file's hash. video: None, "full" or "small"."""
    kind = "-published" if published else f"-video-{video}" if video else ""
    stamp = os.path.join(out, "EXPORTED-" + hashlib.sha1(open(__file__, "rb").read()).hexdigest()[:12] + kind)
    if os.path.exists(stamp):
        return
    import torch
    t0 = time.time()
    for name, (mod, in_names, out_names, dyn, sets, opset, *extra) in (published_models() if published else video_models(video == "small") if video else build_models()).items():
        mod.eval()
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        # Traced with autograd on: under no_grad, nn.MultiheadAttention (torchvision's ViT) takes
        # its fused fast path, which torch.onnx cannot export.
        torch.onnx.export(mod, sets[0], os.path.join(d, "model.onnx"), input_names=in_names, output_names=out_names,
                          dynamic_axes=dyn, opset_version=opset, do_constant_folding=True, **(extra[0] if extra else {}))
        with torch.no_grad():
            for i, inputs in enumerate(sets):
                ref = mod(*inputs)
                ref = ref if isinstance(ref, tuple) else (ref,)
                for n, t in zip(in_names, inputs):
                    np.save(os.path.join(d, f"set{i}_{n}.npy"), t.numpy())
                for n, t in zip(out_names, ref):
                    np.save(os.path.join(d, f"set{i}_{n}.ref.npy"), t.numpy())
        json.dump({"inputs": in_names, "outputs": out_names, "sets": len(sets)}, open(os.path.join(d, "meta.json"), "w"))
    open(stamp, "w").write("")
    print(f"torch models: exported in {time.time() - t0:.1f} s into {out}", file=sys.stderr)


# The fused ops each model's compiled plan must show (kernels in --dump-plan), and the
# pattern rewrites that produce them ("patterns: ..." line).
FUSED = {
    "mlp": (["gelu"], ["gelu 1"]),
    "bert_layer": (["layer_norm", "gelu", "linear", "attention"], ["attention 1", "gelu 1", "layer_norm 3", "linear 6"]),
    "llama_layer": (["rms_norm", "rope", "attention"], ["attention 1", "rms_norm 3", "rope 2"]),
    "conv_bn": (["conv2d"], ["conv2d+affine 2"]),
    "cnn3d": (["conv3d", "conv_transpose3d", "max_pool3d", "avg_pool3d"], ["conv3d+affine 1"]),
}
# The CPU packs a weight in either layout itself, so matmul + bias stays a product on the weight
# as exported (no transposed copy held beside the packed one); the bias, and the GELU after it,
# run in the product's epilogue, which the recording's summary line counts.
FUSED_CPU = {
    "bert_layer": (["layer_norm", "attention"], ["attention 1", "gelu 1", "layer_norm 3"],
                   ["6 consumers run in a product's or convolution's epilogue"]),
}


def plan_kernels(text):
    """The op names of the kernel lines of a --dump-plan text ("  k12   attention ...")."""
    ops = set()
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 2 and f[0].startswith("k") and f[0][1:].isdigit():
            ops.add(f[1])
    return ops


def onnx_ops(path):
    import onnx
    return sorted({n.op_type for n in onnx.load(path).graph.node})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--out", default=None)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--modes", default="eager,lazy,compiled")
    ap.add_argument("-k", default="")
    ap.add_argument("--published", action="store_true", help="torchvision's models at their published sizes instead (not in CI)")
    ap.add_argument("--video", action="store_true", help="torchvision's four video networks instead (not in CI)")
    ap.add_argument("--video-small", action="store_true", help="--video on smaller clips (for lavapipe)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per rlx run (default 300)")
    a = ap.parse_args()
    rlx = os.path.abspath(a.rlx)
    out = a.out or os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(rlx))), "onnx-torch-models")
    os.makedirs(out, exist_ok=True)
    video = "small" if a.video_small else "full" if a.video else None
    if a.published or video:
        out = os.path.join(out, "published" if a.published else "video" if video == "full" else "video-small")
        os.makedirs(out, exist_ok=True)
    export(out, a.published, video)
    table = json.loads(subprocess.run([rlx, "onnx-ops", "--json"], check=True, capture_output=True, text=True).stdout)
    needs = {r["op_type"]: r["needs"] for r in table}
    status, ran, notrun, fused_checked = 0, 0, [], 0
    for name in sorted(os.listdir(out)):
        d = os.path.join(out, name)
        if not os.path.isdir(d) or a.k not in name or not os.path.exists(os.path.join(d, "meta.json")):
            continue
        meta = json.load(open(os.path.join(d, "meta.json")))
        model = os.path.join(d, "model.onnx")
        missing = sorted({n for op in onnx_ops(model) for n in needs.get(op, [f"<{op} not in the table>"])})
        if missing:
            notrun.append(f"{name} (needs {', '.join(missing)})")
            continue
        for i in range(meta["sets"]):
            args = []
            for n in meta["inputs"]:
                args += ["--input", f"{n}=@{os.path.join(d, f'set{i}_{n}.npy')}"]
            for n in meta["outputs"]:
                args += ["--expect", f"{n}=@{os.path.join(d, f'set{i}_{n}.ref.npy')}"]
            for mode in a.modes.split(","):
                plan = mode == "compiled" and i == 0 and name in FUSED
                r = subprocess.run([rlx, "run", model, "-b", a.backend, "-m", mode, "--atol", str(ATOL), "--rtol", str(RTOL)] + args
                                   + (["--dump-plan"] if plan else []), capture_output=True, text=True, timeout=a.timeout)
                ran += 1
                if r.returncode != 0:
                    status = 1
                    print(f"FAIL {name} set{i} {mode}: exit {r.returncode}: {r.stderr.strip()[-600:]}")
                elif plan:
                    text = r.stdout + r.stderr
                    want = (FUSED_CPU if a.backend == "cpu" else {}).get(name, FUSED[name])
                    want_ops, want_patterns, want_text = want[0], want[1], want[2] if len(want) > 2 else []
                    missing = [op for op in want_ops if op not in plan_kernels(text)]
                    line = next((l for l in text.splitlines() if l.startswith("patterns:")), "")
                    missing += [p for p in want_patterns if p not in line]
                    missing += [t for t in want_text if t not in text]
                    fused_checked += 1
                    if missing:
                        status = 1
                        print(f"FAIL {name} compiled plan: missing {missing}; patterns line: {line!r}")
    print(f"torch.onnx.export models ({a.backend}): {ran} runs, {ran if status == 0 else 'not all'} match PyTorch "
          f"within atol {ATOL} rtol {RTOL}; {fused_checked} compiled plans show the fused ops" + (f"; NOT RUN: {'; '.join(notrun)}" if notrun else ""))
    return status


if __name__ == "__main__":
    sys.exit(main())
