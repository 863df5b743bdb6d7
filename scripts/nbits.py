"""4-bit blocked weights in ONNX Runtime's com.microsoft MatMulNBits layout, shared by the tests
and benchmarks that write them (tests/onnx/decoder_export.py, bench/generate_bench.py,
bench/nbits_decode.py).

Layout (bits 4): y = a . dequant(B)^T with, for a weight W [K, N] of MatMul(a, W),
  B            uint8 [N, n_blocks, block / 2]: column n's K values in blocks of `block`, two per
               byte, the even k in the low nibble
  scales       f32 [N * n_blocks]
  zero_points  uint8 [N * ceil(n_blocks / 2)]: two per byte, the even block in the low nibble
  w[k, n] = (q - zp) * scale of k's block in column n.
quantize_blocks() follows MLAS's asymmetric block quantization (what ONNX Runtime's
MatMulNBitsQuantizer writes): per block the range [min(w, 0), max(w, 0)] split in 15 steps,
zero point round(-min / scale) in [0, 15], q = clamp(round(w / scale) + zp, 0, 15).
"""
import numpy as np


def shapes(N, K, block=32):
    """(B, scales, zero_points) shapes of a [K, N] weight; K a multiple of `block`."""
    kb = -(-K // block)
    return (N, kb, block // 2), (N * kb,), (N * ((kb + 1) // 2),)


def pack_nibbles(q):
    """uint8 values 0..15 along the last axis (even length) -> bytes, the even one in the low nibble."""
    q = np.asarray(q, np.uint8)
    return (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)


def quantize_blocks(w, block=32):
    """W [K, N] f32 -> (B, scales, zero_points) in the MatMulNBits layout (module docstring)."""
    w = np.asarray(w, np.float32)
    K, N = w.shape
    if K % block:
        raise ValueError(f"K {K} is not a multiple of the block {block}")
    kb = K // block
    blocks = w.T.reshape(N, kb, block)
    lo = np.minimum(blocks.min(-1), 0).astype(np.float32)
    hi = np.maximum(blocks.max(-1), 0).astype(np.float32)
    scale = ((hi - lo) / np.float32(15)).astype(np.float32)
    inv = np.where(scale != 0, np.float32(1) / np.where(scale != 0, scale, 1), 0).astype(np.float32)
    zp = np.clip(np.round(-lo * inv), 0, 15).astype(np.uint8)
    q = np.clip(np.round(blocks * inv[..., None]) + zp[..., None], 0, 15).astype(np.uint8)
    zpad = np.zeros((N, kb + kb % 2), np.uint8)
    zpad[:, :kb] = zp
    return pack_nibbles(q), scale.reshape(-1), pack_nibbles(zpad).reshape(-1)


def dequantize(B, scales, zero_points, K, block=32):
    """The W [K, N] f32 that MatMulNBits multiplies by: (q - zp) * scale, in f32."""
    N, kb, _ = B.shape
    q = np.stack([B & 15, B >> 4], axis=-1).reshape(N, kb, block).astype(np.float32)
    zp = np.stack([zero_points.reshape(N, -1) & 15, zero_points.reshape(N, -1) >> 4], axis=-1).reshape(N, -1)[:, :kb]
    w = (q - zp[..., None].astype(np.float32)) * scales.reshape(N, kb)[..., None].astype(np.float32)
    return np.ascontiguousarray(w.reshape(N, kb * block)[:, :K].T)


def qdq(w, block=32):
    """W [K, N] through 4 bits and back: the values a MatMulNBits node of quantize_blocks(W) uses."""
    return dequantize(*quantize_blocks(w, block), K=w.shape[0], block=block)


def weight_bytes(N, K, block=32):
    """Bytes a product with this weight reads: packed values, f32 scales, packed zero points."""
    b, s, z = shapes(N, K, block)
    return int(np.prod(b)) + 4 * s[0] + z[0]


def rewrite_matmuls(model, block=32, keep_outputs=()):
    """Rewrites, in place, every MatMul of `model` (an onnx.ModelProto; its subgraphs too, the
    branches of an If reading the outer graph's initializers) whose B is a 2-D f32 initializer
    with K a multiple of `block` into com.microsoft MatMulNBits (bits 4, block `block`), as ONNX
    Runtime's MatMulNBitsQuantizer does: inputs B_Q4, B_scales, B_zero_points. A MatMul whose
    output is named in `keep_outputs` (the lm_head's `logits`) stays f32. An initializer used by
    several MatMuls is quantized once; those no longer used are removed.
    Returns {initializer name: (N, K)} of the weights quantized."""
    from onnx import helper, numpy_helper

    done = {}

    def walk(graph, outer):
        inits = dict(outer)
        inits.update({t.name: (graph, t) for t in graph.initializer})
        for node in graph.node:
            for attr in node.attribute:
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    walk(sub, inits)
        for node in graph.node:
            if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx") or node.output[0] in keep_outputs:
                continue
            hit = inits.get(node.input[1])
            if hit is None:
                continue
            owner, t = hit
            if t.data_type != 1 or len(t.dims) != 2 or t.dims[0] % block:
                continue
            K, N = t.dims
            name = t.name
            if name not in done:
                b, s, z = quantize_blocks(numpy_helper.to_array(t), block)
                owner.initializer.extend([numpy_helper.from_array(b, name + "_Q4"), numpy_helper.from_array(s, name + "_scales"),
                                          numpy_helper.from_array(z, name + "_zero_points")])
                done[name] = (N, K)
            new = helper.make_node("MatMulNBits", [node.input[0], name + "_Q4", name + "_scales", name + "_zero_points"],
                                   list(node.output), name=(node.name or name) + "_Q4", domain="com.microsoft",
                                   K=K, N=N, bits=4, block_size=block)
            node.CopyFrom(new)

    walk(model.graph, {})
    used = set()

    def uses(graph):
        for node in graph.node:
            used.update(node.input)
            for attr in node.attribute:
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    uses(sub)

    uses(model.graph)

    def prune(graph):
        keep = [t for t in graph.initializer if t.name not in done or t.name in used]
        del graph.initializer[:]
        graph.initializer.extend(keep)
        for node in graph.node:
            for attr in node.attribute:
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    prune(sub)

    prune(model.graph)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return done
