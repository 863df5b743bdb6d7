#!/usr/bin/python3
"""Quantized ONNX models run through `rlx run` and checked against ONNX Runtime.

  * bert_dynq: a BERT-style encoder layer (torch.onnx.export, random weights, padding mask)
    rewritten as ONNX Runtime's `quantize_dynamic` does it (reimplemented here, since the
    Python onnxruntime package is not installed): every MatMul with a constant weight becomes
    DynamicQuantizeLinear(A) + MatMulInteger(A_q, W_q int8 symmetric per tensor) + Cast + Mul
    by A_scale · W_scale. The attention products (no constant weight) stay float.
  * resnet18_qdq: torchvision's ResNet-18 (random weights and BatchNorm statistics, exported
    by torch.onnx, BatchNorm folded by the exporter) with QuantizeLinear/DequantizeLinear pairs
    inserted before every Conv and Gemm input (uint8 per tensor, ranges calibrated on the test
    image through forward hooks) and int8 per-output-channel symmetric weights behind a
    DequantizeLinear (axis 0): the QDQ form of static quantization.
  * nbits_level4 (CPU only): MatMulNBits with accuracy_level 4 (int8 activations), which
    differs from the f32-activation result by up to 0.7% of the outputs here: the reference is
    ONNX Runtime's level-4 result.
  * isnet_quint8 (only with --isnet: a 136 MB package, and seconds per run): the
    uint8 ISNet of the npm package @imgly/background-removal-data (its "small" model: 119
    DynamicQuantizeLinear + 119 ConvInteger, 1x3x1024x1024), reassembled from the package's
    chunks and SHA-256 checked; its reference is computed live by ONNX Runtime.

The generated models are deterministic (fixed seeds) and SHA-256 checked; the references for
them are ONNX Runtime's outputs (onnxruntime-node, CPU), kept in tests/onnx/quant_models/ so
CI need not download ONNX Runtime. `--ort` re-checks them against a live ONNX Runtime run,
`--regen` rewrites them.

Tolerances (why not 1e-4): rlx and ONNX Runtime compute the same integer products exactly,
but a value that is quantized from a float sum (an activation in the QDQ net, the dynamic
quantization of a layer's input) may sit within rounding error of a code boundary; the two
float sums differ in their last bits (order of summation, fused kernels), and a code then
differs by one step. That step is one scale (1/255 of the tensor's range) on that element,
and it propagates to the layers after it. The per-model tolerances below are the largest such
effects seen, with margin; a wrong operator gives errors of the size of the outputs.

  tests/onnx/quant_models.py --rlx build/apps/rlx/rlx [--backend cpu] [--modes lazy,compiled] [--ort] [--regen] [--isnet] [--time]
"""
import argparse
import hashlib
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REFS = os.path.join(HERE, "quant_models")
ORT_PACKAGE = "onnxruntime-node@1.30.0"
ISNET_PACKAGE = "@imgly/background-removal-data@1.4.5"
ISNET_SHA256 = "7001d60734fdc112dd9c062635fb59cd401fb82a9d4213134bce4dbd655c803a"

# name: (atol, rtol)
TOL = {"bert_dynq": (1e-4, 1e-4), "blocked_q21": (1e-6, 0), "contrib_ops": (1e-4, 1e-4), "nbits_level4": (1e-4, 1e-4), "resnet18_qdq": (0.1, 0), "isnet_quint8": (0, 0)}
# ISNet's output is a soft mask (a sigmoid): code flips (see above) move the logits slightly,
# which shows only where the sigmoid is steep, on the mask's soft edge. Checked: the mask at
# 0.5 agrees (IoU), the mean error is small, and 99% of the pixels are within 0.03.
ISNET_CHECK = {"iou": 0.995, "mean": 2e-3, "p99": 0.03}


def sha256_bytes(b):
    return hashlib.sha256(b).hexdigest()


def npm_install(cache, packages):
    """Installs [(spec, probe)] into cache, all in one `npm install`: npm prunes what a later
    `--no-save` install does not name, so installing them one after the other would remove
    the first."""
    if all(os.path.exists(os.path.join(cache, "node_modules", probe, "package.json")) for _, probe in packages):
        return
    os.makedirs(cache, exist_ok=True)
    specs = [spec for spec, _ in packages]
    print(f"quant models: npm install {' '.join(specs)} into {cache}", file=sys.stderr)
    r = subprocess.run(["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund", "--no-save", "--prefix", cache] + specs,
                       capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        sys.exit(f"quant models: npm install {' '.join(specs)} failed:\n{r.stderr[-2000:]}")


# ---------------------------------------------------------------------------------------
# bert_dynq

def build_bert(path):
    import torch
    import torch.nn as nn
    import onnx
    from onnx import helper, numpy_helper, TensorProto

    torch.manual_seed(0)

    class Layer(nn.Module):
        def __init__(self, d=64, h=4, f=256):
            super().__init__()
            self.h, self.dh = h, d // h
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.f1, self.f2 = nn.Linear(d, f), nn.Linear(f, d)

        def forward(self, x, mask):
            B, S, D = x.shape
            sp = lambda t: t.view(B, S, self.h, self.dh).transpose(1, 2)
            q, k, v = sp(self.q(x)), sp(self.k(x)), sp(self.v(x))
            s = q @ k.transpose(-1, -2) / self.dh ** 0.5 + (1.0 - mask[:, None, None, :]) * -10000.0
            a = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, S, D)
            x = self.ln1(x + self.o(a))
            return self.ln2(x + self.f2(torch.nn.functional.gelu(self.f1(x))))

    m = Layer().eval()
    x = torch.randn(2, 16, 64)
    mask = torch.ones(2, 16)
    tmp = path + ".float.onnx"
    torch.onnx.export(m, (x, mask), tmp, input_names=["x", "mask"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}},
                      opset_version=13)
    model = onnx.load(tmp)
    os.remove(tmp)
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    nodes = []
    nq = 0
    for n in g.node:
        if n.op_type == "MatMul" and n.input[1] in inits and len(inits[n.input[1]].dims) == 2:
            w = numpy_helper.to_array(inits[n.input[1]]).astype(np.float32)
            # onnxruntime.quantization.quantize_dynamic's defaults: weights QInt8, symmetric,
            # per tensor, range [-127, 127], zero point 0; scale = max|w| / 127
            absmax = float(np.abs(w).max())
            scale = np.float32(absmax * 2 / 254)
            wq = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
            p = f"{n.input[1]}_q"
            g.initializer.extend([numpy_helper.from_array(wq, p + "_W"), numpy_helper.from_array(np.array(scale, np.float32), p + "_scale"),
                                  numpy_helper.from_array(np.array(0, np.int8), p + "_zp")])
            a = n.input[0]
            o = n.output[0]
            nodes += [
                helper.make_node("DynamicQuantizeLinear", [a], [f"{o}_aq", f"{o}_as", f"{o}_azp"], name=f"{o}_DQL"),
                helper.make_node("MatMulInteger", [f"{o}_aq", p + "_W", f"{o}_azp", p + "_zp"], [f"{o}_i32"], name=f"{o}_MMI"),
                helper.make_node("Cast", [f"{o}_i32"], [f"{o}_f"], to=TensorProto.FLOAT, name=f"{o}_Cast"),
                helper.make_node("Mul", [f"{o}_as", p + "_scale"], [f"{o}_s"], name=f"{o}_ScaleMul"),
                helper.make_node("Mul", [f"{o}_f", f"{o}_s"], [o], name=f"{o}_Mul"),
            ]
            nq += 1
        else:
            nodes.append(n)
    assert nq == 6, nq
    del g.node[:]
    g.node.extend(nodes)
    used = {i for n in g.node for i in n.input}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    onnx.checker.check_model(model)
    data = model.SerializeToString()
    open(path, "wb").write(data)
    rs = np.random.RandomState(7)
    xs = rs.randn(2, 16, 64).astype(np.float32)
    ms = np.ones((2, 16), np.float32)
    ms[1, 11:] = 0
    return {"x": xs, "mask": ms}, "y"


# ---------------------------------------------------------------------------------------
# resnet18_qdq

def build_resnet(path):
    import torch
    import torchvision
    import onnx
    from onnx import helper, numpy_helper

    torch.manual_seed(0)
    m = torchvision.models.resnet18(weights=None, num_classes=1000).eval()
    g = torch.Generator().manual_seed(1)
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.copy_(torch.randn(mod.num_features, generator=g) * 0.1)
            mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
            mod.weight.data.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
            mod.bias.data.copy_(torch.randn(mod.num_features, generator=g) * 0.1)
    rs = np.random.RandomState(3)
    x = rs.rand(1, 3, 96, 96).astype(np.float32) * 2 - 1
    # calibration: each Conv/Linear module's input range, in execution order
    ranges = []
    hooks = [mod.register_forward_hook(lambda mod, inp, out: ranges.append((mod.weight.shape, float(inp[0].min()), float(inp[0].max()))))
             for mod in m.modules() if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear))]
    with torch.no_grad():
        m(torch.from_numpy(x))
    for h in hooks:
        h.remove()
    tmp = path + ".float.onnx"
    torch.onnx.export(m, torch.from_numpy(x), tmp, input_names=["image"], output_names=["logits"], opset_version=13)
    model = onnx.load(tmp)
    os.remove(tmp)
    gr = model.graph
    inits = {t.name: t for t in gr.initializer}
    nodes, k = [], 0
    for n in gr.node:
        if n.op_type in ("Conv", "Gemm"):
            wshape, lo, hi = ranges[k]
            w = numpy_helper.to_array(inits[n.input[1]]).astype(np.float32)
            assert tuple(w.shape) == tuple(wshape), (n.name, w.shape, wshape)
            k += 1
            # activation: uint8 per tensor, asymmetric, range including 0
            lo, hi = min(lo, 0.0), max(hi, 0.0)
            s = np.float32((hi - lo) / 255.0)
            zp = np.uint8(np.clip(np.round(-lo / s), 0, 255))
            a = n.input[0]
            p = f"{n.name}_in"
            gr.initializer.extend([numpy_helper.from_array(np.array(s, np.float32), p + "_scale"),
                                   numpy_helper.from_array(np.array(zp, np.uint8), p + "_zp")])
            nodes += [helper.make_node("QuantizeLinear", [a, p + "_scale", p + "_zp"], [p + "_q"], name=p + "_Q"),
                      helper.make_node("DequantizeLinear", [p + "_q", p + "_scale", p + "_zp"], [p + "_dq"], name=p + "_DQ")]
            # weights: int8 per output channel, symmetric [-127, 127]
            flat = np.abs(w.reshape(w.shape[0], -1)).max(1)
            ws = (np.maximum(flat, 1e-8) / 127).astype(np.float32)
            wq = np.clip(np.round(w / ws.reshape((-1,) + (1,) * (w.ndim - 1))), -127, 127).astype(np.int8)
            q = f"{n.name}_w"
            gr.initializer.extend([numpy_helper.from_array(wq, q + "_q"), numpy_helper.from_array(ws, q + "_scale"),
                                   numpy_helper.from_array(np.zeros(w.shape[0], np.int8), q + "_zp")])
            nodes.append(helper.make_node("DequantizeLinear", [q + "_q", q + "_scale", q + "_zp"], [q + "_dq"], name=q + "_DQ", axis=0))
            n.input[0] = p + "_dq"
            n.input[1] = q + "_dq"
        nodes.append(n)
    assert k == len(ranges) == 21, (k, len(ranges))
    del gr.node[:]
    gr.node.extend(nodes)
    used = {i for n in gr.node for i in n.input}
    keep = [t for t in gr.initializer if t.name in used]
    del gr.initializer[:]
    gr.initializer.extend(keep)
    onnx.checker.check_model(model)
    open(path, "wb").write(model.SerializeToString())
    return {"image": x}, "logits"


# ---------------------------------------------------------------------------------------
# contrib_ops: ONNX Runtime's com.microsoft MatMulNBits (4-bit, blocks of 32 with a short last
# block and packed zero points plus a bias; blocks of 16 without zero points),
# MatMulIntegerToFloat and DynamicQuantizeMatMul, and DynamicQuantizeLinear of an all-zero
# tensor (ONNX Runtime: scale 1, zero point 0); ConvInteger and QLinearConv in the forms the
# node tests do not cover.

def build_contrib(path):
    import onnx
    from onnx import helper, numpy_helper, TensorProto
    rs = np.random.RandomState(5)
    M, K, N = 6, 80, 24
    inits, nodes = [], []

    def nbits(name, bs, with_zp):
        kb = (K + bs - 1) // bs
        w = rs.randn(N, kb * bs).astype(np.float32)
        q = rs.randint(0, 16, size=(N, kb * bs)).astype(np.uint8)
        q[:, K:] = 0
        packed = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(N, kb, bs // 2)
        scales = (rs.rand(N * kb).astype(np.float32) * 0.1 + 0.01)
        inits.extend([numpy_helper.from_array(packed, name + "_B"), numpy_helper.from_array(scales, name + "_scales")])
        ins = ["a", name + "_B", name + "_scales"]
        if with_zp:
            zq = rs.randint(0, 16, size=(N, kb + (kb % 2))).astype(np.uint8)
            zp = (zq[:, 0::2] | (zq[:, 1::2] << 4))
            inits.append(numpy_helper.from_array(zp, name + "_zp"))
            ins.append(name + "_zp")
            bias = rs.randn(N).astype(np.float32)
            inits.append(numpy_helper.from_array(bias, name + "_bias"))
            ins += ["", name + "_bias"]
        nodes.append(helper.make_node("MatMulNBits", ins, [name], domain="com.microsoft", K=K, N=N, bits=4, block_size=bs))

    nbits("nbits32", 32, True)
    nbits("nbits16", 16, False)
    # MatMulIntegerToFloat: u8 x i8 with per-column b scale and zero point, bias
    bq = rs.randint(-128, 128, size=(K, N)).astype(np.int8)
    inits += [numpy_helper.from_array(bq, "bq"), numpy_helper.from_array((rs.rand(N) * 0.01 + 0.001).astype(np.float32), "b_scale"),
              numpy_helper.from_array(rs.randint(-5, 5, size=N).astype(np.int8), "b_zp"),
              numpy_helper.from_array(np.array(0.02, np.float32), "a_scale"), numpy_helper.from_array(np.array(131, np.uint8), "a_zp"),
              numpy_helper.from_array(rs.randn(N).astype(np.float32), "bias")]
    nodes.append(helper.make_node("MatMulIntegerToFloat", ["aq", "bq", "a_scale", "b_scale", "a_zp", "b_zp", "bias"], ["mmitf"], domain="com.microsoft"))
    nodes.append(helper.make_node("DynamicQuantizeMatMul", ["a", "bq", "b_scale", "b_zp", "bias"], ["dqmm"], domain="com.microsoft"))
    nodes.append(helper.make_node("DynamicQuantizeLinear", ["zeros"], ["z_q", "z_scale", "z_zp"]))
    # ConvInteger as ISNet writes it (a DynamicQuantizeLinear zero point, padding 1), and
    # grouped, strided and dilated (ORT refuses per-channel ConvInteger weight zero points); a 1-D one; QLinearConv
    # with int8 per-channel weights and an int32 bias
    C, H, Wd = 8, 11, 13
    inits += [numpy_helper.from_array(rs.randint(0, 256, size=(16, C, 3, 3)).astype(np.uint8), "cw"),
              numpy_helper.from_array(np.array(128, np.uint8), "cw_zp"),
              numpy_helper.from_array(rs.randint(0, 256, size=(8, 2, 3, 2)).astype(np.uint8), "gw"),
              numpy_helper.from_array(np.array(131, np.uint8), "gw_zp"),
              numpy_helper.from_array(np.array(3, np.uint8), "x_zp3"),
              numpy_helper.from_array(rs.randint(0, 256, size=(4, C, 3)).astype(np.uint8), "w1d"),
              numpy_helper.from_array(rs.randint(-127, 128, size=(6, C, 3, 3)).astype(np.int8), "qw"),
              numpy_helper.from_array((rs.rand(6) * 0.01 + 0.002).astype(np.float32), "qw_scale"),
              numpy_helper.from_array(np.zeros(6, np.int8), "qw_zp"),
              numpy_helper.from_array(rs.randint(-2000, 2000, size=6).astype(np.int32), "qb"),
              numpy_helper.from_array(np.array(0.05, np.float32), "qx_scale"), numpy_helper.from_array(np.array(0.3, np.float32), "qy_scale"),
              numpy_helper.from_array(np.array(128, np.uint8), "qy_zp")]
    nodes += [helper.make_node("DynamicQuantizeLinear", ["img"], ["img_q", "img_s", "img_zp"]),
              helper.make_node("ConvInteger", ["img_q", "cw", "img_zp", "cw_zp"], ["conv_dyn"], pads=[1, 1, 1, 1]),
              helper.make_node("ConvInteger", ["img_q", "gw", "x_zp3", "gw_zp"], ["conv_grp"], group=4, strides=[2, 1], dilations=[1, 2], pads=[2, 0, 1, 3]),
              helper.make_node("Reshape", ["img_q", "shape1d"], ["img1d"]),
              helper.make_node("ConvInteger", ["img1d", "w1d", "img_zp"], ["conv_1d"], auto_pad="SAME_UPPER", strides=[2]),
              helper.make_node("QLinearConv", ["img_q", "qx_scale", "img_zp", "qw", "qw_scale", "qw_zp", "qy_scale", "qy_zp", "qb"], ["qconv"], pads=[1, 1, 1, 1], strides=[2, 2])]
    inits.append(numpy_helper.from_array(np.array([1, C, H * Wd], np.int64), "shape1d"))
    g = helper.make_graph(nodes, "contrib", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [M, K]),
                                             helper.make_tensor_value_info("aq", TensorProto.UINT8, [M, K]),
                                             helper.make_tensor_value_info("zeros", TensorProto.FLOAT, [3, 4]),
                                             helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, C, H, Wd])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, [M, N]) for o in ("nbits32", "nbits16", "mmitf", "dqmm")] +
                          [helper.make_tensor_value_info("z_q", TensorProto.UINT8, [3, 4]), helper.make_tensor_value_info("z_scale", TensorProto.FLOAT, []),
                           helper.make_tensor_value_info("z_zp", TensorProto.UINT8, [])] +
                          [helper.make_tensor_value_info(o, TensorProto.INT32, None) for o in ("conv_dyn", "conv_grp", "conv_1d")] +
                          [helper.make_tensor_value_info("qconv", TensorProto.UINT8, None)], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    open(path, "wb").write(model.SerializeToString())
    ins = {"a": rs.randn(M, K).astype(np.float32), "aq": rs.randint(0, 256, size=(M, K)).astype(np.uint8), "zeros": np.zeros((3, 4), np.float32),
           "img": (rs.randn(1, C, H, Wd) * 2 + 0.5).astype(np.float32)}
    return ins, ["nbits32", "nbits16", "mmitf", "dqmm", "z_q", "z_scale", "z_zp", "conv_dyn", "conv_grp", "conv_1d", "qconv"]


# ---------------------------------------------------------------------------------------
# nbits_level4: MatMulNBits with accuracy_level 4 (ONNX Runtime's CompInt8: activations
# quantized per block to int8, integer products), blocks of 32 with packed zero points and of
# 64 without, K a multiple of 128 (where rlx runs level 4; elsewhere it computes level 0).

def build_nbits_level4(path):
    from onnx import helper, numpy_helper, TensorProto
    rs = np.random.RandomState(17)
    M, K, N = 3, 256, 40
    inits, nodes = [], []
    for name, bs, with_zp in (("l4_32", 32, True), ("l4_64", 64, False)):
        kb = K // bs
        q = rs.randint(0, 16, size=(N, K)).astype(np.uint8)
        inits += [numpy_helper.from_array((q[:, 0::2] | (q[:, 1::2] << 4)).reshape(N, kb, bs // 2), name + "_B"),
                  numpy_helper.from_array((rs.rand(N * kb).astype(np.float32) * 0.1 + 0.01), name + "_scales")]
        ins = ["a", name + "_B", name + "_scales"]
        if with_zp:
            zq = rs.randint(0, 16, size=(N, kb)).astype(np.uint8)
            inits.append(numpy_helper.from_array(zq[:, 0::2] | (zq[:, 1::2] << 4), name + "_zp"))
            ins.append(name + "_zp")
        nodes.append(helper.make_node("MatMulNBits", ins, [name], domain="com.microsoft", K=K, N=N, bits=4, block_size=bs,
                                      accuracy_level=4))
    g = helper.make_graph(nodes, "nbits_level4", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [M, K])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, [M, N]) for o in ("l4_32", "l4_64")], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    open(path, "wb").write(model.SerializeToString())
    return {"a": rs.randn(M, K).astype(np.float32)}, ["l4_32", "l4_64"]


# ---------------------------------------------------------------------------------------
# blocked_q21: opset 21's blocked QuantizeLinear/DequantizeLinear (onnx 1.12 writes no node
# test for them): int8 weights in blocks of 32 along K with zero points (a short last block),
# uint8 quantization in blocks of 16 along axis 0, and output_dtype without a zero point.

def build_blocked(path):
    from onnx import helper, numpy_helper, TensorProto
    rs = np.random.RandomState(9)
    q = rs.randint(-128, 128, size=(8, 72)).astype(np.int8)
    inits = [numpy_helper.from_array(q, "wq"), numpy_helper.from_array((rs.rand(8, 3) * 0.1 + 0.01).astype(np.float32), "ws"),
             numpy_helper.from_array(rs.randint(-10, 10, size=(8, 3)).astype(np.int8), "wz"),
             numpy_helper.from_array((rs.rand(3, 6) * 0.05 + 0.01).astype(np.float32), "xs"),
             numpy_helper.from_array(rs.randint(100, 150, size=(3, 6)).astype(np.uint8), "xz"),
             numpy_helper.from_array((rs.rand(40, 2) * 0.05 + 0.01).astype(np.float32), "ys")]
    nodes = [helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=1, block_size=32),
             helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], axis=0, block_size=16),
             helper.make_node("QuantizeLinear", ["x", "ys"], ["yq"], axis=1, block_size=4, output_dtype=TensorProto.INT8)]
    g = helper.make_graph(nodes, "blocked", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [40, 6])],
                          [helper.make_tensor_value_info("w", TensorProto.FLOAT, [8, 72]), helper.make_tensor_value_info("xq", TensorProto.UINT8, [40, 6]),
                           helper.make_tensor_value_info("yq", TensorProto.INT8, [40, 6])], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    open(path, "wb").write(model.SerializeToString())
    x = (rs.randn(40, 6) * 3).astype(np.float32)
    return {"x": x}, ["w", "xq", "yq"]


# name: (builder, SHA-256 of the generated model)
GENERATED = {
    "bert_dynq": (build_bert, "0776699dd5a553c5c0620e5e95737b8699c9e9bea60412c429e6dba6fb95ae5a"),
    "blocked_q21": (build_blocked, "a515b7ec18cfac8dc7b7b5f8ebb79fe0f6bd9e534916bf8dfdfb0a578955821b"),
    "contrib_ops": (build_contrib, "7afb3c31cd124eb1de8a24538a976d868d578ec6d80b997e7b903f9b92d89dbe"),
    "nbits_level4": (build_nbits_level4, "4082839df855a1d0184b1ed5e0e65b110c98513c809de73a1b2e681c92cc0a54"),
    "resnet18_qdq": (build_resnet, "dbdb0acabe7db10c1ea08256fd90df5be30c94af57b76d03e8b1166cbfe69cd7"),
}


# Checked on the CPU only: accuracy_level is the lowest accuracy ONNX Runtime allows, and
# Vulkan computes MatMulNBits with f32 activations at every level (ORT's level 0 results).
CPU_ONLY = {"nbits_level4": "accuracy_level 4 (int8 activations) is a CPU kernel; Vulkan keeps f32 activations"}


def isnet_model(cache):
    import json
    dist = os.path.join(cache, "node_modules", "@imgly", "background-removal-data", "dist")
    path = os.path.join(cache, "work", "isnet_quint8", "model.onnx")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        res = json.load(open(os.path.join(dist, "resources.json")))["/models/small"]
        with open(path + ".tmp", "wb") as f:
            for c in res["chunks"]:
                f.write(open(os.path.join(dist, c["hash"]), "rb").read())
        os.rename(path + ".tmp", path)
    h = hashlib.sha256(open(path, "rb").read()).hexdigest()
    if h != ISNET_SHA256:
        sys.exit(f"isnet: {path} has SHA-256 {h}, expected {ISNET_SHA256} (the package changed?)")
    rs = np.random.RandomState(11)
    # a photo-like image: a textured bright ellipse (the object) on a smooth darker background,
    # 0..255, normalised as the package does ((v - 128) / 256)
    yy, xx = np.mgrid[0:1024, 0:1024] / 1024.0
    bg = 60 + 40 * np.stack([np.sin(3 * xx + c) * np.cos(2 * yy - c) for c in range(3)])
    obj = ((xx - 0.5) / 0.22) ** 2 + ((yy - 0.55) / 0.35) ** 2 < 1
    fg = 190 + 30 * np.stack([np.sin(40 * xx * (c + 1)) * np.sin(25 * yy) for c in range(3)])
    img = np.where(obj[None], fg, bg)[None] + rs.randn(1, 3, 1024, 1024) * 4
    img = (np.clip(img, 0, 255) - 128) / 256
    return path, {"input": img.astype(np.float32)}, "output"


def ort_run(cache, model, ins, out_dir, outs, repeats=0):
    env = dict(os.environ, NODE_PATH=os.path.join(cache, "node_modules"))
    cmd = ["node", os.path.join(HERE, "ort_run.js"), model, out_dir] + [f"{n}={p}" for n, p in ins]
    if repeats:
        cmd += ["--time", str(repeats)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"ONNX Runtime: {r.stderr.strip()[-800:]}")
    return {o: np.load(os.path.join(out_dir, o.replace(":", "_") + ".npy")) for o in outs}, r.stdout.strip()


def rlx_time(rlx, model, backend, ins, reps):
    """rlx's median per-run time in compiled mode (`rlx bench`), in ms."""
    import json
    r = subprocess.run([rlx, "bench", model, "--backends", backend, "--modes", "compiled", "--reps", str(reps), "--warmup", "3",
                        "--format", "json"] + [x for n, p in ins for x in ("--input", f"{n}=@{p}")],
                       capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        return float("nan")
    return json.loads(r.stdout)["rows"][0]["median_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--cache", default=None, help="work and npm directory (default: BUILD/onnx-npm)")
    ap.add_argument("--ort", action="store_true", help="install onnxruntime-node and re-check the kept references live")
    ap.add_argument("--regen", action="store_true", help="rewrite tests/onnx/quant_models/ from ONNX Runtime (implies --ort)")
    ap.add_argument("--isnet", action="store_true", help="also the ISNet uint8 model from npm (136 MB download; live ONNX Runtime)")
    ap.add_argument("--only-isnet", action="store_true")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--modes", default="lazy,compiled")
    ap.add_argument("--time", action="store_true", help="print ONNX Runtime's and rlx's per-run times (rlx bench, compiled)")
    a = ap.parse_args()
    rlx = os.path.abspath(a.rlx)
    cache = a.cache or os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(rlx))), "onnx-npm")
    live = a.ort or a.regen or a.isnet or a.only_isnet or a.time
    if live:
        pkgs = [(ORT_PACKAGE, "onnxruntime-node")]
        if a.isnet or a.only_isnet:
            pkgs.append((ISNET_PACKAGE, "@imgly/background-removal-data"))
        npm_install(cache, pkgs)
    os.makedirs(REFS, exist_ok=True)
    status, ran = 0, []
    todo = [] if a.only_isnet else list(GENERATED)
    if a.isnet or a.only_isnet:
        todo.append("isnet_quint8")
    for name in todo:
        if name in CPU_ONLY and a.backend != "cpu":
            print(f"not run on {a.backend}: {name} ({CPU_ONLY[name]})")
            continue
        work = os.path.join(cache, "work", name)
        os.makedirs(work, exist_ok=True)
        if name == "isnet_quint8":
            model, inputs, outs = isnet_model(cache)
        else:
            model = os.path.join(work, "model.onnx")
            inputs, outs = GENERATED[name][0](model)
            h = hashlib.sha256(open(model, "rb").read()).hexdigest()
            if h != GENERATED[name][1] and not a.regen:
                print(f"FAIL {name}: the generated model has SHA-256 {h}, the kept reference is for {GENERATED[name][1]} "
                      "(another torch/onnx version? check with --regen and update the digest)")
                status = 1
                continue
        outs = [outs] if isinstance(outs, str) else outs
        ins = []
        for iname, arr in inputs.items():
            p = os.path.join(work, f"{iname}.npy")
            np.save(p, arr)
            ins.append((iname, p))
        kept = name != "isnet_quint8"
        refs = {o: os.path.join(REFS if kept else work, f"{name}.{o}.npy") for o in outs}
        ort_ms = None
        if live:
            try:
                got_ort, timing = ort_run(cache, model, ins, os.path.join(work, "ort"), outs, repeats=(3 if name == "isnet_quint8" else 20) if a.time else 0)
            except RuntimeError as e:
                print(f"FAIL {name}: {e}")
                status = 1
                continue
            if timing:
                import json
                ort_ms = json.loads(timing.splitlines()[-1])["median_ms"]
            for o, out in got_ort.items():
                if a.regen or not kept:
                    np.save(refs[o], out)
                    if kept:
                        print(f"{name}: wrote {os.path.relpath(refs[o])} {out.shape} {out.dtype}")
                elif not os.path.exists(refs[o]) or not np.allclose(np.load(refs[o]), out, atol=1e-6, rtol=1e-5):
                    print(f"FAIL {name}: the kept reference for {o} differs from ONNX Runtime's output now (the generated model changed? --regen)")
                    status = 1
        missing = [o for o in outs if not os.path.exists(refs[o])]
        if missing:
            print(f"FAIL {name}: no reference for {', '.join(missing)} (run with --regen)")
            status = 1
            continue
        atol, rtol = TOL[name]
        for mode in a.modes.split(","):
            got_paths = {o: os.path.join(work, f"rlx_{a.backend}_{mode}.{o}.npy") for o in outs}
            cmd = [rlx, "run", model, "-b", a.backend, "-m", mode] + [x for o in outs for x in ("--output", f"{o}={got_paths[o]}")] + \
                  [x for n, p in ins for x in ("--input", f"{n}=@{p}")]
            t0 = time.time()
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
            dt = time.time() - t0
            ran.append(f"{name}/{mode}")
            fr = [l.split("first run ")[1].split(",")[0] for l in r.stderr.splitlines() if "first run " in l]
            if r.returncode != 0:
                status = 1
                print(f"FAIL {name} {mode}: exit {r.returncode}: {r.stderr.strip()[-800:]}")
                continue
            for o in outs:
                want, got = np.load(refs[o]), np.load(got_paths[o])
                if got.dtype != want.dtype or got.shape != want.shape:
                    status = 1
                    print(f"FAIL {name} {mode} {o}: {got.dtype}{list(got.shape)}, ONNX Runtime gives {want.dtype}{list(want.shape)}")
                    continue
                err = np.abs(got.astype(np.float64) - want.astype(np.float64))
                if name == "isnet_quint8":  # a mask: see ISNET_CHECK
                    ma, mb = want > 0.5, got > 0.5
                    iou = (ma & mb).sum() / max(1, (ma | mb).sum())
                    p99 = float(np.percentile(err, 99))
                    line = (f"{name} {a.backend} {mode} {o}: max abs err {err.max():.3g}, mean {err.mean():.2g}, 99th percentile {p99:.3g}, "
                            f"{(err > 1 / 255).mean() * 100:.2f}% of pixels beyond 1/255; mask (> 0.5) IoU {iou:.4f}; {dt:.1f} s (process), "
                            f"first run {fr[0] if fr else '?'}")
                    ok = iou >= ISNET_CHECK["iou"] and err.mean() <= ISNET_CHECK["mean"] and p99 <= ISNET_CHECK["p99"]
                    status |= 0 if ok else 1
                    print(("" if ok else "FAIL ") + line + f" (needs {ISNET_CHECK})")
                    continue
                bad = err > atol + rtol * np.abs(want.astype(np.float64))
                line = (f"{name} {a.backend} {mode} {o}: max abs err {err.max():.3g} (outputs up to {np.abs(want.astype(np.float64)).max():.3g}), "
                        f"{int(bad.sum())} of {want.size} beyond atol {atol} rtol {rtol}; {dt:.1f} s (process), first run {fr[0] if fr else '?'}")
                if bad.any():
                    status = 1
                    print("FAIL " + line)
                else:
                    print(line)
        if a.time:
            reps = 3 if name == "isnet_quint8" else 20
            print(f"{name} time per run (median, after 3 warm-up runs): ONNX Runtime {ort_ms:.2f} ms (2 threads); "
                  f"rlx {a.backend} compiled {rlx_time(rlx, model, a.backend, ins, reps):.2f} ms")
    print(f"quantized models ({a.backend}): {len(ran)} runs" + (" all match ONNX Runtime" if status == 0 else " (failures above)"))
    return status


if __name__ == "__main__":
    sys.exit(main())
