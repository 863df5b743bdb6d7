#!/usr/bin/python3
"""Generates the golden test cases (tests/golden/), the example graphs (graphs/) and the
malformed graphs for loader tests (tests/golden/bad/).

Expected outputs come from scripts/graphlib.py, an independent NumPy interpreter of the graph
format that computes in float64. Every case is evaluated by reading back the very bytes that are
written (graph JSON, safetensors, .npy), so the same interpreter checks every graph.

  python3 scripts/gen_goldens.py           (re)write everything (deterministic: same bytes each run)
  python3 scripts/gen_goldens.py --check   recompute and verify the files on disk are unchanged
  python3 scripts/gen_goldens.py --list    print the cases with their tolerances

Before writing, the script
  * verifies every VJP op against central finite differences in float64,
  * cross-checks rope, attention, gelu and the VJPs against independent formulations,
  * re-evaluates every case with an f32 model of the runtime and asserts that the result is
    within the case's tolerance (so the tolerances are passable by a correct f32 implementation),
  * loads each malformed graph and asserts the error names the node listed in its README.
See docs/goldens.md.
"""
import argparse
import io
import json
import math
import os
import sys
import time
import zlib

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import graphlib as gl  # noqa: E402
import goldens_conv  # noqa: E402  (cases of the convolution family)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = "tests/golden"
# The f32 model that every case's tolerance must absorb: f32 arithmetic plus this much relative
# noise (in f32 ulps) on every computing op's result.
NOISE_ULPS = 4.0

# Tolerance families: |actual - expected| <= atol + rtol * |expected|, elementwise.
FAMILIES = {
    "exact": (0.0, 0.0, "cast, integer/bool outputs: a correct implementation is bit-exact"),
    "elementwise": (1e-6, 1e-5, "arithmetic (add..minimum, neg, abs, relu, square) and shape ops: "
                                "one f32 rounding per element"),
    "transcendental": (1e-5, 1e-5, "exp/log/sqrt/rsqrt/tanh/sigmoid/silu/erf/sin/cos/pow/gelu, softmax "
                                   "family, silu/gelu VJPs: a few ulp of libm/GPU math"),
    "reduction": (1e-5, 1e-5, "sum/mean/max: f32 accumulation over up to ~100 terms, cancellation "
                              "near zero needs an absolute term"),
    "rope": (1e-5, 1e-5, "angles p*scale*base^(-2i/dims) rounded in f32, positions < 64"),
    "accumulate": (1e-4, 1e-4, "matmul/linear/attention/norms/norm VJPs and the example "
                               "graphs that chain them: f32 dot products and row statistics, any summation order"),
    # Half precision (docs/graph-format.md, compute rules). u_bf16 = 2^-7 and u_f16 = 2^-10 are the
    # largest relative spacings of neighbouring bf16 / f16 numbers (8 and 11 significant bits).
    # One op: the result is rounded once; an implementation whose f32 result differs from the
    # exact one by a few f32 ulps can land on the neighbouring half number: 1 spacing.
    "half_op_bf16": (1e-5, 2.0 ** -7, "one op with a bf16 result: one rounding to bf16 may land on the "
                                      "neighbouring number (relative spacing 2^-7)"),
    "half_op_f16": (1e-5, 2.0 ** -10, "one op with an f16 result: one rounding to f16 may land on the "
                                      "neighbouring number (relative spacing 2^-10)"),
    # Chains: each of the (at most 12) computing stages on the longest path rounds to bf16 where the
    # reference does, or not at all (fused groups, Vulkan phase 1 keep f32 inside): at most half a
    # spacing (2^-8) per stage, relative to values of order 1 (normalised activations): 12 * 2^-8.
    "half_chain_bf16": (12 * 2.0 ** -8, 12 * 2.0 ** -8, "bf16 decoder block / decode step: up to 12 "
                                                        "roundings to bf16 (2^-8 each) along the longest path"),
}


def rng_for(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def f32(a):
    return np.asarray(a, dtype=np.float32)


# ----------------------------------------------------------------------------------------
# Graph builder

class GB:
    def __init__(self, name):
        self.name = name
        self.nodes = []
        self.outs = []

    def input(self, id, shape, dtype="f32"):
        n = {"id": id, "op": "input", "shape": list(shape)}
        if dtype != "f32":
            n["dtype"] = dtype
        self.nodes.append(n)
        return id

    def param(self, id, shape, name=None, dtype="f32"):
        n = {"id": id, "op": "param", "shape": list(shape)}
        if dtype != "f32":
            n["dtype"] = dtype
        if name is not None and name != id:
            n["name"] = name
        self.nodes.append(n)
        return id

    def const(self, id, value, shape=(), dtype="f32"):
        n = {"id": id, "op": "constant", "shape": list(shape)}
        if dtype != "f32":
            n["dtype"] = dtype
        n["value"] = value
        self.nodes.append(n)
        return id

    def op(self, id, op, inputs, decl_shape=None, **attrs):
        n = {"id": id, "op": op, "inputs": list(inputs)}
        if attrs:
            n["attrs"] = attrs
        if decl_shape is not None:
            n["shape"] = list(decl_shape)
        self.nodes.append(n)
        return id

    def output(self, *ids):
        self.outs.extend(ids)

    def doc(self):
        return {"format": "rlx.graph", "version": 1, "name": self.name, "nodes": self.nodes, "outputs": self.outs}


def dump_graph(doc):
    lines = ["{"]
    for k in ("format", "version", "name"):
        if k in doc:
            lines.append(f"  {json.dumps(k)}: {json.dumps(doc[k])},")
    lines.append('  "nodes": [')
    nodes = doc["nodes"]
    for i, n in enumerate(nodes):
        lines.append("    " + json.dumps(n, separators=(", ", ": ")) + ("," if i + 1 < len(nodes) else ""))
    lines.append("  ],")
    lines.append(f'  "outputs": {json.dumps(doc["outputs"])}')
    lines.append("}")
    return ("\n".join(lines) + "\n").encode()


def npy_bytes(a):
    buf = io.BytesIO()
    np.save(buf, np.array(a, order="C", copy=True), allow_pickle=False)
    return buf.getvalue()


# ----------------------------------------------------------------------------------------
# Cases

class Case:
    def __init__(self, name, gb, inputs, params=None, family="elementwise", declare=True, desc="",
                 graph_path=None, params_path=None, inputs_dir=None):
        self.name = name
        self.gb = gb
        self.inputs = inputs          # id -> np.ndarray (storage dtype)
        self.params = params or {}    # name -> (array, dtype name in the file)
        self.family = family
        self.declare = declare        # add the inferred shape to every op node
        self.desc = desc
        self.graph_path = graph_path  # examples: repository-relative paths under graphs/
        self.params_path = params_path
        self.inputs_dir = inputs_dir


CASES = []


def add(case):
    assert all(c.name != case.name for c in CASES), case.name
    CASES.append(case)
    return case


def single(name, op, ins, attrs=None, family="elementwise", desc="", declare=True, params=None):
    """One op node 'y' over leaves. ins: list of (id, array, kind) kind in input|param|const;
    dtype follows the array (f32/i32/i64/bool)."""
    gb = GB(name)
    inputs, pdict = {}, dict(params or {})
    ids = []
    for (id, a, kind) in ins:
        a = np.asarray(a)
        dt = gl.npy_dtype_name(a)
        if kind == "input":
            gb.input(id, a.shape, dt)
            inputs[id] = a
        elif kind == "param":
            gb.param(id, a.shape, dtype=dt)
            pdict[id] = (a, dt)
        else:
            gb.const(id, a.tolist(), a.shape, dt)
        ids.append(id)
    gb.op("y", op, ids, **(attrs or {}))
    gb.output("y")
    return add(Case(name, gb, inputs, pdict, family, declare, desc or f"{op} {attrs or ''}".strip()))


def build_op_cases():
    # ---- binary elementwise, with broadcasting ----
    r = rng_for("binary")
    a = f32(r.standard_normal((2, 3, 4)))
    single("op_add", "add", [("a", a, "input"), ("b", f32(r.standard_normal((2, 3, 4))), "input")],
           desc="add, equal shapes")
    single("op_add_broadcast", "add", [("a", a, "input"), ("b", f32(r.standard_normal((4,))), "input")],
           desc="add [2,3,4] + [4]")
    single("op_sub_broadcast", "sub", [("a", f32(r.standard_normal((2, 1, 4))), "input"),
                                       ("b", f32(r.standard_normal((3, 1))), "input")],
           desc="sub [2,1,4] - [3,1] -> [2,3,4] (both sides broadcast)")
    single("op_mul_scalar_const", "mul", [("a", a, "input"), ("c", f32(0.375), "const")],
           desc="mul by a rank-0 constant")
    single("op_mul_broadcast", "mul", [("a", f32(r.standard_normal((1, 3, 1))), "input"),
                                       ("b", f32(r.standard_normal((2, 1, 5))), "input")],
           desc="mul [1,3,1] * [2,1,5]")
    single("op_div_broadcast", "div", [("a", a, "input"),
                                       ("b", f32(r.uniform(0.5, 2, (2, 3, 1)) * r.choice([-1, 1], (2, 3, 1))), "input")],
           desc="div [2,3,4] / [2,3,1]")
    single("op_pow", "pow", [("a", f32(r.uniform(0.2, 3, (3, 4))), "input"),
                             ("b", f32(r.uniform(-2, 3, (3, 4))), "input")],
           family="transcendental", desc="pow, positive base, mixed exponents")
    single("op_pow_broadcast_const", "pow", [("a", f32(r.uniform(0.2, 3, (3, 4))), "input"),
                                             ("b", f32([[2.0], [0.5], [-1.0]]), "const")],
           family="transcendental", desc="pow [3,4] ** const [3,1]")
    single("op_maximum", "maximum", [("a", a, "input"), ("b", f32(r.standard_normal((3, 1))), "input")],
           desc="maximum [2,3,4], [3,1]")
    single("op_minimum", "minimum", [("a", a, "input"), ("b", f32(r.standard_normal((1, 4))), "input")],
           desc="minimum [2,3,4], [1,4]")

    # ---- unary ----
    r = rng_for("unary")
    shp = (3, 4, 5)
    normal = f32(r.standard_normal(shp) * 1.5)
    pos = f32(r.uniform(0.05, 4.0, shp))
    trans = {"exp": normal, "log": pos, "sqrt": pos, "rsqrt": pos, "tanh": normal, "sigmoid": f32(normal * 3),
             "silu": f32(normal * 2), "erf": normal, "sin": f32(r.uniform(-6, 6, shp)),
             "cos": f32(r.uniform(-6, 6, shp))}
    for op in gl.UNARY:
        if op in trans:
            single(f"op_{op}", op, [("x", trans[op], "input")], family="transcendental", desc=op)
        else:
            single(f"op_{op}", op, [("x", normal, "input")], desc=op)
    g = f32(np.concatenate([r.standard_normal(50) * 2, [-6, -3, -1e-3, 0, 1e-3, 3, 6, 10, -10, 0.5]]))
    single("op_gelu", "gelu", [("x", g.reshape(6, 10), "input")], family="transcendental", desc="gelu erf form (default)")
    single("op_gelu_tanh", "gelu", [("x", g.reshape(6, 10), "input")], {"approximate": "tanh"},
           family="transcendental", desc="gelu tanh approximation")
    single("op_gelu_none_explicit", "gelu", [("x", g.reshape(2, 30), "input")], {"approximate": "none"},
           family="transcendental", desc="gelu approximate=none written out")

    # ---- reductions ----
    r = rng_for("reduce")
    x = f32(r.standard_normal((2, 3, 4, 5)))
    single("op_sum_all", "sum", [("x", x, "input")], family="reduction", desc="sum over all axes (default) -> scalar")
    single("op_sum_axes", "sum", [("x", x, "input")], {"axes": [1, -1]}, family="reduction",
           desc="sum axes [1,-1]")
    single("op_sum_keepdims", "sum", [("x", x, "input")], {"axes": [0, 2], "keepdims": True}, family="reduction",
           desc="sum axes [0,2] keepdims")
    single("op_mean_neg_axis_keepdims", "mean", [("x", x, "input")], {"axes": [-1], "keepdims": True},
           family="reduction", desc="mean axes [-1] keepdims")
    single("op_mean_all_keepdims", "mean", [("x", x, "input")], {"keepdims": True}, family="reduction",
           desc="mean over all axes keepdims -> [1,1,1,1]")
    single("op_mean_axes", "mean", [("x", x, "input")], {"axes": [-3, 3]}, family="reduction",
           desc="mean axes [-3,3]")
    single("op_max_all", "max", [("x", x, "input")], family="reduction", desc="max over all axes")
    single("op_max_axes_keepdims", "max", [("x", x, "input")], {"axes": [-2], "keepdims": True},
           family="reduction", desc="max axes [-2] keepdims")

    # ---- softmax ----
    r = rng_for("softmax")
    x = f32(r.standard_normal((2, 3, 7)) * 3)
    single("op_softmax", "softmax", [("x", x, "input")], family="transcendental", desc="softmax axis -1 (default)")
    single("op_softmax_axis1", "softmax", [("x", x, "input")], {"axis": 1}, family="transcendental",
           desc="softmax axis 1")
    single("op_softmax_large", "softmax", [("x", f32(r.standard_normal((4, 9)) * 20 + 80), "input")],
           family="transcendental", desc="softmax of large logits (needs max subtraction)")

    # ---- matmul ----
    r = rng_for("matmul")
    single("op_matmul", "matmul", [("a", f32(r.standard_normal((3, 16))), "input"),
                                   ("b", f32(r.standard_normal((16, 5))), "input")], family="accumulate",
           desc="matmul [3,16] x [16,5]")
    single("op_matmul_batched_broadcast", "matmul",
           [("a", f32(r.standard_normal((2, 1, 3, 8))), "input"), ("b", f32(r.standard_normal((3, 8, 5))), "input")],
           family="accumulate", desc="matmul [2,1,3,8] x [3,8,5] -> [2,3,3,5]")
    single("op_matmul_rank_broadcast", "matmul",
           [("a", f32(r.standard_normal((2, 3, 4, 8))), "input"), ("b", f32(r.standard_normal((8, 6))), "input")],
           family="accumulate", desc="matmul [2,3,4,8] x [8,6] (rank-2 b broadcast)")
    single("op_matmul_transpose_a", "matmul",
           [("a", f32(r.standard_normal((2, 8, 3))), "input"), ("b", f32(r.standard_normal((2, 8, 5))), "input")],
           {"transpose_a": True}, family="accumulate", desc="matmul transpose_a: [2,8,3]^T x [2,8,5]")
    single("op_matmul_transpose_b", "matmul",
           [("a", f32(r.standard_normal((2, 3, 8))), "input"), ("b", f32(r.standard_normal((1, 5, 8))), "input")],
           {"transpose_b": True}, family="accumulate", desc="matmul transpose_b: [2,3,8] x [1,5,8]^T")
    single("op_matmul_transpose_both", "matmul",
           [("a", f32(r.standard_normal((8, 3))), "input"), ("b", f32(r.standard_normal((2, 5, 8))), "input")],
           {"transpose_a": True, "transpose_b": True}, family="accumulate",
           desc="matmul both transposes: [8,3]^T x [2,5,8]^T -> [2,3,5]")

    # ---- linear (weights as params) ----
    r = rng_for("linear")
    x = f32(r.standard_normal((2, 3, 12)))
    w = f32(r.standard_normal((7, 12)) / math.sqrt(12))
    b = f32(r.standard_normal(7) * 0.1)
    single("op_linear_bias", "linear", [("x", x, "input"), ("w", w, "param"), ("b", b, "param")],
           family="accumulate", desc="linear x[2,3,12], w[7,12], bias[7] (params)")
    single("op_linear_nobias", "linear", [("x", x[0], "input"), ("w", w, "param")], family="accumulate",
           desc="linear without bias")
    single("op_linear_inputs", "linear", [("x", f32(r.standard_normal((5, 12))), "input"), ("w", w, "input"),
                                          ("b", b, "input")], family="accumulate",
           desc="linear with weight and bias bound as inputs")

    # ---- shape ops ----
    r = rng_for("shape")
    x = f32(r.standard_normal((2, 3, 4)))
    single("op_reshape", "reshape", [("x", x, "input")], {"shape": [4, -1]}, desc="reshape [2,3,4] -> [4,-1]")
    single("op_reshape_expand", "reshape", [("x", x, "input")], {"shape": [2, 1, 12, 1]},
           desc="reshape to [2,1,12,1]")
    single("op_transpose_default", "transpose", [("x", x, "input")], desc="transpose, default perm (reversed)")
    single("op_transpose_perm", "transpose", [("x", f32(r.standard_normal((2, 3, 4, 5))), "input")],
           {"perm": [0, 2, 1, 3]}, desc="transpose perm [0,2,1,3]")
    single("op_broadcast_to", "broadcast_to", [("x", f32(r.standard_normal((3, 1))), "input")],
           {"shape": [2, 3, 4]}, desc="broadcast_to [3,1] -> [2,3,4]")
    single("op_narrow", "narrow", [("x", x, "input")], {"axis": 1, "start": 1, "length": 2},
           desc="narrow axis 1 start 1 length 2")
    single("op_narrow_last", "narrow", [("x", x, "input")], {"axis": 2, "start": 3, "length": 1},
           desc="narrow last axis, last element")
    single("op_concat", "concat", [("a", x, "input"), ("b", f32(r.standard_normal((2, 1, 4))), "input"),
                                   ("c", f32(r.standard_normal((2, 2, 4))), "input")], {"axis": 1},
           desc="concat 3 inputs on axis 1")
    single("op_concat_axis0", "concat", [("a", x, "input"), ("b", x, "input")], {"axis": 0},
           desc="concat a tensor with itself on axis 0")

    # ---- embedding ----
    r = rng_for("embedding")
    table = f32(r.standard_normal((10, 6)))
    idx = r.integers(0, 10, (2, 3))
    single("op_embedding_i32", "embedding", [("table", table, "param"), ("idx", idx.astype(np.int32), "input")],
           desc="embedding, i32 indices [2,3], table param [10,6]")
    single("op_embedding_i64", "embedding",
           [("table", table, "input"), ("idx", np.array([9, 0, 3, 3, 7], dtype=np.int64), "input")],
           desc="embedding, i64 indices [5] incl. first/last rows, repeated index")

    # ---- cast ----
    r = rng_for("cast")
    vals = f32(np.concatenate([
        r.standard_normal(20) * 3,
        [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.7, -2.7, 1000.25, -65504.0, 70.0, 1e-3],
        [1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 256 + 1, 2 ** -20, 3.0, 12345.678]]))
    vals = vals.reshape(5, 8)
    for to in ("f16", "bf16", "i32", "i64", "bool", "f32"):
        single(f"op_cast_to_{to}", "cast", [("x", vals, "input")], {"dtype": to}, family="exact",
               desc=f"cast f32 -> {to}" + (" (incl. round-to-nearest-even ties)" if to in ("f16", "bf16") else
                                           " (truncation toward zero)" if to in ("i32", "i64") else ""))
    ints = np.array([[-5, 0, 3], [7, 16777216, -1]], dtype=np.int32)
    single("op_cast_i32_to_f32", "cast", [("x", ints, "input")], {"dtype": "f32"}, family="exact",
           desc="cast i32 -> f32")
    single("op_cast_i64_to_i32", "cast", [("x", ints.astype(np.int64), "input")], {"dtype": "i32"}, family="exact",
           desc="cast i64 -> i32")
    single("op_cast_bool_to_f32", "cast", [("x", np.array([[True, False, True], [False, False, True]]), "input")],
           {"dtype": "f32"}, family="exact", desc="cast bool -> f32")
    gb = GB("op_cast_roundtrip_bf16")
    gb.input("x", (5, 8))
    gb.op("h", "cast", ["x"], dtype="bf16")
    gb.op("y", "cast", ["h"], dtype="f32")
    gb.op("z", "add", ["y", "x"])
    gb.output("y", "z")
    add(Case("op_cast_roundtrip_bf16", gb, {"x": vals}, family="elementwise",
             desc="cast to bf16 and back to f32, then add (bf16 values feed f32 arithmetic)"))

    # ---- norms ----
    r = rng_for("norms")
    x = f32(r.standard_normal((2, 3, 16)) * 2 + 0.5)
    w = f32(1 + 0.2 * r.standard_normal(16))
    b = f32(0.1 * r.standard_normal(16))
    single("op_layer_norm", "layer_norm", [("x", x, "input"), ("w", w, "param"), ("b", b, "param")],
           family="accumulate", desc="layer_norm with weight and bias, eps default 1e-5")
    single("op_layer_norm_weight_only", "layer_norm", [("x", x, "input"), ("w", w, "param")],
           {"eps": 1e-3}, family="accumulate", desc="layer_norm with weight only, eps 1e-3")
    single("op_layer_norm_noweight", "layer_norm", [("x", x, "input")], family="accumulate",
           desc="layer_norm without weight or bias")
    single("op_layer_norm_small_var", "layer_norm",
           [("x", f32(r.standard_normal((4, 8)) * 0.01 + 3), "input")], {"eps": 1e-5},
           family="accumulate", desc="layer_norm where eps matters (variance 1e-4, mean 3)")
    single("op_rms_norm", "rms_norm", [("x", x, "input"), ("w", w, "param")], family="accumulate",
           desc="rms_norm with weight, eps default 1e-6")
    single("op_rms_norm_noweight", "rms_norm", [("x", x, "input")], {"eps": 1e-2}, family="accumulate",
           desc="rms_norm without weight, eps 1e-2")

    # ---- rope ----
    r = rng_for("rope")
    x = f32(r.standard_normal((2, 3, 5, 8)))
    single("op_rope", "rope", [("x", x, "input")], family="rope", desc="rope defaults (half-split, base 1e4)")
    single("op_rope_traditional", "rope", [("x", x, "input")], {"traditional": True}, family="rope",
           desc="rope traditional (interleaved)")
    x12 = f32(r.standard_normal((3, 6, 12)))
    single("op_rope_partial_dims", "rope", [("x", x12, "input")], {"dims": 8, "base": 500, "offset": 3},
           family="rope", desc="rope dims 8 of 12 (rest passes through), base 500, offset 3")
    single("op_rope_partial_traditional", "rope", [("x", x12, "input")],
           {"dims": 6, "traditional": True, "scale": 0.5}, family="rope",
           desc="rope traditional, dims 6 of 12, scale 0.5")
    single("op_rope_offset_input", "rope", [("x", x, "input"), ("off", np.array(7, dtype=np.int32), "input")],
           {"offset": 2}, family="rope", desc="rope offset from an i32 scalar input (7), replacing attr offset 2")
    single("op_rope_offset_input_traditional", "rope",
           [("x", x12, "input"), ("off", np.array(11, dtype=np.int32), "input")],
           {"traditional": True, "dims": 8, "scale": 2.0, "base": 1000.0}, family="rope",
           desc="rope traditional, offset input 11, scale 2, base 1000, dims 8 of 12")
    single("op_rope_rank2", "rope", [("x", f32(r.standard_normal((6, 4))), "input")], {"offset": 1},
           family="rope", desc="rope on a rank-2 [S, D] tensor")

    # ---- scaled_masked_softmax ----
    r = rng_for("sms")
    s = f32(r.standard_normal((2, 3, 4, 6)) * 2)
    single("op_scaled_masked_softmax", "scaled_masked_softmax", [("s", s, "input")], family="transcendental",
           desc="scaled_masked_softmax defaults (scale 1, no mask)")
    single("op_scaled_masked_softmax_causal", "scaled_masked_softmax", [("s", s, "input")],
           {"scale": 0.3, "causal": True}, family="transcendental",
           desc="scale 0.3, causal, Tq 4 < Tk 6 (j <= i + 2)")
    single("op_scaled_masked_softmax_causal_square", "scaled_masked_softmax",
           [("s", f32(r.standard_normal((5, 5)) * 2), "input")], {"causal": True}, family="transcendental",
           desc="causal, square [5,5]")

    # ---- attention ----
    r = rng_for("attention")
    q = f32(r.standard_normal((2, 2, 5, 8)))
    k = f32(r.standard_normal((2, 2, 5, 8)))
    v = f32(r.standard_normal((2, 2, 5, 8)))
    single("op_attention", "attention", [("q", q, "input"), ("k", k, "input"), ("v", v, "input")],
           family="accumulate", desc="attention rank 4, no mask, default scale 1/sqrt(D)")
    single("op_attention_causal", "attention", [("q", q, "input"), ("k", k, "input"), ("v", v, "input")],
           {"causal": True}, family="accumulate", desc="attention causal, Sq = Sk")
    single("op_attention_gqa_causal_decode", "attention",
           [("q", f32(r.standard_normal((1, 4, 3, 8))), "input"), ("k", f32(r.standard_normal((1, 2, 7, 8))), "input"),
            ("v", f32(r.standard_normal((1, 2, 7, 6))), "input")], {"causal": True}, family="accumulate",
           desc="GQA 4 q heads / 2 kv heads, causal, Sq 3 < Sk 7 (decode-like), Dv 6 != D 8")
    single("op_attention_gqa_decode_1", "attention",
           [("q", f32(r.standard_normal((2, 6, 1, 8))), "input"), ("k", f32(r.standard_normal((2, 2, 9, 8))), "input"),
            ("v", f32(r.standard_normal((2, 2, 9, 8))), "input")], {"causal": True, "scale": 0.2},
           family="accumulate", desc="GQA 6/2, single query step over 9 keys, causal, scale 0.2")
    bm = r.random((2, 1, 4, 5)) > 0.3
    bm[0, 0, 2, :] = False  # fully hidden row -> zeros
    bm[1, 0, 0, :] = False
    single("op_attention_bool_mask", "attention",
           [("q", f32(r.standard_normal((2, 2, 4, 8))), "input"), ("k", f32(r.standard_normal((2, 2, 5, 8))), "input"),
            ("v", f32(r.standard_normal((2, 2, 5, 8))), "input"), ("mask", bm, "input")],
           family="accumulate", desc="bool mask [2,1,4,5] broadcast over heads; rows (0,:,2) and (1,:,0) fully hidden -> zeros")
    bm2 = r.random((3, 6)) > 0.2
    bm2[:, 5] = True
    bm2[0, :] = False
    single("op_attention_causal_bool_mask", "attention",
           [("q", f32(r.standard_normal((1, 2, 3, 4))), "input"), ("k", f32(r.standard_normal((1, 1, 6, 4))), "input"),
            ("v", f32(r.standard_normal((1, 1, 6, 4))), "input"), ("mask", bm2, "input")], {"causal": True},
           family="accumulate", desc="causal + bool mask [3,6] (broadcast), GQA 2/1, query row 0 fully hidden")
    fm = f32(-np.abs(r.standard_normal((4, 5))) * 2)
    fm[1, 2] = -1e9
    single("op_attention_float_mask", "attention",
           [("q", f32(r.standard_normal((2, 2, 4, 8))), "input"), ("k", f32(r.standard_normal((2, 2, 5, 8))), "input"),
            ("v", f32(r.standard_normal((2, 2, 5, 8))), "input"), ("mask", fm, "input")], {"scale": 0.25},
           family="accumulate", desc="float mask [4,5] added to scores (one -1e9 entry), scale 0.25")
    single("op_attention_float_mask_heads", "attention",
           [("q", f32(r.standard_normal((1, 2, 3, 4))), "input"), ("k", f32(r.standard_normal((1, 2, 3, 4))), "input"),
            ("v", f32(r.standard_normal((1, 2, 3, 4))), "input"),
            ("mask", f32(r.standard_normal((2, 1, 3)) * 0.5), "input")], {"causal": True},
           family="accumulate", desc="float mask [2,1,3] (per head, per key), with causal")
    single("op_attention_rank3", "attention",
           [("q", f32(r.standard_normal((4, 5, 8))), "input"), ("k", f32(r.standard_normal((2, 6, 8))), "input"),
            ("v", f32(r.standard_normal((2, 6, 8))), "input")], {"causal": True}, family="accumulate",
           desc="attention rank 3 [H,S,D], GQA 4/2, causal, Sq 5 < Sk 6")
    single("op_attention_rank2", "attention",
           [("q", f32(r.standard_normal((5, 8))), "input"), ("k", f32(r.standard_normal((7, 8))), "input"),
            ("v", f32(r.standard_normal((7, 3))), "input")], {"causal": True}, family="accumulate",
           desc="attention rank 2 [S,D], causal, Sq 5 < Sk 7, Dv 3")
    m2 = r.random((4, 4)) > 0.4
    m2[3, :] = False
    single("op_attention_rank2_bool_mask", "attention",
           [("q", f32(r.standard_normal((4, 8))), "input"), ("k", f32(r.standard_normal((4, 8))), "input"),
            ("v", f32(r.standard_normal((4, 8))), "input"), ("mask", m2, "input")], family="accumulate",
           desc="attention rank 2 with bool mask [4,4], last row fully hidden")
    single("op_attention_causal_sq_gt_sk", "attention",
           [("q", f32(r.standard_normal((1, 1, 5, 4))), "input"), ("k", f32(r.standard_normal((1, 1, 3, 4))), "input"),
            ("v", f32(r.standard_normal((1, 1, 3, 4))), "input")], {"causal": True}, family="accumulate",
           desc="causal with Sq 5 > Sk 3: j <= i - 2 hides every key of rows 0,1 -> zeros")

    # ---- VJPs ----
    r = rng_for("vjp")
    x = f32(r.standard_normal((3, 4, 10)) * 1.5 + 0.3)
    dy = f32(r.standard_normal((3, 4, 10)))
    single("op_layer_norm_vjp", "layer_norm_vjp", [("dy", dy, "input"), ("x", x, "input")], family="accumulate",
           desc="layer_norm_vjp, eps default")
    single("op_layer_norm_vjp_eps", "layer_norm_vjp", [("dy", dy, "input"), ("x", f32(x * 0.05), "input")],
           {"eps": 1e-2}, family="accumulate", desc="layer_norm_vjp, eps 1e-2 comparable to the variance")
    single("op_rms_norm_vjp", "rms_norm_vjp", [("dy", dy, "input"), ("x", x, "input")], family="accumulate",
           desc="rms_norm_vjp, eps default")
    single("op_rms_norm_vjp_eps", "rms_norm_vjp", [("dy", dy, "input"), ("x", f32(x * 0.1), "input")],
           {"eps": 1e-2}, family="accumulate", desc="rms_norm_vjp, eps 1e-2")
    y = gl.softmax(gl.Ctx("f64"), f32(r.standard_normal((3, 4, 10)) * 2).astype(np.float64), -1)
    single("op_softmax_vjp", "softmax_vjp", [("dy", dy, "input"), ("sm", f32(y), "input")],
           family="transcendental", desc="softmax_vjp axis -1")
    y1 = gl.softmax(gl.Ctx("f64"), f32(r.standard_normal((3, 4, 10))).astype(np.float64), 1)
    single("op_softmax_vjp_axis1", "softmax_vjp", [("dy", dy, "input"), ("sm", f32(y1), "input")], {"axis": 1},
           family="transcendental", desc="softmax_vjp axis 1")
    xs = f32(r.standard_normal((4, 15)) * 3)
    single("op_silu_vjp", "silu_vjp", [("dy", dy.reshape(4, 30)[:, :15].copy(), "input"), ("x", xs, "input")],
           family="transcendental", desc="silu_vjp")
    single("op_gelu_vjp", "gelu_vjp", [("dy", dy.reshape(4, 30)[:, 15:].copy(), "input"), ("x", xs, "input")],
           family="transcendental", desc="gelu_vjp erf form (default)")
    single("op_gelu_vjp_tanh", "gelu_vjp", [("dy", dy.reshape(4, 30)[:, 15:].copy(), "input"), ("x", xs, "input")],
           {"approximate": "tanh"}, family="transcendental", desc="gelu_vjp tanh approximation")

    # ---- leaves and graph structure ----
    r = rng_for("leaves")
    gb = GB("op_constant")
    gb.input("x", (2, 3))
    gb.const("c", [[1.0, -2.0, 0.5], [3.25, 0.0, -1.0]], (2, 3))
    gb.const("s", 2.5)
    gb.op("h", "mul", ["x", "c"])
    gb.op("y", "add", ["h", "s"])
    gb.output("y")
    add(Case("op_constant", gb, {"x": f32(r.standard_normal((2, 3)))},
             desc="constants: nested list [2,3] and a number (rank 0)"))
    gb = GB("op_param_dtypes")
    gb.input("x", (2, 4))
    gb.param("p16", (2, 4), name="weights.half")
    gb.param("pbf", (4,), name="weights.brain")
    gb.param("p32", (2, 1))
    gb.op("h", "add", ["x", "p16"])
    gb.op("g", "mul", ["h", "pbf"])
    gb.op("y", "sub", ["g", "p32"])
    gb.output("y", "h")
    add(Case("op_param_dtypes", gb, {"x": f32(r.standard_normal((2, 4)))},
             {"weights.half": (f32(r.standard_normal((2, 4))).astype(np.float16), "f16"),
              "weights.brain": (gl.round_bf16(r.standard_normal(4)).astype(np.float32), "bf16"),
              "p32": (f32(r.standard_normal((2, 1))), "f32")},
             desc="params stored as F16 and BF16 in the file, converted to f32 nodes; 'name' differs from id"))
    gb = GB("op_unordered_nodes")
    gb.op("y", "mul", ["h", "w"])
    gb.op("h", "tanh", ["s"])
    gb.op("s", "add", ["x", "b"])
    gb.param("w", (3,))
    gb.input("x", (2, 3))
    gb.param("b", (3,))
    gb.output("y", "s")
    add(Case("op_unordered_nodes", gb, {"x": f32(r.standard_normal((2, 3)))},
             {"w": (f32(r.standard_normal(3)), "f32"), "b": (f32(r.standard_normal(3)), "f32")},
             family="transcendental", desc="nodes listed consumers-first; two outputs"))
    gb = GB("op_symbolic_shared")
    gb.input("a", ["batch", "seq", 4])
    gb.input("b", ["batch", 1, 4])
    gb.input("c", ["seq", 1])
    gb.op("s", "add", ["a", "b"])
    gb.op("y", "mul", ["s", "c"])
    gb.output("y")
    add(Case("op_symbolic_shared", gb, {"a": f32(r.standard_normal((2, 3, 4))), "b": f32(r.standard_normal((2, 1, 4))),
                                        "c": f32(r.standard_normal((3, 1)))}, declare=False,
             desc="symbols 'batch' (2) and 'seq' (3) shared by three inputs"))
    gb = GB("op_output_leaf")
    gb.input("x", (3,))
    gb.op("y", "exp", ["x"])
    gb.output("y", "x")
    add(Case("op_output_leaf", gb, {"x": f32([0.5, -1.0, 2.0])}, family="transcendental",
             desc="an input node listed as an output"))


# ----------------------------------------------------------------------------------------
# Example graphs

def init_w(r, out, inp):
    return f32(r.standard_normal((out, inp)) / math.sqrt(inp))


def init_norm(r, d):
    return f32(1 + 0.1 * r.standard_normal(d))


def example(name, gb, inputs, params, family, desc):
    return add(Case(f"example_{name}", gb, inputs, params, family, declare=False, desc=desc,
                    graph_path=f"graphs/{name}.json",
                    params_path=f"graphs/{name}.safetensors" if params else None,
                    inputs_dir=f"graphs/{name}.inputs"))


def attention_block(gb, p, x, params, r, d_model, hq, hkv, hd, prefix, eps, seq_sym, dtype="f32"):
    """Appends a pre-norm attention sub-block; returns the id of the residual sum."""
    def P(key, shape, arr):
        params[prefix + key] = (arr, dtype)
        return gb.param(p + "w_" + key.replace(".weight", "").replace("self_attn.", "").replace("_proj", ""), shape,
                        name=prefix + key, dtype=dtype)
    wn = P("input_layernorm.weight", (d_model,), init_norm(r, d_model))
    wq = P("self_attn.q_proj.weight", (hq * hd, d_model), init_w(r, hq * hd, d_model))
    wk = P("self_attn.k_proj.weight", (hkv * hd, d_model), init_w(r, hkv * hd, d_model))
    wv = P("self_attn.v_proj.weight", (hkv * hd, d_model), init_w(r, hkv * hd, d_model))
    wo = P("self_attn.o_proj.weight", (d_model, hq * hd), init_w(r, d_model, hq * hd))
    h = gb.op(p + "attn_norm", "rms_norm", [x, wn], eps=eps)
    q = gb.op(p + "q", "linear", [h, wq])
    k = gb.op(p + "k", "linear", [h, wk])
    v = gb.op(p + "v", "linear", [h, wv])
    q = gb.op(p + "q_heads", "reshape", [q], shape=[1, -1, hq, hd])
    k = gb.op(p + "k_heads", "reshape", [k], shape=[1, -1, hkv, hd])
    v = gb.op(p + "v_heads", "reshape", [v], shape=[1, -1, hkv, hd])
    q = gb.op(p + "q_t", "transpose", [q], perm=[0, 2, 1, 3])
    k = gb.op(p + "k_t", "transpose", [k], perm=[0, 2, 1, 3])
    v = gb.op(p + "v_t", "transpose", [v], perm=[0, 2, 1, 3])
    q = gb.op(p + "q_rope", "rope", [q])
    k = gb.op(p + "k_rope", "rope", [k])
    a = gb.op(p + "attn", "attention", [q, k, v], causal=True)
    a = gb.op(p + "attn_t", "transpose", [a], perm=[0, 2, 1, 3])
    a = gb.op(p + "attn_merged", "reshape", [a], shape=[1, -1, hq * hd])
    o = gb.op(p + "o", "linear", [a, wo])
    return gb.op(p + "attn_residual", "add", [x, o])


def mlp_block(gb, p, x, params, r, d_model, ffn, prefix, eps, dtype="f32"):
    def P(key, shape, arr):
        params[prefix + key] = (arr, dtype)
        return gb.param(p + "w_" + key.replace(".weight", "").replace("mlp.", "").replace("_proj", ""), shape,
                        name=prefix + key, dtype=dtype)
    wn = P("post_attention_layernorm.weight", (d_model,), init_norm(r, d_model))
    wg = P("mlp.gate_proj.weight", (ffn, d_model), init_w(r, ffn, d_model))
    wu = P("mlp.up_proj.weight", (ffn, d_model), init_w(r, ffn, d_model))
    wd = P("mlp.down_proj.weight", (d_model, ffn), init_w(r, d_model, ffn))
    h = gb.op(p + "mlp_norm", "rms_norm", [x, wn], eps=eps)
    g = gb.op(p + "gate_lin", "linear", [h, wg])
    u = gb.op(p + "up_lin", "linear", [h, wu])
    s = gb.op(p + "gate_act", "silu", [g])
    m = gb.op(p + "swiglu", "mul", [s, u])
    d = gb.op(p + "down_lin", "linear", [m, wd])
    return gb.op(p + "mlp_residual", "add", [x, d])


def build_examples():
    # mlp
    r = rng_for("example_mlp")
    gb = GB("mlp")
    gb.input("x", ["batch", 16])
    gb.param("w1", (32, 16), "fc1.weight")
    gb.param("b1", (32,), "fc1.bias")
    gb.param("w2", (8, 32), "fc2.weight")
    gb.param("b2", (8,), "fc2.bias")
    gb.op("h", "linear", ["x", "w1", "b1"])
    gb.op("g", "gelu", ["h"], approximate="tanh")
    gb.op("y", "linear", ["g", "w2", "b2"])
    gb.output("y")
    params = {"fc1.weight": (init_w(r, 32, 16), "f32"), "fc1.bias": (f32(0.1 * r.standard_normal(32)), "f32"),
              "fc2.weight": (init_w(r, 8, 32), "f32"), "fc2.bias": (f32(0.1 * r.standard_normal(8)), "f32")}
    example("mlp", gb, {"x": f32(r.standard_normal((3, 16)))}, params, "accumulate",
            "2-layer MLP with tanh GELU, symbolic batch (3)")

    # attention_gqa
    r = rng_for("example_attention_gqa")
    d, hq, hkv, hd = 32, 4, 2, 8
    gb = GB("attention_gqa")
    gb.input("x", [2, "seq", d])
    params = {}
    for nm, out in (("q", hq * hd), ("k", hkv * hd), ("v", hkv * hd), ("o", d)):
        gb.param("w" + nm, (out, d), f"{nm}_proj.weight")
        gb.param("b" + nm, (out,), f"{nm}_proj.bias")
        params[f"{nm}_proj.weight"] = (init_w(r, out, d), "f32")
        params[f"{nm}_proj.bias"] = (f32(0.05 * r.standard_normal(out)), "f32")
    gb.op("q", "linear", ["x", "wq", "bq"])
    gb.op("k", "linear", ["x", "wk", "bk"])
    gb.op("v", "linear", ["x", "wv", "bv"])
    gb.op("q4", "reshape", ["q"], shape=[2, -1, hq, hd])
    gb.op("k4", "reshape", ["k"], shape=[2, -1, hkv, hd])
    gb.op("v4", "reshape", ["v"], shape=[2, -1, hkv, hd])
    gb.op("qt", "transpose", ["q4"], perm=[0, 2, 1, 3])
    gb.op("kt", "transpose", ["k4"], perm=[0, 2, 1, 3])
    gb.op("vt", "transpose", ["v4"], perm=[0, 2, 1, 3])
    gb.op("att", "attention", ["qt", "kt", "vt"], causal=True)
    gb.op("att_t", "transpose", ["att"], perm=[0, 2, 1, 3])
    gb.op("merged", "reshape", ["att_t"], shape=[2, -1, hq * hd])
    gb.op("y", "linear", ["merged", "wo", "bo"])
    gb.output("y")
    example("attention_gqa", gb, {"x": f32(r.standard_normal((2, 6, d)))}, params, "accumulate",
            "multi-head causal self-attention, 4 query / 2 kv heads, head dim 8, symbolic seq (6)")

    # rope
    r = rng_for("example_rope")
    gb = GB("rope")
    gb.input("x", [1, 2, "seq", 16])
    gb.op("y_half_split", "rope", ["x"])
    gb.op("y_interleaved", "rope", ["x"], traditional=True)
    gb.output("y_half_split", "y_interleaved")
    example("rope", gb, {"x": f32(r.standard_normal((1, 2, 5, 16)))}, {}, "rope",
            "rope both conventions (half-split and interleaved) as two outputs, symbolic seq (5)")

    # norms
    r = rng_for("example_norms")
    gb = GB("norms")
    gb.input("x", ["batch", 48])
    gb.param("ln_w", (48,), "ln.weight")
    gb.param("ln_b", (48,), "ln.bias")
    gb.param("rms_w", (48,), "rms.weight")
    gb.op("ln", "layer_norm", ["x", "ln_w", "ln_b"])
    gb.op("rms", "rms_norm", ["x", "rms_w"])
    gb.output("ln", "rms")
    params = {"ln.weight": (init_norm(r, 48), "f32"), "ln.bias": (f32(0.1 * r.standard_normal(48)), "f32"),
              "rms.weight": (init_norm(r, 48), "f32")}
    example("norms", gb, {"x": f32(r.standard_normal((4, 48)) * 2 + 1)}, params, "accumulate",
            "layer_norm (weight+bias) and rms_norm (weight) of the same input, symbolic batch (4)")

    # llama_block
    r = rng_for("example_llama_block")
    d, hq, hkv, hd, ffn = 64, 4, 2, 16, 172
    gb = GB("llama_block")
    gb.input("x", [1, "seq", d])
    params = {}
    h = attention_block(gb, "", "x", params, r, d, hq, hkv, hd, "", 1e-5, "seq")
    y = mlp_block(gb, "", h, params, r, d, ffn, "", 1e-5)
    gb.output(y)
    example("llama_block", gb, {"x": f32(r.standard_normal((1, 7, d)))}, params, "accumulate",
            "Llama decoder block: RMSNorm, GQA causal attention with RoPE, SwiGLU MLP, residuals; seq 7")

    # tiny_llama
    r = rng_for("example_tiny_llama")
    vocab, d, hq, hkv, hd, ffn, layers = 256, 64, 4, 2, 16, 172, 2
    gb = GB("tiny_llama")
    gb.input("tokens", [1, "seq"], "i32")
    params = {"model.embed_tokens.weight": (f32(r.standard_normal((vocab, d))), "f32")}
    gb.param("embed", (vocab, d), "model.embed_tokens.weight")
    x = gb.op("h0", "embedding", ["embed", "tokens"])
    for i in range(layers):
        pre = f"model.layers.{i}."
        x = attention_block(gb, f"l{i}.", x, params, r, d, hq, hkv, hd, pre, 1e-5, "seq")
        x = mlp_block(gb, f"l{i}.", x, params, r, d, ffn, pre, 1e-5)
    params["model.norm.weight"] = (init_norm(r, d), "f32")
    params["lm_head.weight"] = (init_w(r, vocab, d), "f32")
    gb.param("final_norm_w", (d,), "model.norm.weight")
    gb.param("lm_head", (vocab, d), "lm_head.weight")
    gb.op("final_norm", "rms_norm", [x, "final_norm_w"], eps=1e-5)
    gb.op("logits", "linear", ["final_norm", "lm_head"])
    gb.output("logits")
    prompt = np.frombuffer(b"Hello, w", dtype=np.uint8).astype(np.int32).reshape(1, 8)
    example("tiny_llama", gb, {"tokens": prompt}, params, "accumulate",
            "tiny Llama: vocab 256, d_model 64, 4/2 heads of 16, FFN 172, 2 blocks; prompt b'Hello, w'")

    # gelu_chain
    r = rng_for("example_gelu_chain")
    gb = GB("gelu_chain")
    gb.input("x", [4, "n", 64])
    gb.const("inv_sqrt2", 0.7071067811865476)
    gb.const("one", 1.0)
    gb.const("half", 0.5)
    gb.op("scaled", "mul", ["x", "inv_sqrt2"])
    gb.op("erf", "erf", ["scaled"])
    gb.op("erf_plus_1", "add", ["erf", "one"])
    gb.op("x_times", "mul", ["x", "erf_plus_1"])
    gb.op("y", "mul", ["x_times", "half"])
    gb.output("y")
    example("gelu_chain", gb, {"x": f32(r.standard_normal((4, 5, 64)) * 2)}, {}, "transcendental",
            "GELU (erf form) as 5 elementwise nodes over 3 constants, symbolic n (5)")


# ----------------------------------------------------------------------------------------
# Half precision: f16/bf16 leaves; every op on them gives their dtype and rounds on store.

def bf16v(a):
    """f32 array of bf16 numbers (round to nearest even): how a bf16 input travels in a .npy."""
    return gl.round_bf16(np.asarray(a, dtype=np.float64)).astype(np.float32)


def half_single(name, op, ins, attrs=None, family="half_op_bf16", desc=""):
    """One op 'y' over leaves (id, array, kind, dtype): kind input|param; bf16 inputs are f32
    arrays of bf16 numbers, f16 inputs float16 arrays, params are written in their dtype."""
    gb = GB(name)
    inputs, pdict, ids = {}, {}, []
    for (id, a, kind, dt) in ins:
        if dt == "bf16":
            a = bf16v(a)
        elif dt == "f16":
            a = np.asarray(a, dtype=np.float16)
        if kind == "input":
            gb.input(id, a.shape, dt)
            inputs[id] = a
        else:
            gb.param(id, a.shape, dtype=dt)
            pdict[id] = (a, dt)
        ids.append(id)
    gb.op("y", op, ids, **(attrs or {}))
    gb.output("y")
    return add(Case(name, gb, inputs, pdict, family, True, desc))


def build_gemm_epilogue_cases():
    """Products whose consumer the CPU's compiled plans run in the GEMM's epilogue (and the cases
    where they must not: the product's output is also a graph output or read again later),
    with weights the compiled plan prepacks: 1..16 rows (skinny panels) and more (OpenBLAS)."""
    r = rng_for("gemm_epilogue")
    for rows in (3, 40):
        # linear + bias -> gelu(tanh), then linear -> add(residual) -> relu (a fused chain)
        gb = GB(f"gemm_epilogue_mlp_{rows}")
        x = f32(r.standard_normal((rows, 24)))
        res = f32(r.standard_normal((rows, 20)))
        P = {"w1": (init_w(r, 37, 24), "f32"), "b1": (f32(r.standard_normal(37)), "f32"),
             "w2": (init_w(r, 20, 37), "f32")}
        gb.input("x", x.shape)
        gb.input("res", res.shape)
        for k, (a, _) in P.items():
            gb.param(k, a.shape)
        gb.op("h", "linear", ["x", "w1", "b1"])
        gb.op("g", "gelu", ["h"], approximate="tanh")
        gb.op("o", "linear", ["g", "w2"])
        gb.op("s", "add", ["o", "res"])
        gb.op("y", "relu", ["s"])
        gb.output("y")
        add(Case(gb.name, gb, {"x": x, "res": res}, P, "accumulate", desc=f"linear+bias->gelu, linear->add->relu, {rows} rows"))
        # matmul with a param B (K x N) -> add of a broadcast row and a silu; the product's output
        # is ALSO a graph output, and a second product's output is read by two later nodes
        gb = GB(f"gemm_epilogue_shared_{rows}")
        a = f32(r.standard_normal((2, rows, 16)))
        P = {"b": (f32(r.standard_normal((16, 33)) / 4), "f32"), "w": (init_w(r, 33, 16), "f32"),
             "row": (f32(r.standard_normal(33)), "f32")}
        gb.input("a", a.shape)
        for k, (v, _) in P.items():
            gb.param(k, v.shape)
        gb.op("mm", "matmul", ["a", "b"])
        gb.op("t", "add", ["mm", "row"])
        gb.op("u", "silu", ["t"])
        gb.op("l", "linear", ["a", "w"])
        gb.op("e", "exp", ["l"])
        gb.op("z", "mul", ["e", "l"])
        gb.op("v", "add", ["u", "z"])
        gb.output("v", "mm")
        add(Case(gb.name, gb, {"a": a}, P, "accumulate",
                 desc=f"matmul(param B)->add row->silu with the product also an output; linear read twice; {rows} rows"))
        # products whose consumer must NOT run in the epilogue: 'p' is read again by a later
        # product, 'pp' is a graph output
        gb = GB(f"gemm_epilogue_refused_{rows}")
        x = f32(r.standard_normal((rows, 24)))
        P = {"w1": (init_w(r, 24, 24), "f32"), "w2": (init_w(r, 24, 24), "f32"), "w3": (init_w(r, 17, 24), "f32")}
        gb.input("x", x.shape)
        for k, (v, _) in P.items():
            gb.param(k, v.shape)
        gb.op("p", "linear", ["x", "w1"])
        gb.op("q", "relu", ["p"])
        gb.op("r", "linear", ["p", "w2"])
        gb.op("s", "add", ["q", "r"])
        gb.op("pp", "linear", ["x", "w3"])
        gb.op("qq", "sigmoid", ["pp"])
        gb.output("s", "qq", "pp")
        add(Case(gb.name, gb, {"x": x}, P, "accumulate",
                 desc=f"products read again later / also graph outputs (no epilogue for them), {rows} rows"))


def build_half_cases():
    r = rng_for("half")
    x = r.standard_normal((2, 3, 40))
    w = r.standard_normal((24, 40)) / math.sqrt(40)
    b = 0.1 * r.standard_normal(24)
    half_single("op_linear_bf16_weights_f32_act", "linear",
                [("x", f32(x), "input", "f32"), ("w", w, "param", "bf16"), ("b", b, "param", "bf16")],
                family="accumulate", desc="linear: f32 activations, bf16 weights and bias (mixed) -> f32")
    half_single("op_linear_bf16", "linear",
                [("x", x, "input", "bf16"), ("w", w, "param", "bf16"), ("b", b, "param", "bf16")],
                desc="linear all bf16 -> bf16 (f32 accumulation, one rounding)")
    half_single("op_linear_f16", "linear", [("x", x, "input", "f16"), ("w", w, "param", "f16")],
                family="half_op_f16", desc="linear all f16 -> f16")
    half_single("op_matmul_f16", "matmul", [("a", r.standard_normal((2, 5, 33)), "input", "f16"),
                                            ("b", r.standard_normal((33, 17)), "param", "f16")],
                family="half_op_f16", desc="matmul [2,5,33] x [33,17] f16 (b in the [K, N] layout)")
    half_single("op_matmul_bf16_tb", "matmul", [("a", r.standard_normal((3, 4, 70)), "input", "bf16"),
                                                ("b", r.standard_normal((3, 9, 70)), "input", "bf16")],
                {"transpose_b": True}, desc="batched matmul transpose_b, bf16")
    half_single("op_add_bf16", "add", [("a", r.standard_normal((4, 7)), "input", "bf16"),
                                       ("b", r.standard_normal((7,)), "input", "bf16")],
                desc="add bf16 with broadcasting, rounded on store")
    half_single("op_silu_f16", "silu", [("x", 3 * r.standard_normal((5, 9)), "input", "f16")],
                family="half_op_f16", desc="silu f16")
    half_single("op_softmax_bf16", "softmax", [("x", 3 * r.standard_normal((3, 50)), "input", "bf16")],
                desc="softmax bf16 (f32 inside)")
    half_single("op_rms_norm_bf16", "rms_norm", [("x", r.standard_normal((4, 48)), "input", "bf16"),
                                                 ("w", 1 + 0.1 * r.standard_normal(48), "param", "bf16")],
                desc="rms_norm bf16 (f32 statistics inside)")
    half_single("op_attention_bf16", "attention",
                [("q", r.standard_normal((1, 4, 6, 16)), "input", "bf16"),
                 ("k", r.standard_normal((1, 2, 6, 16)), "input", "bf16"),
                 ("v", r.standard_normal((1, 2, 6, 16)), "input", "bf16")], {"causal": True},
                desc="GQA 4/2 causal attention, bf16 q/k/v (f32 scores and softmax inside)")

    # Decoder block in bf16: weights BF16 in the safetensors file, x a bf16 input.
    r = rng_for("example_llama_block_bf16")
    d, hq, hkv, hd, ffn = 64, 4, 2, 16, 172
    gb = GB("llama_block_bf16")
    gb.input("x", [1, "seq", d], "bf16")
    params = {}
    h = attention_block(gb, "", "x", params, r, d, hq, hkv, hd, "", 1e-5, "seq", dtype="bf16")
    y = mlp_block(gb, "", h, params, r, d, ffn, "", 1e-5, dtype="bf16")
    gb.output(y)
    example("llama_block_bf16", gb, {"x": bf16v(r.standard_normal((1, 7, d)))}, params, "half_chain_bf16",
            "Llama decoder block in bf16 (BF16 weights, bf16 activations); seq 7")

    # One decode step in bf16: the new token's k/v appended to a bf16 KV cache of 9 positions,
    # RoPE at the position given by the i32 input pos, attention over 10 keys.
    r = rng_for("example_decode_step_bf16")
    S = 9
    gb = GB("decode_step_bf16")
    gb.input("x", [1, 1, d], "bf16")
    gb.input("pos", [], "i32")
    gb.input("k_cache", [1, hkv, S, hd], "bf16")
    gb.input("v_cache", [1, hkv, S, hd], "bf16")
    params = {}

    def P(key, shape, arr):
        params[key] = (arr, "bf16")
        return gb.param("w_" + key.split(".")[0], shape, name=key, dtype="bf16")
    wn = P("input_layernorm.weight", (d,), init_norm(r, d))
    wq = P("q_proj.weight", (hq * hd, d), init_w(r, hq * hd, d))
    wk = P("k_proj.weight", (hkv * hd, d), init_w(r, hkv * hd, d))
    wv = P("v_proj.weight", (hkv * hd, d), init_w(r, hkv * hd, d))
    wo = P("o_proj.weight", (d, hq * hd), init_w(r, d, hq * hd))
    h = gb.op("attn_norm", "rms_norm", ["x", wn], eps=1e-5)
    heads = {}
    for nm, wt, nh in (("q", wq, hq), ("k", wk, hkv), ("v", wv, hkv)):
        t = gb.op(nm, "linear", [h, wt])
        t = gb.op(nm + "_heads", "reshape", [t], shape=[1, 1, nh, hd])
        heads[nm] = gb.op(nm + "_t", "transpose", [t], perm=[0, 2, 1, 3])
    q = gb.op("q_rope", "rope", [heads["q"], "pos"])
    k = gb.op("k_rope", "rope", [heads["k"], "pos"])
    k_all = gb.op("k_all", "concat", ["k_cache", k], axis=2)
    v_all = gb.op("v_all", "concat", ["v_cache", heads["v"]], axis=2)
    a = gb.op("attn", "attention", [q, k_all, v_all])
    a = gb.op("attn_t", "transpose", [a], perm=[0, 2, 1, 3])
    a = gb.op("attn_merged", "reshape", [a], shape=[1, 1, hq * hd])
    o = gb.op("o", "linear", [a, wo])
    h2 = gb.op("attn_residual", "add", ["x", o])
    y = mlp_block(gb, "", h2, params, r, d, ffn, "", 1e-5, dtype="bf16")
    gb.output(y, "k_all")
    example("decode_step_bf16", gb,
            {"x": bf16v(r.standard_normal((1, 1, d))), "pos": np.array(S, dtype=np.int32),
             "k_cache": bf16v(r.standard_normal((1, hkv, S, hd))),
             "v_cache": bf16v(r.standard_normal((1, hkv, S, hd)))},
            params, "half_chain_bf16",
            "one decode step in bf16: KV cache of 9 (bf16 inputs) + the new token, RoPE at pos 9, SwiGLU")


# ----------------------------------------------------------------------------------------
# Malformed graphs

def build_bad():
    """Returns [(file name, text, node id or None, alternatives, what)]."""
    def doc(nodes, outputs, version=1, extra=None):
        d = {"format": "rlx.graph", "version": version, "name": "bad", "nodes": nodes, "outputs": outputs}
        if extra:
            d.update(extra)
        return dump_graph(d).decode()

    X = {"id": "x", "op": "input", "shape": [2, 3]}
    bad = []
    bad.append(("malformed_json.json",
                '{\n  "format": "rlx.graph",\n  "version": 1,\n  "nodes": [\n'
                '    {"id": "x", "op": "input", "shape": [2, 3]},\n'
                '    {"id": "y", "op": "exp", "inputs": ["x"]\n  ],\n  "outputs": ["y"]\n}\n',
                None, [], "JSON syntax error (missing '}' on line 6): names the file and the line/column"))
    bad.append(("unknown_op.json", doc([X, {"id": "y", "op": "frobnicate", "inputs": ["x"]}], ["y"]),
                "y", [], "unknown op 'frobnicate'"))
    bad.append(("unknown_attr.json",
                doc([X, {"id": "sm", "op": "softmax", "inputs": ["x"], "attrs": {"axes": [-1]}}], ["sm"]),
                "sm", [], "unknown attribute 'axes' on softmax (the attribute is 'axis')"))
    bad.append(("wrong_arity.json", doc([X, {"id": "sum2", "op": "add", "inputs": ["x"]}], ["sum2"]),
                "sum2", [], "add with 1 input (needs 2)"))
    bad.append(("wrong_arity_attention.json",
                doc([X, {"id": "att", "op": "attention", "inputs": ["x", "x"]}], ["att"]),
                "att", [], "attention with 2 inputs (needs 3 or 4)"))
    bad.append(("duplicate_id.json",
                doc([X, {"id": "h", "op": "exp", "inputs": ["x"]}, {"id": "h", "op": "neg", "inputs": ["x"]}], ["h"]),
                "h", [], "two nodes with id 'h'"))
    bad.append(("cycle.json",
                doc([X, {"id": "a", "op": "add", "inputs": ["x", "c"]}, {"id": "b", "op": "exp", "inputs": ["a"]},
                     {"id": "c", "op": "neg", "inputs": ["b"]}, {"id": "y", "op": "sin", "inputs": ["a"]}], ["y"]),
                "a", ["b", "c"], "cycle a -> b -> c -> a (any of a, b, c may be named)"))
    bad.append(("self_loop.json", doc([X, {"id": "loop", "op": "add", "inputs": ["x", "loop"]}], ["loop"]),
                "loop", [], "a node that is its own input"))
    bad.append(("dangling_input.json",
                doc([X, {"id": "y", "op": "mul", "inputs": ["x", "nowhere"]}], ["y"]),
                "y", [], "input 'nowhere' is not a node id (the message should also say 'nowhere')"))
    bad.append(("dangling_output.json", doc([X, {"id": "y", "op": "exp", "inputs": ["x"]}], ["y", "z"]),
                "z", [], "'outputs' lists 'z', which is not a node"))
    bad.append(("wrong_attr_type.json",
                doc([X, {"id": "r", "op": "sum", "inputs": ["x"], "attrs": {"axes": [1], "keepdims": "yes"}}], ["r"]),
                "r", [], "keepdims must be a boolean, got a string"))
    bad.append(("wrong_attr_type_axis.json",
                doc([X, {"id": "sm", "op": "softmax", "inputs": ["x"], "attrs": {"axis": 1.5}}], ["sm"]),
                "sm", [], "softmax axis must be an integer, got 1.5"))
    bad.append(("bad_version.json", doc([X, {"id": "y", "op": "exp", "inputs": ["x"]}], ["y"], version=2),
                None, [], "version 2 is unknown (names the file)"))
    bad.append(("missing_format.json",
                json.dumps({"version": 1, "nodes": [X], "outputs": ["x"]}, indent=2) + "\n",
                None, [], "no 'format' key"))
    bad.append(("unknown_dtype.json",
                doc([{"id": "x", "op": "input", "shape": [2], "dtype": "f64"}, {"id": "y", "op": "exp", "inputs": ["x"]}],
                    ["y"]), "x", [], "dtype 'f64' is not a graph dtype"))
    bad.append(("missing_shape.json",
                doc([{"id": "x", "op": "input"}, {"id": "y", "op": "exp", "inputs": ["x"]}], ["y"]),
                "x", [], "input without 'shape'"))
    bad.append(("symbolic_param.json",
                doc([X, {"id": "w", "op": "param", "shape": ["n", 3]}, {"id": "y", "op": "add", "inputs": ["x", "w"]}],
                    ["y"]), "w", [], "symbolic dimension on a param (only inputs may have them)"))
    bad.append(("missing_required_attr.json",
                doc([X, {"id": "rs", "op": "reshape", "inputs": ["x"]}], ["rs"]),
                "rs", [], "reshape without its 'shape' attribute"))
    bad.append(("matmul_shape_mismatch.json",
                doc([X, {"id": "w", "op": "input", "shape": [4, 5]},
                     {"id": "mm", "op": "matmul", "inputs": ["x", "w"]}], ["mm"]),
                "mm", [], "matmul [2,3] x [4,5]: inner dimensions 3 and 4 differ"))
    bad.append(("broadcast_mismatch.json",
                doc([X, {"id": "z", "op": "input", "shape": [4]}, {"id": "s", "op": "add", "inputs": ["x", "z"]}],
                    ["s"]), "s", [], "add [2,3] + [4] do not broadcast"))
    bad.append(("declared_shape_mismatch.json",
                doc([X, {"id": "w", "op": "input", "shape": [3, 4]},
                     {"id": "mm", "op": "matmul", "inputs": ["x", "w"], "shape": [2, 5]}], ["mm"]),
                "mm", [], "declared shape [2,5] but inference gives [2,4]"))
    bad.append(("reshape_bad_size.json",
                doc([X, {"id": "rs", "op": "reshape", "inputs": ["x"], "attrs": {"shape": [4, -1]}}], ["rs"]),
                "rs", [], "reshape of 6 elements to [4,-1]"))
    bad.append(("gqa_heads.json",
                doc([{"id": "q", "op": "input", "shape": [1, 3, 4, 8]}, {"id": "k", "op": "input", "shape": [1, 2, 4, 8]},
                     {"id": "att", "op": "attention", "inputs": ["q", "k", "k"]}], ["att"]),
                "att", [], "3 query heads are not a multiple of 2 kv heads"))
    bad.append(("embedding_float_indices.json",
                doc([{"id": "t", "op": "param", "shape": [10, 4]}, X,
                     {"id": "emb", "op": "embedding", "inputs": ["t", "x"]}], ["emb"]),
                "emb", [], "embedding indices are f32 (must be i32 or i64)"))
    bad.append(("constant_shape_mismatch.json",
                doc([{"id": "c", "op": "constant", "shape": [2, 2], "value": [[1, 2, 3], [4, 5, 6]]}], ["c"]),
                "c", [], "constant value [2,3] disagrees with shape [2,2]"))
    bad.append(("rope_odd_dims.json",
                doc([{"id": "x", "op": "input", "shape": [4, 8]},
                     {"id": "rp", "op": "rope", "inputs": ["x"], "attrs": {"dims": 5}}], ["rp"]),
                "rp", [], "rope dims 5 is odd"))
    bad.extend(goldens_conv.bad_graphs(doc))
    return bad


def bad_readme(bad):
    lines = ["# Malformed graphs for loader tests", "",
             "Generated by `scripts/gen_goldens.py` (do not edit by hand). Every file here must be refused",
             "before anything runs, with a message that names the file and the node id below (where one is",
             "given) and says what was expected. `scripts/gen_goldens.py` asserts that its reference loader",
             "(scripts/graphlib.py) refuses each file naming that id.", "",
             "| file | node id the error must name | what is wrong |", "| --- | --- | --- |"]
    for fn, _, nid, alts, what in bad:
        ids = "— (file-level)" if nid is None else " or ".join(f"`{i}`" for i in [nid] + alts)
        lines.append(f"| `{fn}` | {ids} | {what} |")
    lines.append("")
    lines.append("Machine-readable: `expected_errors.json` maps each file to the list of acceptable node ids "
                 "(empty for file-level errors).")
    return ("\n".join(lines) + "\n").encode()



def build_quant_cases():
    """i8/u8 storage and the quantization ops (issue 19). Integer outputs are exact; dequantize is
    one f32 subtraction and one f32 product, correctly rounded everywhere: exact too."""
    u8 = lambda a: np.asarray(a, dtype=np.uint8)  # noqa: E731
    i8 = lambda a: np.asarray(a, dtype=np.int8)  # noqa: E731
    r = rng_for("quant")
    # x / scale lands exactly on ties (.5), both saturation ends, and ordinary values.
    ties = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -3.5, 0.0, -0.0, 1e6, -1e6]
    s0 = 0.25
    xt = f32(np.concatenate([np.array(ties) * s0, r.standard_normal(12) * 20])).reshape(3, 8)
    single("quant_per_tensor_u8", "quantize", [("x", xt, "input"), ("scale", f32(s0), "const"), ("zp", u8(128), "const")],
           family="exact", desc="quantize per tensor to u8, zp 128: ties to even, both saturation ends")
    single("quant_per_tensor_i8_scalar_param", "quantize",
           [("x", xt, "input"), ("scale", f32(0.1), "param"), ("zp", i8(-3), "param")],
           family="exact", desc="quantize per tensor to i8 (scale 0.1: ties decided by the f32 quotient), params")
    single("quant_no_zp_u8", "quantize", [("x", xt, "input"), ("scale", f32(0.5), "const")], family="exact",
           desc="quantize without zero point: u8, negatives saturate to 0")
    single("quant_no_zp_i8", "quantize", [("x", xt, "input"), ("scale", f32(0.5), "const")], {"dtype": "i8"},
           family="exact", desc="quantize without zero point, dtype i8")
    xn = f32([np.nan, np.inf, -np.inf, -np.nan, 0.125, -0.125, 0.375, 1e30])
    single("quant_nan_inf_u8", "quantize", [("x", xn, "input"), ("scale", f32(0.25), "const"), ("zp", u8(10), "const")],
           family="exact", desc="quantize NaN (-> the zero point, rlx's rule), +-inf and 1e30 (saturate), ties at 0.5, 1.5")
    xh = np.asarray(np.clip(xt, -60000, 60000), dtype=np.float16)
    single("quant_f16_input_i8", "quantize", [("x", xh, "input"), ("scale", np.float16(0.25), "const"), ("zp", i8(1), "const")],
           family="exact", desc="quantize f16 x with an f16 scale (widened to f32, then as f32)")
    single("dequant_f16_scale", "dequantize", [("q", i8([[-128, -1, 0, 1, 127]]), "input"), ("scale", np.float16(0.0999), "const")],
           family="exact", desc="dequantize with an f16 scale: the product in f32, rounded to f16")
    xa = f32(r.standard_normal((2, 3, 4)) * 40)
    xa[0, 0, :] = [0.25, 0.75, -0.25, -0.75]  # ties at scale 0.5
    single("quant_per_axis_i8", "quantize",
           [("x", xa, "input"), ("scale", f32([0.5, 0.2, 3.0]), "input"), ("zp", i8([0, -100, 50]), "input")],
           family="exact", desc="quantize per axis 1 to i8, zero points from inputs (saturating at both ends)")
    single("quant_per_axis_last_u8", "quantize",
           [("x", xa, "input"), ("scale", f32([0.5, 1.0, 0.3, 2.0]), "const"), ("zp", u8([0, 10, 128, 255]), "const")],
           {"axis": -1}, family="exact", desc="quantize per axis -1 to u8")
    xb = f32(r.standard_normal((4, 6)) * 10)
    sb = f32(r.uniform(0.05, 0.5, (4, 2)))
    single("quant_blocked_i8", "quantize",
           [("x", xb, "input"), ("scale", sb, "const"), ("zp", i8(r.integers(-5, 6, (4, 2))), "const")],
           {"axis": 1, "block_size": 4}, family="exact",
           desc="blocked quantize, axis 1, block 4 over 6 columns (last block short)")
    single("quant_blocked_axis0_u8", "quantize",
           [("x", xb, "input"), ("scale", f32(r.uniform(0.05, 0.5, (2, 6))), "const")],
           {"axis": 0, "block_size": 2}, family="exact", desc="blocked quantize, axis 0, block 2, no zero point")

    qa = u8(r.integers(0, 256, (3, 8)))
    qa[0, :4] = [0, 255, 128, 127]
    single("dequant_per_tensor_u8", "dequantize", [("q", qa, "input"), ("scale", f32(0.0123), "const"), ("zp", u8(128), "const")],
           family="exact", desc="dequantize u8 per tensor")
    qi = i8(r.integers(-128, 128, (3, 5)))
    qi[0, :2] = [-128, 127]
    single("dequant_per_axis0_i8", "dequantize",
           [("q", qi, "input"), ("scale", f32([0.5, 0.01, 3.0]), "input"), ("zp", i8([0, -7, 100]), "input")],
           {"axis": 0}, family="exact", desc="dequantize i8 per axis 0, zero points from an input")
    qw = i8(r.integers(-128, 128, (4, 6)))
    single("dequant_blocked_param_i8", "dequantize",
           [("q", qw, "param"), ("scale", f32(r.uniform(0.01, 0.1, (4, 2))), "param"), ("zp", i8(r.integers(-3, 4, (4, 2))), "param")],
           {"axis": -1, "block_size": 4}, family="exact",
           desc="dequantize an i8 weight param, blocked along the last axis (block 4 over 6)")
    single("dequant_i32_no_zp", "dequantize", [("q", np.asarray([[-70000, 3, 0], [12345, -1, 65536]], dtype=np.int32), "input"),
                                               ("scale", f32(0.001), "const")],
           family="exact", desc="dequantize i32 without zero point (the MatMulInteger result scale)")

    ma = u8(r.integers(0, 256, (3, 7)))
    mb = u8(r.integers(0, 256, (7, 5)))
    single("matmul_integer_u8", "matmul_integer", [("a", ma, "input"), ("b", mb, "param"), ("az", u8(131), "const"), ("bz", u8(7), "const")],
           family="exact", desc="matmul_integer u8 x u8 with scalar zero points")
    single("matmul_integer_i8_u8_rows_cols", "matmul_integer",
           [("a", i8(r.integers(-128, 128, (2, 3, 6))), "input"), ("b", u8(r.integers(0, 256, (6, 4))), "input"),
            ("az", i8(r.integers(-20, 20, (3,))), "const"), ("bz", u8(r.integers(0, 256, (4,))), "const")],
           family="exact", desc="matmul_integer i8 [2,3,6] x u8 [6,4], zero point per row of a and per column of b")
    single("matmul_integer_batched_no_zp", "matmul_integer",
           [("a", i8(r.integers(-128, 128, (2, 1, 3, 5))), "input"), ("b", i8(r.integers(-128, 128, (4, 5, 2))), "input")],
           family="exact", desc="matmul_integer i8, no zero points, batch dims broadcast [2,1] x [4]")
    single("matmul_integer_full_zp", "matmul_integer",
           [("a", u8(r.integers(0, 256, (2, 3, 4))), "input"), ("b", u8(r.integers(0, 256, (2, 4, 3))), "input"),
            ("az", u8(r.integers(0, 256, (2, 3, 1))), "input"), ("bz", u8(r.integers(0, 256, (2, 1, 3))), "input")],
           family="exact", desc="matmul_integer u8, zero points [2,3,1] and [2,1,3] (per batch row / column)")

    # i8/u8 through the data-movement ops and cast
    dq = u8(r.integers(0, 256, (2, 3, 4)))
    di = i8(r.integers(-128, 128, (2, 3, 4)))
    single("u8_transpose", "transpose", [("x", dq, "input")], {"perm": [2, 0, 1]}, family="exact", desc="transpose of u8")
    single("i8_slice", "slice", [("x", di, "input")], {"starts": [2, 0], "ends": [-100, 3], "axes": [2, 1], "steps": [-1, 2]},
           family="exact", desc="slice of i8 with negative steps")
    single("u8_pad", "pad", [("x", dq, "input")], {"pads": [0, 1, 0, 0, 0, 2], "value": 255.0}, family="exact",
           desc="constant pad of u8 with 255")
    single("i8_gather", "gather", [("x", di, "input"), ("idx", np.asarray([[2, 0], [-1, 1]], dtype=np.int64), "input")], {"axis": 1},
           family="exact", desc="gather of i8 along axis 1 (negative index)")
    single("u8_where", "where", [("c", r.integers(0, 2, (3, 1)).astype(bool), "input"), ("x", dq, "input"),
                                 ("z", u8(r.integers(0, 256, (4,))), "input")], family="exact", desc="where over u8, broadcast")
    single("i8_concat", "concat", [("a", di, "input"), ("b", i8(r.integers(-128, 128, (2, 1, 4))), "const")], {"axis": 1},
           family="exact", desc="concat of i8 input and i8 constant")
    single("i8_broadcast_to", "broadcast_to", [("x", i8([[1], [-128], [127]]), "input")], {"shape": [2, 3, 4]}, family="exact",
           desc="broadcast_to of i8")
    single("u8_embedding", "embedding", [("table", u8(r.integers(0, 256, (5, 3))), "param"),
                                         ("idx", np.asarray([[4, 0], [2, 2]], dtype=np.int32), "input")],
           family="exact", desc="embedding rows of a u8 table")
    single("u8_reshape_narrow", "narrow", [("x", dq, "input")], {"axis": 2, "start": 1, "length": 2}, family="exact",
           desc="narrow of u8")
    cv = f32([-300.0, -128.9, -128.0, -1.7, -0.5, 0.0, 0.99, 1.5, 127.9, 128.0, 255.5, 256.0, 1e9, -1e9, 3.0, -3.0])
    single("cast_f32_to_u8", "cast", [("x", cv.reshape(4, 4), "input")], {"dtype": "u8"}, family="exact",
           desc="cast f32 -> u8: truncation toward zero, saturated")
    single("cast_f32_to_i8", "cast", [("x", cv.reshape(4, 4), "input")], {"dtype": "i8"}, family="exact",
           desc="cast f32 -> i8: truncation toward zero, saturated")
    ci = np.asarray([[-300, -129, -128, -1], [0, 127, 128, 255], [256, 257, 511, -257]], dtype=np.int32)
    single("cast_i32_to_u8", "cast", [("x", ci, "input")], {"dtype": "u8"}, family="exact",
           desc="cast i32 -> u8: the low 8 bits (as i64 -> i32 keeps the low 32)")
    single("cast_i32_to_i8", "cast", [("x", ci, "input")], {"dtype": "i8"}, family="exact", desc="cast i32 -> i8: the low 8 bits")
    single("cast_u8_to_f32", "cast", [("x", dq, "input")], {"dtype": "f32"}, family="exact", desc="cast u8 -> f32")
    single("cast_i8_to_i32", "cast", [("x", di, "input")], {"dtype": "i32"}, family="exact", desc="cast i8 -> i32")
    single("cast_u8_to_i8", "cast", [("x", dq, "input")], {"dtype": "i8"}, family="exact", desc="cast u8 -> i8 (wraps)")

    # matmul_nbits (ONNX Runtime's MatMulNBits): 4-bit weights, blocks of 16/32, a short last
    # block, packed zero points or the default 8, and an 8-bit variant
    def nbits(name, M, K, N, bits, bs, with_zp, lead=()):
        rr = rng_for(name)
        kb = -(-K // bs)
        blob = bs * bits // 8
        gb = GB(name)
        a = f32(rr.standard_normal(lead + (M, K)))
        bq = u8(rr.integers(0, 256, (N, kb, blob)))
        sc = f32(rr.uniform(0.01, 0.1, (N, kb)))
        gb.input("a", a.shape)
        gb.param("b", bq.shape, dtype="u8")
        gb.param("scales", sc.shape)
        ins = ["a", "b", "scales"]
        params = {"b": (bq, "u8"), "scales": (sc, "f32")}
        if with_zp:
            zp = u8(rr.integers(0, 256, (N, -(-kb * bits // 8))))
            gb.param("zp", zp.shape, dtype="u8")
            params["zp"] = (zp, "u8")
            ins.append("zp")
        gb.op("y", "matmul_nbits", ins, k=K, n=N, bits=bits, block_size=bs)
        gb.output("y")
        add(Case(name, gb, {"a": a}, params, "accumulate", True,
                 f"matmul_nbits {bits}-bit, K {K} in blocks of {bs}, N {N}, " + ("packed zero points" if with_zp else "default zero point")))
    nbits("matmul_nbits_4bit_zp", 3, 40, 5, 4, 16, True)
    nbits("matmul_nbits_4bit_default_zp", 2, 64, 3, 4, 32, False, (2,))
    nbits("matmul_nbits_8bit_zp", 2, 20, 4, 8, 16, True)

    # quantize -> matmul_integer -> dequantize (the QLinearMatMul composition), one graph
    gb = GB("quant_chain")
    x = f32(r.standard_normal((3, 8)))
    w = i8(r.integers(-127, 128, (8, 4)))
    gb.input("x", x.shape)
    gb.param("w", w.shape, dtype="i8")
    gb.const("sx", 0.02)
    gb.const("zx", 128, dtype="u8")
    gb.const("sy", 0.003)
    gb.op("q", "quantize", ["x", "sx", "zx"])
    gb.op("acc", "matmul_integer", ["q", "w", "zx"])
    gb.op("y", "dequantize", ["acc", "sy"])
    gb.op("wt", "transpose", ["w"])
    gb.output("q", "acc", "y", "wt")
    add(Case("quant_chain", gb, {"x": x}, {"w": (w, "i8")}, "exact", True,
             "quantize -> matmul_integer (u8 x i8 param) -> dequantize, and an i8 param transposed"))


def build_onnx_op_cases():
    """Cases of the ONNX-style ops (issue 12). Selection, indexing, rounding, compares and integer
    results are bit-exact in a correct implementation: they use the exact family."""
    i32 = lambda a: np.asarray(a, dtype=np.int32)  # noqa: E731
    i64 = lambda a: np.asarray(a, dtype=np.int64)  # noqa: E731
    r = rng_for("onnx_unary")
    ties = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.0, 0.0, 3.0, -3.0, 0.49999997, 1e-3]
    x = f32(np.concatenate([r.standard_normal(28) * 3, ties])).reshape(4, 10)
    for op in ("floor", "ceil", "round", "sign"):
        single(f"op_{op}", op, [("x", x, "input")], family="exact",
               desc=f"{op} incl. halves (round: half to even), signed zeros")
    single("op_sign_i64", "sign", [("x", i64([[-7, 0, 5], [3, -1, 0]]), "input")], family="exact",
           desc="sign of i64 -> i64")
    single("op_floor_i32", "floor", [("x", i32([[-7, 0, 5], [3, -1, 16777215]]), "input")], family="exact",
           desc="floor of i32 -> i32 (identity)")
    sp = f32(np.concatenate([r.standard_normal(30) * 4, [-90, -30, -1e-4, 0, 1e-4, 20, 30, 90, 5, -5]]))
    single("op_softplus", "softplus", [("x", sp.reshape(5, 8), "input")], family="transcendental",
           desc="softplus incl. large |x| (stable form, no overflow)")
    single("op_logical_not", "logical_not", [("x", r.integers(0, 2, (3, 4)).astype(bool), "input")],
           family="exact", desc="logical_not bool -> bool")

    # ---- compares and logical (-> bool), with broadcasting and integer inputs ----
    r = rng_for("onnx_compare")
    a = f32(r.integers(-2, 3, (2, 3, 4)) * 0.5)
    b = f32(r.integers(-2, 3, (4,)) * 0.5)
    single("op_equal", "equal", [("a", a, "input"), ("b", b, "input")], family="exact",
           desc="equal [2,3,4] vs [4] (many equal pairs)")
    single("op_less", "less", [("a", a, "input"), ("b", f32(r.integers(-2, 3, (3, 1)) * 0.5), "input")],
           family="exact", desc="less [2,3,4] vs [3,1]")
    single("op_less_equal", "less_equal", [("a", f32(r.integers(-2, 3, (2, 1, 4)) * 0.5), "input"),
                                           ("b", f32(r.integers(-2, 3, (3, 1)) * 0.5), "input")],
           family="exact", desc="less_equal [2,1,4] vs [3,1] (both broadcast)")
    single("op_greater_i32", "greater", [("a", i32(r.integers(-3, 4, (3, 4))), "input"),
                                         ("b", i32(r.integers(-3, 4, (1, 4))), "input")],
           family="exact", desc="greater on i32 [3,4] vs [1,4]")
    single("op_greater_equal_i64", "greater_equal", [("a", i64(r.integers(-3, 4, (3, 4))), "input"),
                                                     ("b", i64(1), "const")],
           family="exact", desc="greater_equal on i64 vs a rank-0 i64 constant")
    ba = r.integers(0, 2, (2, 3, 4)).astype(bool)
    bb = r.integers(0, 2, (3, 1)).astype(bool)
    for op in ("logical_and", "logical_or", "logical_xor"):
        single(f"op_{op}", op, [("a", ba, "input"), ("b", bb, "input")], family="exact",
               desc=f"{op} bool [2,3,4] vs [3,1]")

    # ---- mod ----
    r = rng_for("onnx_mod")
    ia = i32(r.integers(-20, 21, (3, 5)))
    ib = i32([[3, -3, 7, -7, 1]])
    single("op_mod_i32", "mod", [("a", ia, "input"), ("b", ib, "input")], family="exact",
           desc="mod i32, fmod=0: sign of the divisor (negative a and b)")
    single("op_mod_fmod_i64", "mod", [("a", ia.astype(np.int64), "input"), ("b", ib.astype(np.int64), "input")],
           {"fmod": True}, family="exact", desc="mod i64 with fmod=1: sign of the dividend")
    fa = f32(r.uniform(-10, 10, (3, 5)))
    fb = f32([[2.5, -2.5, 0.75, -3.0, 1.0]])
    single("op_mod_fmod_f32", "mod", [("a", fa, "input"), ("b", fb, "input")], {"fmod": True},
           desc="mod f32 with fmod=1 (C fmod)")
    single("op_mod_f32", "mod", [("a", fa, "input"), ("b", fb, "input")],
           desc="mod f32 with fmod=0 (floored, NumPy's mod)")

    # ---- where ----
    r = rng_for("onnx_where")
    single("op_where", "where", [("c", r.integers(0, 2, (2, 1, 4)).astype(bool), "input"),
                                 ("x", f32(r.standard_normal((2, 3, 4))), "input"),
                                 ("v", f32(r.standard_normal((3, 1))), "input")], family="exact",
           desc="where, cond [2,1,4], x [2,3,4], v [3,1]: all three broadcast")
    single("op_where_i64", "where", [("c", r.integers(0, 2, (3, 1)).astype(bool), "input"),
                                     ("x", i64(r.integers(-50, 50, (3, 4))), "input"),
                                     ("v", i64(-1), "const")], family="exact",
           desc="where on i64 values with a rank-0 constant")

    # ---- min / prod ----
    r = rng_for("onnx_reduce")
    x = f32(r.standard_normal((2, 3, 4, 5)))
    single("op_min_axes", "min", [("x", x, "input")], {"axes": [1, -1]}, family="exact", desc="min axes [1,-1]")
    single("op_min_all_keepdims", "min", [("x", x, "input")], {"keepdims": True}, family="exact",
           desc="min over all axes, keepdims")
    single("op_min_i32", "min", [("x", i32(r.integers(-100, 100, (3, 4))), "input")], {"axes": [0]},
           family="exact", desc="min of i32 over axis 0 -> i32")
    single("op_prod_axes", "prod", [("x", f32(r.uniform(0.5, 1.5, (2, 3, 4, 5)) * r.choice([-1, 1], (2, 3, 4, 5))),
                                     "input")], {"axes": [0, 2], "keepdims": True}, family="reduction",
           desc="prod axes [0,2] keepdims (signed values)")
    single("op_prod_all", "prod", [("x", f32(r.uniform(0.8, 1.25, (3, 4))), "input")], family="reduction",
           desc="prod over all axes")

    # ---- argmax / argmin (ties from small integer values) ----
    r = rng_for("onnx_arg")
    t = f32(r.integers(0, 4, (3, 4, 5)))
    single("op_argmax", "argmax", [("x", t, "input")], family="exact", desc="argmax defaults (axis 0, keepdims), ties")
    single("op_argmax_last", "argmax", [("x", t, "input")], {"axis": -1, "keepdims": False, "select_last_index": True},
           family="exact", desc="argmax axis -1, no keepdims, select_last_index (ties pick the last)")
    single("op_argmin", "argmin", [("x", t, "input")], {"axis": 1}, family="exact", desc="argmin axis 1, ties pick the first")
    single("op_argmin_last_i64", "argmin", [("x", i64(r.integers(0, 3, (4, 6))), "input")],
           {"axis": -1, "select_last_index": True}, family="exact", desc="argmin of i64, select_last_index")

    # ---- cumsum ----
    r = rng_for("onnx_cumsum")
    x = f32(r.standard_normal((3, 4, 5)))
    single("op_cumsum", "cumsum", [("x", x, "input")], {"axis": 1}, family="reduction", desc="cumsum axis 1")
    single("op_cumsum_exclusive", "cumsum", [("x", x, "input")], {"axis": -1, "exclusive": True},
           family="reduction", desc="cumsum axis -1, exclusive")
    single("op_cumsum_reverse", "cumsum", [("x", x, "input")], {"axis": 0, "reverse": True},
           family="reduction", desc="cumsum axis 0, reverse")
    single("op_cumsum_exclusive_reverse", "cumsum", [("x", x, "input")],
           {"axis": -2, "exclusive": True, "reverse": True}, family="reduction", desc="cumsum axis -2, exclusive and reverse")
    single("op_cumsum_i64", "cumsum", [("x", i64(r.integers(-9, 10, (2, 6))), "input")], {"axis": 1},
           family="exact", desc="cumsum of i64 -> i64")

    # ---- topk ----
    r = rng_for("onnx_topk")
    x = f32(r.standard_normal((3, 7)))
    tt = f32(r.integers(0, 3, (2, 6, 3)))
    single("op_topk", "topk", [("x", x, "input")], {"k": 3}, family="exact", desc="topk k 3, axis -1, largest, values")
    single("op_topk_indices", "topk", [("x", x, "input")], {"k": 4, "select": "indices"}, family="exact",
           desc="topk k 4 indices")
    single("op_topk_ties_indices", "topk", [("x", tt, "input")], {"k": 4, "axis": 1, "select": "indices"},
           family="exact", desc="topk ties (values 0..2) on axis 1: equal values in index order")
    single("op_topk_smallest", "topk", [("x", tt, "input")], {"k": 2, "axis": 0, "largest": False},
           family="exact", desc="topk smallest, axis 0, values")
    single("op_topk_smallest_ties_indices", "topk", [("x", tt, "input")],
           {"k": 3, "axis": -1, "largest": False, "select": "indices"}, family="exact",
           desc="topk smallest indices with ties, k = axis size")

    # ---- gather / gather_elements (negative indices wrap) ----
    r = rng_for("onnx_gather")
    d = f32(r.standard_normal((5, 3)))
    single("op_gather", "gather", [("d", d, "input"), ("i", i64([[0, -1], [4, -5]]), "input")], family="exact",
           desc="gather axis 0, i64 indices [2,2] incl. -1 and -5")
    d3 = f32(r.standard_normal((2, 3, 4)))
    single("op_gather_neg_axis", "gather", [("d", d3, "input"), ("i", i32([-4, 3, 0, -1, 1]), "input")],
           {"axis": -1}, family="exact", desc="gather axis -1, i32 indices with negatives")
    single("op_gather_scalar_index", "gather", [("d", d3, "input"), ("i", i64(-2), "input")], {"axis": 1},
           family="exact", desc="gather a rank-0 index -2 on axis 1 (drops the axis)")
    single("op_gather_i64_data", "gather", [("d", i64(r.integers(-1000, 1000, (4, 3))), "param"),
                                            ("i", i32([[1, 3, -4]]), "input")], {"axis": 0}, family="exact",
           desc="gather rows of an i64 param")
    single("op_gather_elements", "gather_elements", [("d", f32(r.standard_normal((3, 4))), "input"),
                                                     ("i", i64([[0, -1], [3, 2], [-4, 1]]), "input")],
           {"axis": 1}, family="exact", desc="gather_elements axis 1, indices [3,2] incl. negatives")
    single("op_gather_elements_axis0", "gather_elements",
           [("d", f32(r.standard_normal((4, 3, 2))), "input"), ("i", i32(r.integers(-4, 4, (2, 2, 1))), "input")],
           family="exact", desc="gather_elements axis 0, indices [2,2,1] smaller than data [4,3,2] on every axis")

    # ---- slice (ONNX clamping, negative steps) ----
    r = rng_for("onnx_slice")
    x = f32(r.standard_normal((4, 5, 6)))
    big, small = 9223372036854775807, -9223372036854775808
    single("op_slice", "slice", [("x", x, "input")], {"starts": [1], "ends": [3], "axes": [1]}, family="exact",
           desc="slice axis 1 [1:3]")
    single("op_slice_neg_step", "slice", [("x", x, "input")], {"starts": [-1], "ends": [-1000], "axes": [-1],
                                                              "steps": [-2]}, family="exact",
           desc="slice axis -1 from the last element backwards, step -2, end clamped past the front")
    single("op_slice_clamped", "slice", [("x", x, "input")], {"starts": [-100, 1], "ends": [100, big], "axes": [0, 2]},
           family="exact", desc="slice with out-of-range starts/ends (incl. INT64_MAX) clamped")
    single("op_slice_reverse_all", "slice", [("x", x, "input")], {"starts": [big, 3], "ends": [small, 0],
                                                                 "steps": [-1, -1]},
           family="exact", desc="slice default axes [0,1]: INT64_MAX..INT64_MIN step -1 (full reverse), 3..0 step -1")
    single("op_slice_steps", "slice", [("x", x, "input")], {"starts": [0, -2, 1], "ends": [4, -6, 6],
                                                           "axes": [2, 1, 0], "steps": [3, -2, 2]},
           family="exact", desc="slice three axes out of order with steps 3, -2, 2")

    # ---- pad ----
    r = rng_for("onnx_pad")
    x = f32(r.standard_normal((3, 4)))
    single("op_pad_constant", "pad", [("x", x, "input")], {"pads": [1, 0, 2, 1], "value": 1.5}, family="exact",
           desc="pad constant 1.5, pads [1,0,2,1]")
    single("op_pad_negative", "pad", [("x", x, "input")], {"pads": [-1, 2, 0, -3]}, family="exact",
           desc="pad with negative pads (crop rows at the front, columns at the end)")
    single("op_pad_reflect", "pad", [("x", x, "input")], {"pads": [2, 1, 1, 3], "mode": "reflect"}, family="exact",
           desc="pad reflect, pads up to size - 1")
    single("op_pad_edge", "pad", [("x", f32(r.standard_normal((2, 3, 2))), "input")],
           {"pads": [0, 3, 2, 1, 0, 2], "mode": "edge"}, family="exact", desc="pad edge on rank 3")
    single("op_pad_reflect_crop", "pad", [("x", x, "input")], {"pads": [2, -1, -1, 2], "mode": "reflect"},
           family="exact", desc="pad reflect mixed with negative pads")

    # ---- trilu ----
    r = rng_for("onnx_trilu")
    single("op_trilu", "trilu", [("x", f32(r.standard_normal((2, 4, 5))), "input")], family="exact",
           desc="trilu upper (default), k 0, batched [2,4,5]")
    single("op_trilu_lower", "trilu", [("x", f32(r.standard_normal((5, 3))), "input")], {"upper": False, "k": -1},
           family="exact", desc="trilu lower, k -1, tall [5,3]")
    single("op_trilu_upper_k2", "trilu", [("x", f32(r.standard_normal((3, 6))), "input")], {"k": 2},
           family="exact", desc="trilu upper, k 2, wide [3,6]")

    # ---- graphs: compiled mode fuses compares into bool chains, folds constant indexing ----
    r = rng_for("onnx_graphs")
    gb = GB("op_compare_chain")
    gb.input("x", (3, 8))
    gb.const("half", 0.5)
    gb.const("zero", 0.0)
    gb.op("m", "greater", ["x", "half"])
    gb.op("nm", "logical_not", ["m"])
    gb.op("f", "floor", ["x"])
    gb.op("y", "where", ["nm", "f", "zero"])
    gb.output("m", "y")
    add(Case("op_compare_chain", gb, {"x": f32(r.standard_normal((3, 8)) * 2)}, family="exact",
             desc="greater -> logical_not (a bool chain compiled mode fuses) -> where over floor(x)"))
    gb = GB("op_fold_indexing")
    gb.input("x", (2, 3))
    gb.const("table", [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], (3, 3))
    gb.const("idx", [-1, 0], (2,), dtype="i64")
    gb.op("g", "gather", ["table", "idx"])
    gb.op("s", "slice", ["g"], starts=[-1], ends=[-1000], steps=[-1], axes=[1])
    gb.op("p", "cumsum", ["s"], axis=1)
    gb.op("y", "add", ["x", "p"])
    gb.output("y")
    add(Case("op_fold_indexing", gb, {"x": f32(r.standard_normal((2, 3)))}, family="elementwise",
             desc="gather/slice/cumsum over constants (folded in compiled mode), then add an input"))

# ----------------------------------------------------------------------------------------
# Self-checks of the reference

def self_checks():
    c = gl.Ctx("f64")
    r = np.random.default_rng(1234)
    h = 1e-6

    def num_grad(f, x, dy):
        g = np.zeros_like(x)
        it = np.nditer(x, flags=["multi_index"])
        for _ in it:
            i = it.multi_index
            xp, xm = x.copy(), x.copy()
            xp[i] += h
            xm[i] -= h
            g[i] = (np.sum(dy * f(xp)) - np.sum(dy * f(xm))) / (2 * h)
        return g

    def check(name, analytic, numeric):
        err = np.max(np.abs(analytic - numeric))
        scale = max(1.0, np.max(np.abs(numeric)))
        assert err <= 1e-7 * scale, f"VJP check {name}: max error {err:g}"
        return err

    errs = {}
    for eps in (1e-5, 1e-2):
        x = r.standard_normal((3, 9)) * 2 + 0.3
        dy = r.standard_normal((3, 9))
        errs[f"layer_norm_vjp eps={eps}"] = check("layer_norm_vjp", gl.layer_norm_vjp(c, dy, x, eps),
                                                  num_grad(lambda z: gl.layer_norm(c, z, None, None, eps), x, dy))
        errs[f"rms_norm_vjp eps={eps}"] = check("rms_norm_vjp", gl.rms_norm_vjp(c, dy, x, eps),
                                                num_grad(lambda z: gl.rms_norm(c, z, None, eps), x, dy))
    for ax in (-1, 0):
        z = r.standard_normal((4, 6)) * 2
        dy = r.standard_normal((4, 6))
        errs[f"softmax_vjp axis={ax}"] = check("softmax_vjp", gl.softmax_vjp(c, dy, gl.softmax(c, z, ax), ax),
                                               num_grad(lambda t: gl.softmax(c, t, ax), z, dy))
    x = np.concatenate([r.standard_normal(40) * 3, [0.0, -8, 8, 1e-4]]).reshape(4, 11)
    dy = r.standard_normal(x.shape)
    errs["silu_vjp"] = check("silu_vjp", dy * gl.silu_grad(c, x), num_grad(lambda t: t * gl.sigmoid(c, t), x, dy))
    for ap in ("none", "tanh"):
        errs[f"gelu_vjp {ap}"] = check("gelu_vjp", dy * gl.gelu_grad(c, x, ap),
                                       num_grad(lambda t: gl.gelu(c, t, ap), x, dy))

    # gelu erf form against the normal CDF via math.erfc (independent formula)
    t = np.linspace(-8, 8, 161)
    cdf = np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in t])
    assert np.max(np.abs(gl.gelu(c, t, "none") - t * cdf)) < 1e-14

    # rope: complex-number formulation
    x = r.standard_normal((2, 5, 12))
    for trad in (False, True):
        dims, base, scale, off = 8, 300.0, 0.7, 4
        y = gl.rope(c, x, dims, base, trad, scale, off)
        ref = x.copy()
        for s in range(5):
            for i in range(dims // 2):
                th = (off + s) * scale * base ** (-2 * i / dims)
                ia, ib = (2 * i, 2 * i + 1) if trad else (i, i + dims // 2)
                z = (x[:, s, ia] + 1j * x[:, s, ib]) * np.exp(1j * th)
                ref[:, s, ia], ref[:, s, ib] = z.real, z.imag
        assert np.max(np.abs(y - ref)) < 1e-12, "rope self-check"

    # attention: explicit loops over heads, queries and keys
    B, Hq, Hkv, Sq, Sk, D, Dv = 2, 4, 2, 3, 5, 4, 3
    q, k, v = r.standard_normal((B, Hq, Sq, D)), r.standard_normal((B, Hkv, Sk, D)), r.standard_normal((B, Hkv, Sk, Dv))
    mask = r.random((B, 1, Sq, Sk)) > 0.3
    mask[0, 0, 1, :] = False
    out = gl.attention(c, q, k, v, mask, True, None, True)
    for b in range(B):
        for hh in range(Hq):
            kv = hh // (Hq // Hkv)
            for i in range(Sq):
                sc = [(j, float(q[b, hh, i] @ k[b, kv, j]) / math.sqrt(D)) for j in range(Sk)
                      if j <= i + Sk - Sq and mask[b, 0, i, j]]
                if not sc:
                    ref = np.zeros(Dv)
                else:
                    m = max(s for _, s in sc)
                    w = [(j, math.exp(s - m)) for j, s in sc]
                    z = sum(e for _, e in w)
                    ref = sum(e / z * v[b, kv, j] for j, e in w)
                assert np.max(np.abs(out[b, hh, i] - ref)) < 1e-12, "attention self-check"

    # bf16 rounding: ties to even
    got = gl.round_bf16(np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 1 + 2 ** -8 + 2 ** -20]))
    assert list(got) == [1.0, 1 + 2 ** -6, -1.0, 1 + 2 ** -7], got
    return errs


# ----------------------------------------------------------------------------------------
# Generation

def rel(from_dir, path):
    return os.path.relpath(path, from_dir).replace(os.sep, "/")


def generate(verbose=False):
    """Returns ({repo-relative path: bytes}, report rows)."""
    files = {}
    rows = []
    for case in CASES:
        cdir = f"{GOLDEN}/{case.name}"
        doc = case.gb.doc()
        inputs_b = {k: npy_bytes(v) for k, v in case.inputs.items()}
        params_b = gl.encode_safetensors(case.params) if case.params else None
        if case.declare:
            # add the shapes the reference infers to every op node, so loaders check inference too
            g = gl.load_graph(text=dump_graph(doc).decode(), file_label=case.name)
            c = gl.Ctx("f64")
            vals = {}
            params = gl.decode_safetensors(params_b) if params_b else {}
            for n in g.nodes:
                if n.op == "input":
                    vals[n.id] = gl.leaf_value(c, n.dtype, case.inputs[n.id])
                elif n.op == "param":
                    vals[n.id] = gl.leaf_value(c, n.dtype, params[n.name][0])
                elif n.op == "constant":
                    vals[n.id] = gl.leaf_value(c, n.dtype, n.value)
                else:
                    vals[n.id] = gl.eval_node(c, g, n, vals)
            for nd in doc["nodes"]:
                if nd["op"] not in gl.LEAVES:
                    nd["shape"] = list(np.shape(vals[nd["id"]][0]))
        graph_b = dump_graph(doc)
        # paths
        if case.graph_path:
            gpath = case.graph_path
            ppath = case.params_path
            ipaths = {k: f"{case.inputs_dir}/{k}.npy" for k in case.inputs}
        else:
            gpath = f"{cdir}/graph.json"
            ppath = f"{cdir}/params.safetensors" if params_b else None
            ipaths = {k: f"{cdir}/{k}.npy" for k in case.inputs}
        files[gpath] = graph_b
        if ppath:
            files[ppath] = params_b
        for k, p in ipaths.items():
            files[p] = inputs_b[k]

        # evaluate from the bytes, in the reference precision and the f32 model
        g = gl.load_graph(text=graph_b.decode(), file_label=gpath)
        params = gl.decode_safetensors(params_b, ppath) if params_b else {}
        ins = {k: np.load(io.BytesIO(b)) for k, b in inputs_b.items()}
        ref = gl.run(g, ins, params, "f64")
        sim = gl.run(g, ins, params, "f32", noise_ulps=NOISE_ULPS, seed=zlib.crc32(case.name.encode()))
        atol, rtol, _ = FAMILIES[case.family]
        worst = 0.0
        expected = {}
        for oid, (a, t) in ref.items():
            stored = gl.to_storage(a, t)
            if t in gl.FLOAT_DTYPES:
                assert np.all(np.isfinite(stored)), f"{case.name}: non-finite expected output {oid}"
            else:
                assert case.family == "exact", f"{case.name}: integer/bool output {oid} needs the exact family"
            epath = f"{cdir}/expected_{oid}.npy"
            files[epath] = npy_bytes(stored)
            expected[oid] = rel(cdir, epath)
            s = np.asarray(sim[oid][0], dtype=np.float64)
            e = stored.astype(np.float64)
            err = np.abs(s - e)
            bound = atol + rtol * np.abs(e)
            if case.family == "exact":
                ratio = 0.0 if np.array_equal(s, e) else math.inf
            else:
                ratio = float(np.max(err / bound)) if err.size else 0.0
            worst = max(worst, ratio)
            if ratio > 1.0:
                raise AssertionError(f"{case.name}: the f32 model misses the tolerance on '{oid}' "
                                     f"(max err {np.max(err):.3g}, ratio {ratio:.3g})")
        cj = {"graph": rel(cdir, gpath), "params": [rel(cdir, ppath)] if ppath else [],
              "inputs": {k: rel(cdir, p) for k, p in ipaths.items()}, "expected": expected,
              "atol": atol, "rtol": rtol, "feeds": {}}
        files[f"{cdir}/case.json"] = (json.dumps(cj, indent=2) + "\n").encode()
        ops = sorted({n.op for n in g.nodes if n.op not in gl.LEAVES})
        rows.append((case.name, case.family, atol, rtol, worst, ", ".join(ops), case.desc))

    # the reference must cover every op of the spec
    covered = set()
    for case in CASES:
        covered |= {n["op"] for n in case.gb.doc()["nodes"]}
    missing = (set(gl.OPS) | gl.LEAVES) - covered
    assert not missing, f"ops without a golden case: {sorted(missing)}"

    # malformed graphs
    bad = build_bad()
    expect = {}
    for fn, text, nid, alts, what in bad:
        files[f"{GOLDEN}/bad/{fn}"] = text.encode()
        expect[fn] = [] if nid is None else [nid] + alts
        try:
            g = gl.load_graph(text=text, file_label=fn)
            gl.check_static(g)
        except gl.GraphError as e:
            ok = (e.node is None) if nid is None else (e.node in expect[fn])
            assert ok, f"bad/{fn}: reference error names {e.node!r}, README says {expect[fn]}: {e}"
        else:
            raise AssertionError(f"bad/{fn}: the reference loader accepted it")
    files[f"{GOLDEN}/bad/README.md"] = bad_readme(bad)
    files[f"{GOLDEN}/bad/expected_errors.json"] = (json.dumps(expect, indent=2, sort_keys=True) + "\n").encode()
    files[f"{GOLDEN}/CASES.md"] = cases_md(rows)
    return files, rows


def cases_md(rows):
    lines = ["# Golden cases", "",
             "Generated by `scripts/gen_goldens.py` (do not edit by hand; see docs/goldens.md).",
             "`f32 model` is the worst |err| / (atol + rtol·|expected|) of an f32 NumPy evaluation of the",
             f"same graph with ±{NOISE_ULPS:g} ulp of noise on every op: how much of the tolerance a plain f32",
             "implementation uses (asserted ≤ 1).", "",
             "| case | ops | family | atol | rtol | f32 model | what |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, fam, atol, rtol, worst, ops, desc in rows:
        lines.append(f"| `{name}` | {ops} | {fam} | {atol:g} | {rtol:g} | {worst:.2f} | {desc} |")
    lines += ["", "## Tolerance families", "", "| family | atol | rtol | why |", "| --- | --- | --- | --- |"]
    for fam, (a, r_, why) in FAMILIES.items():
        lines.append(f"| {fam} | {a:g} | {r_:g} | {why} |")
    return ("\n".join(lines) + "\n").encode()


def main():
    ap = argparse.ArgumentParser(description="generate or check rlx golden cases and example graphs")
    ap.add_argument("--check", action="store_true", help="verify the files on disk match (exit 1 if not)")
    ap.add_argument("--list", action="store_true", help="print the cases and tolerances")
    args = ap.parse_args()
    t0 = time.time()
    errs = self_checks()
    goldens_conv.self_checks()
    build_op_cases()
    build_onnx_op_cases()
    build_quant_cases()
    goldens_conv.build(sys.modules[__name__])
    build_examples()
    build_gemm_epilogue_cases()
    build_half_cases()
    files, rows = generate()
    if args.list:
        for name, fam, atol, rtol, worst, ops, desc in rows:
            print(f"{name:44s} {fam:14s} atol={atol:<6g} rtol={rtol:<6g} f32-model={worst:5.2f}  {desc}")
        for k, v in errs.items():
            print(f"finite-difference check {k}: max |analytic - numeric| = {v:.2e}")
        return 0
    managed_dirs = sorted({os.path.dirname(p) for p in files})
    if args.check:
        bad = []
        for p, b in sorted(files.items()):
            full = os.path.join(ROOT, p)
            if not os.path.exists(full):
                bad.append(f"missing: {p}")
            elif open(full, "rb").read() != b:
                bad.append(f"differs: {p}")
        for d in managed_dirs:
            full = os.path.join(ROOT, d)
            if os.path.isdir(full):
                for fn in sorted(os.listdir(full)):
                    p = f"{d}/{fn}"
                    # graphs/*.onnx come from scripts/make_onnx_example.py (PyTorch), not from here
                    if os.path.isfile(os.path.join(full, fn)) and p not in files and not fn.endswith(".onnx"):
                        bad.append(f"stale (not generated): {p}")
        for d in sorted(os.listdir(os.path.join(ROOT, GOLDEN))):
            if os.path.isdir(os.path.join(ROOT, GOLDEN, d)) and f"{GOLDEN}/{d}" not in managed_dirs:
                bad.append(f"stale case directory: {GOLDEN}/{d}")
        if bad:
            print("gen_goldens --check: committed files are out of date (run scripts/gen_goldens.py):")
            for b in bad:
                print("  " + b)
            return 1
        print(f"gen_goldens --check: {len(files)} files, {len(rows)} cases up to date ({time.time() - t0:.1f}s)")
        return 0
    written = 0
    for p, b in sorted(files.items()):
        full = os.path.join(ROOT, p)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        if os.path.exists(full) and open(full, "rb").read() == b:
            continue
        tmp = full + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b)
        os.replace(tmp, full)
        written += 1
    # remove generated-looking leftovers in directories this script owns
    removed = 0
    for d in managed_dirs:
        full = os.path.join(ROOT, d)
        for fn in sorted(os.listdir(full)):
            p = f"{d}/{fn}"
            if os.path.isfile(os.path.join(full, fn)) and p not in files and \
                    (fn.endswith(".npy") or fn in ("case.json", "graph.json", "params.safetensors")):
                os.remove(os.path.join(full, fn))
                removed += 1
    total = sum(len(b) for p, b in files.items() if p.startswith(GOLDEN + "/"))
    print(f"gen_goldens: {len(rows)} cases, {len(files)} files ({written} written, {removed} removed), "
          f"tests/golden {total / 1024:.0f} KiB, {time.time() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
