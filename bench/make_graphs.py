#!/usr/bin/env python3
"""Writes the standard benchmark graphs into bench/graphs/ (rlx.graph v1).

The JSON files are checked in; run this only after changing a shape here:
    python3 bench/make_graphs.py
Shapes are fixed (no symbolic dims) so `--input x=random:1` needs no --dim.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "graphs")

# Llama-style block (the same numbers as bench/compare_torch.py uses).
D_MODEL, HQ, HKV, HEAD, FFN = 1024, 16, 4, 64, 2816
SEQ, CACHE = 256, 256
EPS = 1e-5


def graph(name, nodes, outputs):
    return {"format": "rlx.graph", "version": 1, "name": name, "nodes": nodes, "outputs": outputs}


def write(name, g):
    path = os.path.join(OUT, name + ".json")
    with open(path, "w") as f:
        f.write("{\n")
        f.write(f'  "format": "rlx.graph",\n  "version": 1,\n  "name": {json.dumps(g["name"])},\n  "nodes": [\n')
        f.write(",\n".join("    " + json.dumps(n) for n in g["nodes"]))
        f.write(f'\n  ],\n  "outputs": {json.dumps(g["outputs"])}\n}}\n')
    print("wrote", os.path.relpath(path))


def matmul(n):
    return graph(f"matmul_{n}", [
        {"id": "a", "op": "input", "shape": [n, n]},
        {"id": "b", "op": "input", "shape": [n, n]},
        {"id": "c", "op": "matmul", "inputs": ["a", "b"]},
    ], ["c"])


def gelu_chain(name="gelu_chain", batch=4):
    # GELU, erf form, written out as elementwise nodes.
    return graph(name, [
        {"id": "x", "op": "input", "shape": [batch, 1000, 4096]},
        {"id": "inv_sqrt2", "op": "constant", "shape": [], "value": 0.7071067811865476},
        {"id": "one", "op": "constant", "shape": [], "value": 1.0},
        {"id": "half", "op": "constant", "shape": [], "value": 0.5},
        {"id": "scaled", "op": "mul", "inputs": ["x", "inv_sqrt2"]},
        {"id": "erf", "op": "erf", "inputs": ["scaled"]},
        {"id": "erf_plus_1", "op": "add", "inputs": ["erf", "one"]},
        {"id": "x_times", "op": "mul", "inputs": ["erf_plus_1", "x"]},
        {"id": "y", "op": "mul", "inputs": ["x_times", "half"]},
    ], ["y"])


def conv3x3(C=64, HW=56):
    # A ResNet stage-1 3x3 convolution (conv family, CPU path: im2col + sgemm).
    return graph(f"conv3x3_{C}", [
        {"id": "x", "op": "input", "shape": [1, C, HW, HW]},
        {"id": "w", "op": "param", "shape": [C, C, 3, 3]},
        {"id": "y", "op": "conv2d", "inputs": ["x", "w"], "attrs": {"pads": [1, 1, 1, 1]}},
    ], ["y"])


def conv3x3_gemm(C=64, HW=56):
    # The one GEMM conv3x3 performs: [C, C*9] x [C*9, HW*HW], the baseline for its im2col overhead.
    return graph(f"conv3x3_{C}_gemm", [
        {"id": "w", "op": "input", "shape": [C, C * 9]},
        {"id": "cols", "op": "input", "shape": [C * 9, HW * HW]},
        {"id": "y", "op": "matmul", "inputs": ["w", "cols"]},
    ], ["y"])


def dwconv3x3(C=256, HW=56):
    # A MobileNet depthwise 3x3 convolution (the direct depthwise path).
    return graph(f"dwconv3x3_{C}", [
        {"id": "x", "op": "input", "shape": [1, C, HW, HW]},
        {"id": "w", "op": "param", "shape": [C, 1, 3, 3]},
        {"id": "y", "op": "conv2d", "inputs": ["x", "w"], "attrs": {"pads": [1, 1, 1, 1], "groups": C}},
    ], ["y"])


def params():
    return [
        {"id": "w_input_layernorm", "op": "param", "shape": [D_MODEL], "name": "input_layernorm.weight"},
        {"id": "w_q", "op": "param", "shape": [HQ * HEAD, D_MODEL], "name": "self_attn.q_proj.weight"},
        {"id": "w_k", "op": "param", "shape": [HKV * HEAD, D_MODEL], "name": "self_attn.k_proj.weight"},
        {"id": "w_v", "op": "param", "shape": [HKV * HEAD, D_MODEL], "name": "self_attn.v_proj.weight"},
        {"id": "w_o", "op": "param", "shape": [D_MODEL, HQ * HEAD], "name": "self_attn.o_proj.weight"},
        {"id": "w_post_attention_layernorm", "op": "param", "shape": [D_MODEL], "name": "post_attention_layernorm.weight"},
        {"id": "w_gate", "op": "param", "shape": [FFN, D_MODEL], "name": "mlp.gate_proj.weight"},
        {"id": "w_up", "op": "param", "shape": [FFN, D_MODEL], "name": "mlp.up_proj.weight"},
        {"id": "w_down", "op": "param", "shape": [D_MODEL, FFN], "name": "mlp.down_proj.weight"},
    ]


def block(name, seq, cache):
    """cache == 0: prefill block over `seq` tokens; cache > 0: one decode step (seq 1) over a KV cache."""
    n = [{"id": "x", "op": "input", "shape": [1, seq, D_MODEL]}]
    rope_q, rope_k = ["q_t"], ["k_t"]
    if cache:
        n += [
            {"id": "pos", "op": "input", "shape": [], "dtype": "i32"},
            {"id": "k_cache", "op": "input", "shape": [1, HKV, cache, HEAD]},
            {"id": "v_cache", "op": "input", "shape": [1, HKV, cache, HEAD]},
        ]
        rope_q, rope_k = ["q_t", "pos"], ["k_t", "pos"]
    n += params()
    n += [
        {"id": "attn_norm", "op": "rms_norm", "inputs": ["x", "w_input_layernorm"], "attrs": {"eps": EPS}},
        {"id": "q", "op": "linear", "inputs": ["attn_norm", "w_q"]},
        {"id": "k", "op": "linear", "inputs": ["attn_norm", "w_k"]},
        {"id": "v", "op": "linear", "inputs": ["attn_norm", "w_v"]},
        {"id": "q_heads", "op": "reshape", "inputs": ["q"], "attrs": {"shape": [1, seq, HQ, HEAD]}},
        {"id": "k_heads", "op": "reshape", "inputs": ["k"], "attrs": {"shape": [1, seq, HKV, HEAD]}},
        {"id": "v_heads", "op": "reshape", "inputs": ["v"], "attrs": {"shape": [1, seq, HKV, HEAD]}},
        {"id": "q_t", "op": "transpose", "inputs": ["q_heads"], "attrs": {"perm": [0, 2, 1, 3]}},
        {"id": "k_t", "op": "transpose", "inputs": ["k_heads"], "attrs": {"perm": [0, 2, 1, 3]}},
        {"id": "v_t", "op": "transpose", "inputs": ["v_heads"], "attrs": {"perm": [0, 2, 1, 3]}},
        {"id": "q_rope", "op": "rope", "inputs": rope_q},
        {"id": "k_rope", "op": "rope", "inputs": rope_k},
    ]
    keys, values = "k_rope", "v_t"
    if cache:
        n += [
            {"id": "k_all", "op": "concat", "inputs": ["k_cache", "k_rope"], "attrs": {"axis": 2}},
            {"id": "v_all", "op": "concat", "inputs": ["v_cache", "v_t"], "attrs": {"axis": 2}},
        ]
        keys, values = "k_all", "v_all"
    n += [
        {"id": "attn", "op": "attention", "inputs": ["q_rope", keys, values], "attrs": {"causal": True}},
        {"id": "attn_t", "op": "transpose", "inputs": ["attn"], "attrs": {"perm": [0, 2, 1, 3]}},
        {"id": "attn_merged", "op": "reshape", "inputs": ["attn_t"], "attrs": {"shape": [1, seq, HQ * HEAD]}},
        {"id": "o", "op": "linear", "inputs": ["attn_merged", "w_o"]},
        {"id": "attn_residual", "op": "add", "inputs": ["x", "o"]},
        {"id": "mlp_norm", "op": "rms_norm", "inputs": ["attn_residual", "w_post_attention_layernorm"],
         "attrs": {"eps": EPS}},
        {"id": "gate_lin", "op": "linear", "inputs": ["mlp_norm", "w_gate"]},
        {"id": "up_lin", "op": "linear", "inputs": ["mlp_norm", "w_up"]},
        {"id": "gate_act", "op": "silu", "inputs": ["gate_lin"]},
        {"id": "swiglu", "op": "mul", "inputs": ["gate_act", "up_lin"]},
        {"id": "down_lin", "op": "linear", "inputs": ["swiglu", "w_down"]},
        {"id": "y", "op": "add", "inputs": ["attn_residual", "down_lin"]},
    ]
    return graph(name, n, ["y"])


def big_block(name, d, hq, hkv, head, ffn, seq, cache=0):
    """The same block at other sizes (the GPU benchmarks: d 4096 is Llama-3-8B's layer; the d-2048
    decode step is TinyLlama-1.1B's layer)."""
    global D_MODEL, HQ, HKV, HEAD, FFN
    saved = D_MODEL, HQ, HKV, HEAD, FFN
    D_MODEL, HQ, HKV, HEAD, FFN = d, hq, hkv, head, ffn
    try:
        return block(name, seq, cache)
    finally:
        D_MODEL, HQ, HKV, HEAD, FFN = saved


def gemv(n, k):
    # One decode-step linear: x [1, k] times a weight [n, k] (streams n*k*4 bytes).
    return graph(f"gemv_{n}x{k}", [
        {"id": "x", "op": "input", "shape": [1, k]},
        {"id": "w", "op": "input", "shape": [n, k]},
        {"id": "y", "op": "linear", "inputs": ["x", "w"]},
    ], ["y"])


def rowwise(name, op, rows, cols, attrs=None):
    nodes = [{"id": "x", "op": "input", "shape": [rows, cols]}]
    if op == "rms_norm":
        nodes.append({"id": "w", "op": "input", "shape": [cols]})
        nodes.append({"id": "y", "op": op, "inputs": ["x", "w"], "attrs": attrs or {}})
    else:
        nodes.append({"id": "y", "op": op, "inputs": ["x"], "attrs": attrs or {}})
    return graph(name, nodes, ["y"])


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    write("matmul_1024", matmul(1024))
    write("matmul_2048", matmul(2048))
    write("gelu_chain", gelu_chain())
    write("decoder_block", block("decoder_block", SEQ, 0))
    write("decode_step", block("decode_step", 1, CACHE))
    # bf16 decode against f32 at a size whose weights (176 MB f32) do not fit the caches.
    write("decode_step_2048", big_block("decode_step_2048", 2048, 32, 4, 64, 5632, 1, CACHE))
    # GPU-sized graphs (docs/benchmarks.md, "Vulkan on the lent NVIDIA H100").
    write("matmul_4096", matmul(4096))
    write("gelu_chain_32", gelu_chain("gelu_chain_32", 32))
    write("decoder_block_4096", big_block("decoder_block_4096", 4096, 32, 8, 128, 14336, 512))
    write("gemv_14336x4096", gemv(14336, 4096))
    write("softmax_8192", rowwise("softmax_8192", "softmax", 8192, 8192, {"axis": -1}))
    write("rms_norm_8192", rowwise("rms_norm_8192", "rms_norm", 8192, 8192, {"eps": EPS}))
    write("transpose_8192", rowwise("transpose_8192", "transpose", 8192, 8192, {"perm": [1, 0]}))
    write("conv3x3_64", conv3x3())
    write("conv3x3_64_gemm", conv3x3_gemm())
    write("dwconv3x3_256", dwconv3x3())
    # One line longer than kMaxWalk: Vulkan's work-group passes (kernels_long.cpp, session 15).
    for op in ("argmax", "cumsum"):
        for tag, n in (("1m", 1 << 20), ("16m", 1 << 24)):
            write(f"{op}_{tag}", rowwise(f"{op}_{tag}", op, 1, n, {"axis": 1}))
