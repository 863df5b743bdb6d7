#!/usr/bin/python3
"""Independent NumPy reference interpreter for rlx graph files (format version 1).

This module knows nothing about the C++ code: it reads a graph JSON file, validates it
against /work/shared/spec/graph-format.md (docs/graph-format.md in the repository), and
evaluates the nodes in dependency order.

Two precisions:
  * "f64" (the reference): every float op is computed in float64; leaves (inputs, params,
    constants) hold the values their declared dtype can represent (f32 values for f32). An op on
    f16/bf16 operands gives their dtype (all f16 -> f16, all bf16 -> bf16, else f32): its result
    is computed in float64 and rounded to that dtype (docs/graph-format.md, compute rules).
  * "f32" (a model of a plain f32 implementation): every float op rounds its inputs and
    result to float32 and computes with float32 NumPy ufuncs/BLAS. gen_goldens.py uses it to
    check that the tolerances it writes are passable by a correct f32 implementation.

Also a small safetensors reader/writer and a command line:
  python3 scripts/graphlib.py GRAPH.json [--params F.safetensors ...] [--input ID=x.npy ...]
                                         [--out DIR] [--f32]
which prints each output's shape/dtype and a few values, and writes OUT/<id>.npy when --out is given.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import graphlib_conv  # noqa: E402  (the convolution family)

FLOAT_DTYPES = ("f32", "f16", "bf16")
INT_DTYPES = ("i32", "i64")
# The quantized storage types: moved, cast and (de)quantized, never computed on.
QUANT_DTYPES = ("i8", "u8")
QUANT_RANGE = {"i8": (-128, 127), "u8": (0, 255)}
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",) + QUANT_DTYPES
NP_STORAGE = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i64": np.int64, "bool": np.bool_,
              "i8": np.int8, "u8": np.uint8}


class GraphError(Exception):
    """A graph that breaks the format. `node` is the id the message names (or None)."""

    def __init__(self, file, node, msg):
        self.file, self.node, self.msg = file, node, msg
        where = f"{file}: node '{node}': " if node is not None else f"{file}: "
        super().__init__(where + msg)


class RunError(GraphError):
    """A run-time error (bad binding, index out of range) naming a node."""


# ----------------------------------------------------------------------------------------
# Op table: arity and attributes (type, default). REQ marks attributes without a default.
REQ = object()
NONE = None  # default "absent": meaning given by the op (axes: all, perm: reversed, dims: D, scale: 1/sqrt(D))

BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum"]
UNARY = ["neg", "exp", "log", "sqrt", "rsqrt", "abs", "tanh", "sigmoid", "relu", "silu", "erf",
         "sin", "cos", "square"]

OPS = {}
for _o in BINARY:
    OPS[_o] = (2, 2, {})
for _o in UNARY:
    OPS[_o] = (1, 1, {})
OPS.update({
    "gelu": (1, 1, {"approximate": ("enum:none,tanh", "none")}),
    "sum": (1, 1, {"axes": ("ints", NONE), "keepdims": ("bool", False)}),
    "mean": (1, 1, {"axes": ("ints", NONE), "keepdims": ("bool", False)}),
    "max": (1, 1, {"axes": ("ints", NONE), "keepdims": ("bool", False)}),
    "softmax": (1, 1, {"axis": ("int", -1)}),
    "matmul": (2, 2, {"transpose_a": ("bool", False), "transpose_b": ("bool", False)}),
    "linear": (2, 3, {}),
    "reshape": (1, 1, {"shape": ("ints", REQ)}),
    "transpose": (1, 1, {"perm": ("ints", NONE)}),
    "broadcast_to": (1, 1, {"shape": ("ints", REQ)}),
    "narrow": (1, 1, {"axis": ("int", REQ), "start": ("int", REQ), "length": ("int", REQ)}),
    "concat": (1, 1 << 30, {"axis": ("int", REQ)}),
    "embedding": (2, 2, {}),
    "cast": (1, 1, {"dtype": ("enum:" + ",".join(ALL_DTYPES), REQ)}),
    "layer_norm": (1, 3, {"eps": ("float", 1e-5)}),
    "rms_norm": (1, 2, {"eps": ("float", 1e-6)}),
    "rope": (1, 2, {"dims": ("int", NONE), "base": ("float", 10000.0), "traditional": ("bool", False),
                    "scale": ("float", 1.0), "offset": ("int", 0)}),
    "scaled_masked_softmax": (1, 1, {"scale": ("float", 1.0), "causal": ("bool", False)}),
    "attention": (3, 4, {"scale": ("float", NONE), "causal": ("bool", False)}),
    "layer_norm_vjp": (2, 2, {"eps": ("float", 1e-5)}),
    "rms_norm_vjp": (2, 2, {"eps": ("float", 1e-6)}),
    "softmax_vjp": (2, 2, {"axis": ("int", -1)}),
    "silu_vjp": (2, 2, {}),
    "gelu_vjp": (2, 2, {"approximate": ("enum:none,tanh", "none")}),
})
# ONNX-style ops (issue 12): elementwise, compares, logical, where, reductions, selection, indexing.
ROUNDING = ["floor", "ceil", "round", "sign"]          # float -> f32, integer -> same integer dtype
COMPARE = ["equal", "less", "less_equal", "greater", "greater_equal"]  # -> bool
LOGICAL = ["logical_and", "logical_or", "logical_xor"]  # nonzero is true -> bool
for _o in ROUNDING + ["softplus", "logical_not"]:
    OPS[_o] = (1, 1, {})
for _o in COMPARE + LOGICAL:
    OPS[_o] = (2, 2, {})
OPS.update({
    "mod": (2, 2, {"fmod": ("bool", False)}),
    "where": (3, 3, {}),
    "min": (1, 1, {"axes": ("ints", NONE), "keepdims": ("bool", False)}),
    "prod": (1, 1, {"axes": ("ints", NONE), "keepdims": ("bool", False)}),
    "argmax": (1, 1, {"axis": ("int", 0), "keepdims": ("bool", True), "select_last_index": ("bool", False)}),
    "argmin": (1, 1, {"axis": ("int", 0), "keepdims": ("bool", True), "select_last_index": ("bool", False)}),
    "cumsum": (1, 1, {"axis": ("int", REQ), "exclusive": ("bool", False), "reverse": ("bool", False)}),
    "topk": (1, 1, {"k": ("int", REQ), "axis": ("int", -1), "largest": ("bool", True), "sorted": ("bool", True),
                    "select": ("enum:values,indices", "values")}),
    "gather": (2, 2, {"axis": ("int", 0)}),
    "gather_elements": (2, 2, {"axis": ("int", 0)}),
    "slice": (1, 1, {"starts": ("ints", REQ), "ends": ("ints", REQ), "axes": ("ints", NONE), "steps": ("ints", NONE)}),
    "pad": (1, 1, {"pads": ("ints", REQ), "mode": ("enum:constant,reflect,edge", "constant"), "value": ("float", 0.0)}),
    "trilu": (1, 1, {"upper": ("bool", True), "k": ("int", 0)}),
})
# Quantization (issue 19), ONNX QuantizeLinear / DequantizeLinear / MatMulInteger.
OPS.update({
    "quantize": (2, 3, {"axis": ("int", 1), "block_size": ("int", 0), "dtype": ("enum:i8,u8", NONE)}),
    "dequantize": (2, 3, {"axis": ("int", 1), "block_size": ("int", 0)}),
    "matmul_integer": (2, 4, {}),
    "matmul_nbits": (3, 4, {"k": ("int", REQ), "n": ("int", REQ), "bits": ("int", 4), "block_size": ("int", REQ)}),
})
# Ops that take i8/u8 operands (data movement, cast, quantization); every other op refuses them.
QUANT_OK = {"reshape", "transpose", "broadcast_to", "narrow", "concat", "cast", "slice", "pad", "gather",
            "gather_elements", "where", "quantize", "dequantize", "matmul_integer", "matmul_nbits"}
# Ops whose float results are exact (selection, data movement, rounding): no f32-model noise.
EXACT_OPS = {"where", "min", "argmax", "argmin", "topk", "gather", "gather_elements", "slice", "pad", "trilu",
             "floor", "ceil", "round", "sign", "dequantize"}
for _o, (_lo, _hi, _schema) in graphlib_conv.SPATIAL_OPS.items():
    OPS[_o] = (_lo, _hi, {k: (kind, REQ if (_o, k) in graphlib_conv.REQUIRED else d) for k, (kind, d) in _schema.items()})
LEAVES = {"input", "param", "constant"}
SHAPE_OPS = {"reshape", "transpose", "broadcast_to", "narrow", "concat", "embedding", "cast"}
NODE_KEYS = {
    "input": {"id", "op", "shape", "dtype"},
    "param": {"id", "op", "shape", "dtype", "name"},
    "constant": {"id", "op", "shape", "dtype", "value"},
}
OP_NODE_KEYS = {"id", "op", "inputs", "attrs", "shape", "dtype"}


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _check_attr(file, nid, key, kind, v):
    ok = True
    if kind == "bool":
        ok = isinstance(v, bool)
    elif kind == "int":
        ok = _is_int(v)
    elif kind == "float":
        ok = (_is_int(v) or isinstance(v, float)) and math.isfinite(float(v))
        if ok:
            v = float(v)
    elif kind == "ints":
        ok = isinstance(v, list) and all(_is_int(e) for e in v)
    elif kind == "floats":
        ok = isinstance(v, list) and all((_is_int(e) or isinstance(e, float)) and math.isfinite(e) for e in v)
        if ok:
            v = [float(e) for e in v]
    elif kind.startswith("enum:"):
        ok = isinstance(v, str) and v in kind[5:].split(",")
    if not ok:
        raise GraphError(file, nid, f"attribute '{key}' must be {kind.replace('enum:', 'one of ')}, got {json.dumps(v)}")
    return v


# ----------------------------------------------------------------------------------------
# Loading and validation

class Node:
    __slots__ = ("id", "op", "inputs", "attrs", "shape", "dtype", "name", "value", "index")


class Graph:
    def __init__(self):
        self.file = ""
        self.name = ""
        self.nodes = []  # topological order
        self.by_id = {}
        self.outputs = []


def load_graph(path=None, text=None, file_label=None):
    """Parses and validates a graph. Raises GraphError naming the node on any violation."""
    file = file_label or path or "<graph>"
    if text is None:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise GraphError(file, None, f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}")
    if not isinstance(doc, dict):
        raise GraphError(file, None, "top level must be an object")
    if doc.get("format") != "rlx.graph":
        raise GraphError(file, None, "'format' must be \"rlx.graph\"")
    if "version" not in doc:
        raise GraphError(file, None, "'version' is required")
    if doc["version"] != 1 or not _is_int(doc["version"]):
        raise GraphError(file, None, f"unsupported version {json.dumps(doc['version'])} (this reader knows version 1)")
    for k in doc:
        if k not in ("format", "version", "name", "nodes", "outputs"):
            raise GraphError(file, None, f"unknown top-level key '{k}'")
    nodes_json = doc.get("nodes")
    if not isinstance(nodes_json, list):
        raise GraphError(file, None, "'nodes' must be a list")
    g = Graph()
    g.file = file
    g.name = doc.get("name", "")
    raw = {}
    order = []
    for i, nj in enumerate(nodes_json):
        if not isinstance(nj, dict) or not isinstance(nj.get("id"), str):
            raise GraphError(file, None, f"nodes[{i}] must be an object with a string 'id'")
        nid = nj["id"]
        if nid in raw:
            raise GraphError(file, nid, f"duplicate id (nodes[{i}])")
        op = nj.get("op")
        if op not in OPS and op not in LEAVES:
            raise GraphError(file, nid, f"unknown op {json.dumps(op)}")
        allowed = NODE_KEYS[op] if op in LEAVES else OP_NODE_KEYS
        for k in nj:
            if k not in allowed:
                raise GraphError(file, nid, f"unknown key '{k}' for op '{op}'")
        n = Node()
        n.id, n.op, n.index = nid, op, i
        n.dtype = nj.get("dtype", None)
        if n.dtype is not None and n.dtype not in ALL_DTYPES:
            raise GraphError(file, nid, f"unknown dtype {json.dumps(n.dtype)}")
        n.shape = nj.get("shape", None)
        if n.shape is not None:
            if not isinstance(n.shape, list):
                raise GraphError(file, nid, "'shape' must be a list")
            for d in n.shape:
                if isinstance(d, str):
                    if op != "input":
                        raise GraphError(file, nid, f"symbolic dimension '{d}' is only allowed on input nodes")
                elif not (_is_int(d) and d >= 0):
                    raise GraphError(file, nid, f"bad dimension {json.dumps(d)}")
        n.name = nj.get("name", nid)
        n.value = nj.get("value", None)
        if op in LEAVES:
            if n.shape is None:
                raise GraphError(file, nid, f"'shape' is required on '{op}' nodes")
            if n.dtype is None:
                n.dtype = "f32"
            n.inputs = []
            n.attrs = {}
            if op == "constant":
                if "value" not in nj:
                    raise GraphError(file, nid, "constant needs 'value'")
                n.value = _constant_value(file, n)
                if n.dtype in QUANT_DTYPES:
                    lo, hi = QUANT_RANGE[n.dtype]
                    v = np.asarray(n.value, dtype=np.float64)
                    if np.any((v != np.trunc(v)) | (v < lo) | (v > hi)):
                        raise GraphError(file, nid, f"{n.dtype} constant value outside the integers [{lo}, {hi}]")
        else:
            ins = nj.get("inputs", [])
            if not isinstance(ins, list) or not all(isinstance(s, str) for s in ins):
                raise GraphError(file, nid, "'inputs' must be a list of ids")
            lo, hi, schema = OPS[op]
            if not (lo <= len(ins) <= hi):
                want = str(lo) if lo == hi else (f"{lo}..{hi}" if hi < (1 << 20) else f"at least {lo}")
                raise GraphError(file, nid, f"op '{op}' takes {want} inputs, got {len(ins)}")
            n.inputs = ins
            attrs = nj.get("attrs", {})
            if not isinstance(attrs, dict):
                raise GraphError(file, nid, "'attrs' must be an object")
            full = {}
            for k, v in attrs.items():
                if k not in schema:
                    raise GraphError(file, nid, f"unknown attribute '{k}' for op '{op}'")
                full[k] = _check_attr(file, nid, k, schema[k][0], v)
            for k, (kind, dflt) in schema.items():
                if k not in full:
                    if dflt is REQ:
                        raise GraphError(file, nid, f"attribute '{k}' is required for op '{op}'")
                    full[k] = dflt
            n.attrs = full
        raw[nid] = n
        order.append(n)
    for n in order:
        for s in n.inputs:
            if s not in raw:
                raise GraphError(file, n.id, f"input '{s}' is not a node id")
    # topological order (Kahn, stable in file order); a cycle names a node on it
    state = {}
    topo = []
    for root in order:
        if root.id in state:
            continue
        stack = [(root, 0)]
        state[root.id] = 1
        while stack:
            n, k = stack[-1]
            if k < len(n.inputs):
                stack[-1] = (n, k + 1)
                c = raw[n.inputs[k]]
                st = state.get(c.id)
                if st == 1:
                    raise GraphError(file, c.id, "the graph has a cycle through this node")
                if st is None:
                    state[c.id] = 1
                    stack.append((c, 0))
            else:
                state[n.id] = 2
                topo.append(n)
                stack.pop()
    g.nodes = topo
    g.by_id = raw
    outs = doc.get("outputs")
    if not isinstance(outs, list) or not outs:
        raise GraphError(file, None, "'outputs' must be a non-empty list of ids")
    for o in outs:
        if o not in raw:
            raise GraphError(file, o, "output is not a node id")
    g.outputs = outs
    return g


def _nested_shape(v):
    if isinstance(v, list):
        if not v:
            return [0]
        subs = [_nested_shape(e) for e in v]
        if any(s != subs[0] for s in subs):
            return None
        return None if subs[0] is None else [len(v)] + subs[0]
    return []


def _constant_value(file, n):
    v = n.value
    shp = _nested_shape(v)
    if shp is None:
        raise GraphError(file, n.id, "'value' is a ragged nested list")
    if isinstance(v, bool) or not (isinstance(v, (int, float, list))):
        raise GraphError(file, n.id, "'value' must be a number or a nested list of numbers")
    if isinstance(v, (int, float)):
        # a number: the scalar (or, leniently, every element of the declared shape)
        return np.full(n.shape, float(v))
    flat = np.array(v, dtype=np.float64).reshape(-1)
    numel = int(np.prod(n.shape)) if n.shape else 1
    if len(shp) == 1 and len(n.shape) != 1 and shp[0] == numel:
        return flat.reshape(n.shape)  # leniently: a flat row-major list
    if shp != list(n.shape):
        raise GraphError(file, n.id, f"'value' has shape {shp}, declared shape is {n.shape}")
    return flat.reshape(n.shape)


# ----------------------------------------------------------------------------------------
# Value representation: (array, dtype) where floats are float64 arrays (reference) or float32
# arrays (f32 model) holding values representable in the dtype; ints are int64; bool is bool.

def round_bf16(a):
    a32 = np.asarray(a, dtype=np.float32)
    bits = a32.view(np.uint32).astype(np.uint64)
    lsb = (bits >> 16) & 1
    r = ((bits + 0x7FFF + lsb) >> 16) << 16
    r = r.astype(np.uint32)
    nan = np.isnan(a32)
    out = r.view(np.float32).copy()
    out[nan] = np.nan
    return out.astype(np.float64)


def round_to(a, dtype):
    """Values of float array `a` as dtype `dtype` holds them (f32 first, like an f32 runtime)."""
    a = np.asarray(a, dtype=np.float64)
    if dtype == "f32":
        return a.astype(np.float32).astype(np.float64)
    if dtype == "f16":
        return a.astype(np.float32).astype(np.float16).astype(np.float64)
    if dtype == "bf16":
        return round_bf16(a)
    raise ValueError(dtype)


class Ctx:
    def __init__(self, precision):
        assert precision in ("f64", "f32")
        self.F = np.float64 if precision == "f64" else np.float32
        self.precision = precision

    def f(self, a):
        return np.asarray(a, dtype=self.F)


_erf_vec = np.vectorize(math.erf, otypes=[np.float64])


def erf(c, x):
    return c.f(_erf_vec(np.asarray(x, dtype=np.float64)))


def sigmoid(c, x):
    x = c.f(x)
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1 / (1 + np.exp(-x[pos]))
    e = np.exp(x[~pos])
    out[~pos] = e / (1 + e)
    return out


SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
INV_SQRT2 = 1.0 / math.sqrt(2.0)


def gelu(c, x, approximate):
    x = c.f(x)
    if approximate == "tanh":
        return c.F(0.5) * x * (1 + np.tanh(c.F(SQRT_2_OVER_PI) * (x + c.F(0.044715) * x * x * x)))
    return c.F(0.5) * x * (1 + erf(c, x * c.F(INV_SQRT2)))


def gelu_grad(c, x, approximate):
    x = c.f(x)
    if approximate == "tanh":
        k = c.F(SQRT_2_OVER_PI)
        u = k * (x + c.F(0.044715) * x ** 3)
        t = np.tanh(u)
        return c.F(0.5) * (1 + t) + c.F(0.5) * x * (1 - t * t) * k * (1 + c.F(3 * 0.044715) * x * x)
    cdf = c.F(0.5) * (1 + erf(c, x * c.F(INV_SQRT2)))
    pdf = np.exp(-c.F(0.5) * x * x) * c.F(1.0 / math.sqrt(2 * math.pi))
    return cdf + x * pdf


def silu_grad(c, x):
    s = sigmoid(c, x)
    return s * (1 + c.f(x) * (1 - s))


def softmax(c, x, axis):
    x = c.f(x)
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def layer_norm(c, x, w, b, eps):
    x = c.f(x)
    mu = np.mean(x, axis=-1, keepdims=True)
    d = x - mu
    var = np.mean(d * d, axis=-1, keepdims=True)
    y = d / np.sqrt(var + c.F(eps))
    if w is not None:
        y = y * c.f(w)
    if b is not None:
        y = y + c.f(b)
    return y


def layer_norm_vjp(c, dy, x, eps):
    x, dy = c.f(x), c.f(dy)
    mu = np.mean(x, axis=-1, keepdims=True)
    d = x - mu
    var = np.mean(d * d, axis=-1, keepdims=True)
    rstd = 1 / np.sqrt(var + c.F(eps))
    xhat = d * rstd
    return rstd * (dy - np.mean(dy, axis=-1, keepdims=True) - xhat * np.mean(dy * xhat, axis=-1, keepdims=True))


def rms_norm(c, x, w, eps):
    x = c.f(x)
    r = 1 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + c.F(eps))
    y = x * r
    if w is not None:
        y = y * c.f(w)
    return y


def rms_norm_vjp(c, dy, x, eps):
    x, dy = c.f(x), c.f(dy)
    r = 1 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + c.F(eps))
    return r * dy - x * (r ** 3) * np.mean(dy * x, axis=-1, keepdims=True)


def softmax_vjp(c, dy, y, axis):
    dy, y = c.f(dy), c.f(y)
    return y * (dy - np.sum(dy * y, axis=axis, keepdims=True))


def rope(c, x, dims, base, traditional, scale, offset):
    x = c.f(x)
    S, D = x.shape[-2], x.shape[-1]
    half = dims // 2
    pos = (offset + np.arange(S)).astype(np.float64)
    inv = np.asarray(base, dtype=np.float64) ** (-2.0 * np.arange(half, dtype=np.float64) / dims)
    if c.precision == "f32":
        inv = inv.astype(np.float32)
        theta = (pos.astype(np.float32)[:, None] * np.float32(scale)) * inv[None, :]
    else:
        theta = pos[:, None] * scale * inv[None, :]
    cos, sin = np.cos(theta), np.sin(theta)  # [S, half]
    y = x.copy()
    if traditional:
        a, b = x[..., 0:dims:2], x[..., 1:dims:2]
        y[..., 0:dims:2] = a * cos - b * sin
        y[..., 1:dims:2] = a * sin + b * cos
    else:
        a, b = x[..., :half], x[..., half:dims]
        y[..., :half] = a * cos - b * sin
        y[..., half:dims] = a * sin + b * cos
    return y


def causal_keep(Sq, Sk):
    i = np.arange(Sq)[:, None]
    j = np.arange(Sk)[None, :]
    return j <= i + (Sk - Sq)


def masked_softmax(c, s, keep):
    """Softmax over the last axis where keep is True; rows with nothing kept give zeros."""
    s = c.f(s)
    neg = np.where(keep, s, -np.inf)
    m = np.max(neg, axis=-1, keepdims=True)
    any_kept = np.isfinite(m)
    m = np.where(any_kept, m, 0)
    e = np.where(keep, np.exp(np.where(keep, s, 0) - m), 0).astype(c.F)
    z = np.sum(e, axis=-1, keepdims=True)
    return np.where(any_kept, e / np.where(z > 0, z, 1), 0).astype(c.F)


def attention(c, q, k, v, mask, mask_is_bool, scale, causal):
    q, k, v = c.f(q), c.f(k), c.f(v)
    r = q.ndim
    assert r in (2, 3, 4)
    q4 = q.reshape((1,) * (4 - r) + q.shape)
    k4 = k.reshape((1,) * (4 - r) + k.shape)
    v4 = v.reshape((1,) * (4 - r) + v.shape)
    B, Hq, Sq, D = q4.shape
    Hkv, Sk = k4.shape[1], k4.shape[2]
    g = Hq // Hkv
    k4 = np.repeat(k4, g, axis=1)
    v4 = np.repeat(v4, g, axis=1)
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    s = np.matmul(q4, np.swapaxes(k4, -1, -2)) * c.F(scale)
    keep = np.ones((B, Hq, Sq, Sk), dtype=bool)
    if causal:
        keep = keep & causal_keep(Sq, Sk)
    if mask is not None:
        if mask_is_bool:
            keep = keep & np.broadcast_to(mask, (B, Hq, Sq, Sk))
        else:
            s = s + np.broadcast_to(c.f(mask), (B, Hq, Sq, Sk))
    p = masked_softmax(c, s, keep)
    o = np.matmul(p, v4)
    return o.reshape(q.shape[:-1] + (v.shape[-1],))


def _norm_axes(file, nid, axes, rank):
    out = []
    for a in axes:
        b = a + rank if a < 0 else a
        if not (0 <= b < rank):
            raise GraphError(file, nid, f"axis {a} out of range for rank {rank}")
        if b in out:
            raise GraphError(file, nid, f"axis {a} repeated")
        out.append(b)
    return tuple(out)


def _broadcast_shape(file, nid, a, b):
    try:
        return tuple(np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:
        raise GraphError(file, nid, f"shapes {list(a)} and {list(b)} do not broadcast")


def _value_dtype(t):
    return "f32" if t in FLOAT_DTYPES else t


def _int_result(T):
    """dtype of an integer-closed elementwise op over inputs of dtypes T."""
    if all(t in INT_DTYPES for t in T):
        return "i64" if "i64" in T else "i32"
    return "f32"


def _slice_plan(x_shape, A, err):
    """ONNX Slice: per axis (start, step, length) after clamping, written from the ONNX text."""
    r = len(x_shape)
    starts, ends = A["starts"], A["ends"]
    if len(ends) != len(starts):
        err("starts and ends differ in length")
    axes = A["axes"] if A["axes"] is not None else list(range(len(starts)))
    steps = A["steps"] if A["steps"] is not None else [1] * len(starts)
    if len(axes) != len(starts) or len(steps) != len(starts):
        err("axes/steps lengths differ from starts")
    plan = [(0, 1, d) for d in x_shape]
    seen = set()
    for s, e, a, st in zip(starts, ends, axes, steps):
        if not -r <= a < r:
            err(f"axis {a} out of range")
        a = a % r
        if a in seen:
            err(f"axis {a} repeated")
        seen.add(a)
        if st == 0:
            err("step 0")
        dim = x_shape[a]
        if s < 0:
            s += dim
        if e < 0:
            e += dim
        if st > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
        else:
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
        idx = list(range(s, e, st))
        plan[a] = (idx[0] if idx else 0, st, len(idx))
    return plan


def eval_onnx_op(c, n, X, T, err):
    """The ONNX-style ops; None for other ops."""
    op, A = n.op, n.attrs

    def numeric(i):
        if T[i] not in FLOAT_DTYPES + INT_DTYPES:
            err(f"input {i} ('{n.inputs[i]}') must be a number tensor, is {T[i]}")

    def val(i):  # floats in the working precision, integers as int64, bool as bool
        return c.f(X[i]) if T[i] in FLOAT_DTYPES else np.asarray(X[i])

    if op in ROUNDING:
        numeric(0)
        if T[0] in INT_DTYPES:
            return (np.sign(X[0]) if op == "sign" else X[0].copy()), T[0]
        x = c.f(X[0])
        fn = {"floor": np.floor, "ceil": np.ceil, "round": np.round, "sign": np.sign}[op]  # np.round: half to even
        return fn(x), "f32"
    if op == "softplus":
        if T[0] not in FLOAT_DTYPES:
            err("softplus needs a float input")
        x = c.f(X[0])
        return np.logaddexp(c.F(0), x), "f32"  # log(1 + e^x), computed without overflow
    if op == "logical_not":
        return np.asarray(X[0]) == 0, "bool"
    if op in COMPARE or op in LOGICAL:
        _broadcast_shape("", n.id, X[0].shape, X[1].shape)
        if op in COMPARE:
            numeric(0), numeric(1)
            a, b = np.asarray(X[0], dtype=np.float64), np.asarray(X[1], dtype=np.float64)
            fn = {"equal": np.equal, "less": np.less, "less_equal": np.less_equal, "greater": np.greater,
                  "greater_equal": np.greater_equal}[op]
            return fn(a, b), "bool"
        a, b = np.asarray(X[0]) != 0, np.asarray(X[1]) != 0
        return {"logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor}[op](a, b), "bool"
    if op == "mod":
        numeric(0), numeric(1)
        t = _int_result(T)
        if t != "f32":
            a, b = np.asarray(X[0], dtype=np.int64), np.asarray(X[1], dtype=np.int64)
            if np.any(b == 0):
                err("integer mod by zero")
        else:
            a, b = c.f(X[0]), c.f(X[1])
        return (np.fmod(a, b) if A["fmod"] else np.mod(a, b)), t
    if op == "where":
        cond = np.asarray(X[0]) != 0
        if (T[1] in FLOAT_DTYPES) != (T[2] in FLOAT_DTYPES) or (T[1] not in FLOAT_DTYPES and T[1] != T[2]):
            err(f"where needs x and y of one dtype, got {T[1]} and {T[2]}")
        try:
            np.broadcast_shapes(cond.shape, X[1].shape, X[2].shape)
        except ValueError:
            err("where inputs do not broadcast")
        return np.where(cond, val(1), val(2)), _value_dtype(T[1])
    if op in ("min", "prod"):
        numeric(0)
        x = val(0)
        axes = tuple(range(x.ndim)) if A["axes"] is None else _norm_axes("", n.id, A["axes"], x.ndim)
        if op == "min" and any(x.shape[a] == 0 for a in axes):
            err("min over an empty axis")
        fn = np.min if op == "min" else np.prod
        return fn(x, axis=axes, keepdims=A["keepdims"]), _value_dtype(T[0])
    if op in ("argmax", "argmin"):
        numeric(0)
        x = np.asarray(X[0], dtype=np.float64)
        ax = _norm_axes("", n.id, [A["axis"]], x.ndim)[0]
        if x.shape[ax] == 0:
            err("arg reduction over an empty axis")
        fn = np.argmax if op == "argmax" else np.argmin
        if A["select_last_index"]:
            L = x.shape[ax]
            y = L - 1 - fn(np.flip(x, axis=ax), axis=ax)
        else:
            y = fn(x, axis=ax)
        y = y.astype(np.int64)
        if A["keepdims"]:
            y = np.expand_dims(y, ax)
        return y, "i64"
    if op == "cumsum":
        numeric(0)
        x = val(0)
        ax = _norm_axes("", n.id, [A["axis"]], x.ndim)[0]
        if A["reverse"]:
            x = np.flip(x, axis=ax)
        y = np.cumsum(x, axis=ax)
        if A["exclusive"]:  # sums of the elements strictly before: a zero, then the inclusive sums shifted
            y = np.concatenate([np.zeros_like(np.take(x, [0], axis=ax)), np.take(y, range(x.shape[ax] - 1), axis=ax)],
                               axis=ax) if x.shape[ax] else y
        if A["reverse"]:
            y = np.flip(y, axis=ax)
        return np.ascontiguousarray(y), _value_dtype(T[0])
    if op == "topk":
        numeric(0)
        x = np.asarray(X[0], dtype=np.float64)
        ax = _norm_axes("", n.id, [A["axis"]], x.ndim)[0]
        k = A["k"]
        if not 0 <= k <= x.shape[ax]:
            err(f"k {k} out of range")
        xm = np.moveaxis(x, ax, -1)
        # a stable sort on the key keeps equal values in index order (ties: lower index first)
        order = np.argsort(-xm if A["largest"] else xm, axis=-1, kind="stable")[..., :k]
        if A["select"] == "indices":
            return np.ascontiguousarray(np.moveaxis(order.astype(np.int64), -1, ax)), "i64"
        v = np.take_along_axis(np.moveaxis(val(0), ax, -1), order, axis=-1)
        return np.ascontiguousarray(np.moveaxis(v, -1, ax)), _value_dtype(T[0])
    if op in ("gather", "gather_elements"):
        data, idx = X
        if T[1] not in INT_DTYPES:
            err(f"indices must be i32 or i64, are {T[1]}")
        if data.ndim == 0:
            err("gather from a scalar")
        ax = _norm_axes("", n.id, [A["axis"]], data.ndim)[0]
        D = data.shape[ax]
        if idx.size and (idx.min() < -D or idx.max() >= D):
            raise RunError("", n.id, f"index out of range [-{D}, {D})")
        idx = np.where(idx < 0, idx + D, idx).astype(np.int64)
        if op == "gather":
            return np.take(val(0), idx, axis=ax), _value_dtype(T[0])
        if idx.ndim != data.ndim or any(idx.shape[d] > data.shape[d] for d in range(data.ndim) if d != ax):
            err(f"gather_elements indices {list(idx.shape)} do not fit data {list(data.shape)}")
        sub = tuple(slice(0, idx.shape[d]) if d != ax else slice(None) for d in range(data.ndim))
        return np.take_along_axis(val(0)[sub], idx, axis=ax), _value_dtype(T[0])
    if op == "slice":
        x = val(0)
        plan = _slice_plan(x.shape, A, err)
        y = x
        for d, (s0, st, L) in enumerate(plan):  # explicit index lists: no Python slice wrap-around
            y = np.take(y, [s0 + st * i for i in range(L)], axis=d)
        return np.ascontiguousarray(y), _value_dtype(T[0])
    if op == "pad":
        x = val(0)
        r = x.ndim
        pads = A["pads"]
        if len(pads) != 2 * r:
            err(f"pads needs {2 * r} entries")
        mode = A["mode"]
        grow = [(max(pads[d], 0), max(pads[d + r], 0)) for d in range(r)]
        for d in range(r):
            if mode == "reflect" and max(grow[d]) > x.shape[d] - 1:
                err("reflect pad larger than size - 1")
            if x.shape[d] + pads[d] + pads[d + r] < 0:
                err("pads crop more than the axis")
        if mode == "constant" and T[0] in QUANT_DTYPES:
            lo, hi = QUANT_RANGE[T[0]]
            if A["value"] != math.trunc(A["value"]) or not lo <= A["value"] <= hi:
                err(f"pad value {A['value']} is not a {T[0]} integer")
        if mode == "constant":
            y = np.pad(x, grow, mode="constant", constant_values=A["value"])
        else:
            y = np.pad(x, grow, mode={"edge": "edge", "reflect": "reflect"}[mode])
        # negative pads crop (after padding the other side)
        crop = tuple(slice(max(-pads[d], 0), y.shape[d] - max(-pads[d + r], 0)) for d in range(r))
        return np.ascontiguousarray(y[crop]).astype(x.dtype), _value_dtype(T[0])
    if op == "trilu":
        x = val(0)
        if x.ndim < 2:
            err("trilu needs rank >= 2")
        y = np.triu(x, A["k"]) if A["upper"] else np.tril(x, A["k"])
        return y, _value_dtype(T[0])
    return None


def _quant_scale(x_shape, A, s, err):
    """The scale (or zero point) broadcast against x: per tensor, per axis or blocked (ONNX)."""
    r, bs = len(x_shape), A["block_size"]
    if bs < 0:
        err("block_size must be >= 0")
    if bs == 0 and s.size == 1 and s.ndim <= 1:
        return s.reshape(())
    ax = A["axis"]
    if not -r <= ax < r:
        err(f"axis {ax} out of range")
    ax %= r
    if bs == 0:
        if s.shape != (x_shape[ax],):
            err(f"per-axis scale must be [{x_shape[ax]}], got {list(s.shape)}")
        return s.reshape([x_shape[ax] if d == ax else 1 for d in range(r)])
    want = list(x_shape)
    want[ax] = -(-x_shape[ax] // bs)
    if list(s.shape) != want:
        err(f"blocked scale must be {want}, got {list(s.shape)}")
    return np.take(np.repeat(s, bs, axis=ax), np.arange(x_shape[ax]), axis=ax)


def eval_quant(n, X, T, err):
    """quantize / dequantize / matmul_integer, written from the ONNX operator text."""
    op, A = n.op, n.attrs
    if op == "quantize":
        if T[0] not in FLOAT_DTYPES or T[1] not in FLOAT_DTYPES:
            err("quantize needs float x and scale")
        out = A["dtype"] or "u8"
        if len(X) == 3:
            if T[2] not in QUANT_DTYPES or (A["dtype"] is not None and A["dtype"] != T[2]):
                err("zero_point must be i8/u8 and agree with dtype")
            if X[2].shape != X[1].shape:
                err("zero_point and scale shapes differ")
            out = T[2]
        lo, hi = QUANT_RANGE[out]
        # ONNX's reference: x / y_scale in x's dtype (float32 here; NumPy's division is IEEE,
        # correctly rounded), np.rint (half to even), + zero point, clipped. NaN -> the zero point.
        x32 = np.asarray(X[0], dtype=np.float32)
        s32 = _quant_scale(x32.shape, A, np.asarray(X[1], dtype=np.float32), err)
        zp = _quant_scale(x32.shape, A, np.asarray(X[2], dtype=np.int64), err) if len(X) == 3 else np.int64(0)
        q = np.rint(np.divide(x32, s32, dtype=np.float32)).astype(np.float64)
        y = np.clip(q + zp, lo, hi)
        y = np.where(np.isnan(y), np.broadcast_to(zp, y.shape), y)
        return y.astype(np.int64), out
    if op == "dequantize":
        if T[0] not in QUANT_DTYPES + ("i32",) or T[1] not in FLOAT_DTYPES:
            err("dequantize needs q of i8/u8/i32 and a float scale")
        if len(X) == 3 and (T[2] != T[0] or X[2].shape != X[1].shape):
            err("zero_point must have q's dtype and the scale's shape")
        q = np.asarray(X[0])
        s32 = _quant_scale(q.shape, A, np.asarray(X[1], dtype=np.float32), err)
        zp = _quant_scale(q.shape, A, np.asarray(X[2]), err) if len(X) == 3 else 0
        # ONNX's reference: (x.astype(float32) - zero_point.astype(float32)) * scale, in float32
        y = (q.astype(np.float32) - np.asarray(zp, dtype=np.float32)) * s32
        y = np.asarray(y, dtype=np.float32).astype(np.float64)
        t = T[1]
        return (round_to(y, t) if t != "f32" else y), t
    # matmul_integer
    a, b = np.asarray(X[0], dtype=np.int64), np.asarray(X[1], dtype=np.int64)
    if T[0] not in QUANT_DTYPES or T[1] not in QUANT_DTYPES:
        err("matmul_integer needs i8/u8 a and b")
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        err(f"matmul_integer shapes {list(a.shape)} x {list(b.shape)}")
    if len(X) > 2:
        za = np.asarray(X[2], dtype=np.int64)
        if T[2] != T[0]:
            err("a_zero_point must have a's dtype")
        a = a - (za.reshape(-1, 1) if za.ndim == 1 and za.size == a.shape[-2] and za.size > 1 else za)
    if len(X) > 3:
        zb = np.asarray(X[3], dtype=np.int64)
        if T[3] != T[1]:
            err("b_zero_point must have b's dtype")
        b = b - zb
    y = np.matmul(a, b)
    assert np.all(np.abs(y) < 2 ** 31), "i32 overflow"
    return y, "i32"


def unpack_bits(packed, bits, count):
    """Values packed along the last axis of a uint8 array, `8 // bits` per byte from the low bits
    up (ONNX Runtime's MatMulNBits layout); the first `count` of them."""
    p = np.asarray(packed, dtype=np.int64)
    per = 8 // bits
    parts = [(p >> (bits * j)) & ((1 << bits) - 1) for j in range(per)]
    v = np.stack(parts, axis=-1).reshape(p.shape[:-1] + (p.shape[-1] * per,))
    return v[..., :count]


def eval_matmul_nbits(c, n, X, T, err):
    """ONNX Runtime's com.microsoft MatMulNBits: y = a . dequant(b)^T."""
    A = n.attrs
    K, N, bits, bs = A["k"], A["n"], A["bits"], A["block_size"]
    if bits not in (4, 8) or bs < 16 or bs & (bs - 1):
        err("bits must be 4 or 8 and block_size a power of 2 >= 16")
    kb = -(-K // bs)
    if T[0] not in FLOAT_DTYPES or X[0].shape[-1] != K:
        err("a must be float with last dim k")
    if T[1] != "u8" or X[1].shape != (N, kb, bs * bits // 8):
        err(f"b must be u8 [{N}, {kb}, {bs * bits // 8}]")
    scale = np.asarray(X[2], dtype=np.float64).reshape(N, kb)
    q = unpack_bits(X[1], bits, bs).reshape(N, kb * bs)                 # [N, kb * bs]
    if len(X) == 4:
        zp = unpack_bits(np.asarray(X[3]).reshape(N, -1), bits, kb)     # [N, kb]
    else:
        zp = np.full((N, kb), 1 << (bits - 1))
    w = (q - np.repeat(zp, bs, axis=1)) * np.repeat(scale, bs, axis=1)
    w = w[:, :K]                                                          # a short last block
    y = np.matmul(c.f(X[0]), c.f(w).T)
    t = T[0]
    return (c.f(y), "f32") if t == "f32" else (c.f(round_to(y, t)), t)


def eval_node(c, g, n, vals):
    """Computes node n from input values; returns (array, dtype)."""
    file, nid, A = g.file, n.id, n.attrs
    ins = [vals[s] for s in n.inputs]
    X = [v[0] for v in ins]
    T = [v[1] for v in ins]
    op = n.op

    def err(msg):
        raise GraphError(file, nid, msg)

    for i, t in enumerate(T):
        if t in QUANT_DTYPES and op not in QUANT_OK and not (op == "embedding" and i == 0):
            err(f"input {i} is {t}: {op} does not compute on 8-bit integers (cast first)")
    if op in ("quantize", "dequantize", "matmul_integer"):
        return eval_quant(n, X, T, err)
    if op == "matmul_nbits":
        return eval_matmul_nbits(c, n, X, T, err)

    def need_float(i):
        if T[i] not in FLOAT_DTYPES:
            err(f"input {i} ('{n.inputs[i]}') must be a float tensor, is {T[i]}")

    def out_float(y):
        # Result dtype (docs/graph-format.md): the float operands' common dtype (all f16 -> f16,
        # all bf16 -> bf16, else f32); integer/bool operands and attention's mask do not count.
        # A half result is the value computed (in float64 here) rounded to the dtype on store.
        fl = [t for i, t in enumerate(T) if t in FLOAT_DTYPES and not (op == "attention" and i == 3)]
        dt = fl[0] if fl and all(t == fl[0] for t in fl) else "f32"
        if dt == "f32":
            return c.f(y), "f32"
        return c.f(round_to(y, dt)), dt

    if op in BINARY:
        need_float(0), need_float(1)
        _broadcast_shape(file, nid, X[0].shape, X[1].shape)
        a, b = c.f(X[0]), c.f(X[1])
        fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
              "maximum": np.maximum, "minimum": np.minimum}[op]
        return out_float(fn(a, b))
    if op in UNARY:
        need_float(0)
        x = c.f(X[0])
        if op == "neg": y = -x
        elif op == "exp": y = np.exp(x)
        elif op == "log": y = np.log(x)
        elif op == "sqrt": y = np.sqrt(x)
        elif op == "rsqrt": y = 1 / np.sqrt(x)
        elif op == "abs": y = np.abs(x)
        elif op == "tanh": y = np.tanh(x)
        elif op == "sigmoid": y = sigmoid(c, x)
        elif op == "relu": y = np.maximum(x, 0)
        elif op == "silu": y = x * sigmoid(c, x)
        elif op == "erf": y = erf(c, x)
        elif op == "sin": y = np.sin(x)
        elif op == "cos": y = np.cos(x)
        elif op == "square": y = x * x
        return out_float(y)
    if op == "gelu":
        need_float(0)
        return out_float(gelu(c, X[0], A["approximate"]))
    if op in ("sum", "mean", "max"):
        need_float(0)
        x = c.f(X[0])
        axes = tuple(range(x.ndim)) if A["axes"] is None else _norm_axes(file, nid, A["axes"], x.ndim)
        if op == "max" and any(x.shape[a] == 0 for a in axes):
            err("max over an empty axis")
        fn = {"sum": np.sum, "mean": np.mean, "max": np.max}[op]
        return out_float(fn(x, axis=axes, keepdims=A["keepdims"]))
    if op == "softmax":
        need_float(0)
        ax = _norm_axes(file, nid, [A["axis"]], X[0].ndim)[0]
        return out_float(softmax(c, X[0], ax))
    if op == "matmul":
        need_float(0), need_float(1)
        a, b = c.f(X[0]), c.f(X[1])
        if a.ndim < 2 or b.ndim < 2:
            err(f"matmul operands need rank >= 2, got {list(a.shape)} and {list(b.shape)}")
        if A["transpose_a"]:
            a = np.swapaxes(a, -1, -2)
        if A["transpose_b"]:
            b = np.swapaxes(b, -1, -2)
        if a.shape[-1] != b.shape[-2]:
            err(f"matmul inner dimensions differ: a {list(a.shape)} and b {list(b.shape)} (after transposes)")
        _broadcast_shape(file, nid, a.shape[:-2], b.shape[:-2])
        return out_float(np.matmul(a, b))
    if op == "linear":
        for i in range(len(X)):
            need_float(i)
        x, w = c.f(X[0]), c.f(X[1])
        if w.ndim != 2 or x.ndim < 1 or x.shape[-1] != w.shape[1]:
            err(f"linear needs x [..., In] and w [Out, In], got {list(x.shape)} and {list(w.shape)}")
        y = np.matmul(x, w.T)
        if len(X) == 3:
            b = c.f(X[2])
            if b.shape != (w.shape[0],):
                err(f"linear bias must be [{w.shape[0]}], got {list(b.shape)}")
            y = y + b
        return out_float(y)
    if op == "reshape":
        shp = list(A["shape"])
        x = X[0]
        if sum(1 for d in shp if d == -1) > 1 or any(d < -1 for d in shp):
            err(f"bad reshape target {shp} (at most one -1, others non-negative)")
        known = int(np.prod([d for d in shp if d != -1])) if shp else 1
        if -1 in shp:
            if known == 0 or x.size % known:
                err(f"cannot reshape {list(x.shape)} to {shp}")
            shp[shp.index(-1)] = x.size // known
        if int(np.prod(shp)) != x.size:
            err(f"cannot reshape {list(x.shape)} ({x.size} elements) to {A['shape']}")
        return X[0].reshape(shp), T[0]
    if op == "transpose":
        x = X[0]
        perm = list(range(x.ndim))[::-1] if A["perm"] is None else A["perm"]
        if sorted(perm) != list(range(x.ndim)):
            err(f"perm {perm} is not a permutation of the {x.ndim} axes")
        return np.transpose(x, perm).copy(), T[0]
    if op == "broadcast_to":
        try:
            return np.broadcast_to(X[0], tuple(A["shape"])).copy(), T[0]
        except ValueError:
            err(f"cannot broadcast {list(X[0].shape)} to {A['shape']}")
    if op == "narrow":
        x = X[0]
        ax = _norm_axes(file, nid, [A["axis"]], x.ndim)[0]
        s, l = A["start"], A["length"]
        if s < 0 or l < 0 or s + l > x.shape[ax]:
            err(f"narrow start {s} length {l} out of range for size {x.shape[ax]}")
        return np.take(x, np.arange(s, s + l), axis=ax), T[0]
    if op == "concat":
        r = X[0].ndim
        ax = _norm_axes(file, nid, [A["axis"]], r)[0]
        for i, x in enumerate(X):
            if x.ndim != r or any(x.shape[d] != X[0].shape[d] for d in range(r) if d != ax):
                err(f"concat input {i} has shape {list(x.shape)}, incompatible with {list(X[0].shape)}")
            if T[i] != T[0]:
                err("concat inputs must share a dtype")
        return np.concatenate(X, axis=ax), T[0]
    if op == "embedding":
        table, idx = X
        if table.ndim != 2:
            err(f"embedding table must be [V, D], got {list(table.shape)}")
        if T[1] not in INT_DTYPES:
            err(f"embedding indices must be i32 or i64, are {T[1]}")
        if idx.size and (idx.min() < 0 or idx.max() >= table.shape[0]):
            raise RunError(file, nid, f"index out of range [0, {table.shape[0]})")
        return table[idx.astype(np.int64)], T[0]
    if op == "cast":
        to = A["dtype"]
        x = X[0]
        if to in FLOAT_DTYPES:
            y = np.asarray(x, dtype=np.float64)
            if T[0] in FLOAT_DTYPES or to != "f32":
                y = round_to(y, to)  # via f32 first
            return c.f(y), to
        if to in INT_DTYPES:
            if T[0] in FLOAT_DTYPES:
                return np.trunc(np.asarray(x, dtype=np.float64)).astype(np.int64), to
            return np.asarray(x).astype(np.int64), to
        if to in QUANT_DTYPES:
            lo, hi = QUANT_RANGE[to]
            if T[0] in FLOAT_DTYPES:  # truncation toward zero, saturated, NaN -> 0
                y = np.nan_to_num(np.trunc(np.asarray(x, dtype=np.float64)), nan=0.0)
                return np.clip(y, lo, hi).astype(np.int64), to
            y = np.asarray(x).astype(np.int64) & 0xFF  # integers: the low 8 bits
            return (y - 256 * (y > hi)).astype(np.int64), to
        return np.asarray(x) != 0, "bool"
    if op == "layer_norm":
        for i in range(len(X)):
            need_float(i)
        D = X[0].shape[-1]
        for i in (1, 2):
            if len(X) > i and X[i].shape != (D,):
                err(f"layer_norm input {i} must be [{D}], got {list(X[i].shape)}")
        w = X[1] if len(X) > 1 else None
        b = X[2] if len(X) > 2 else None
        return out_float(layer_norm(c, X[0], w, b, A["eps"]))
    if op == "rms_norm":
        for i in range(len(X)):
            need_float(i)
        D = X[0].shape[-1]
        if len(X) > 1 and X[1].shape != (D,):
            err(f"rms_norm weight must be [{D}], got {list(X[1].shape)}")
        return out_float(rms_norm(c, X[0], X[1] if len(X) > 1 else None, A["eps"]))
    if op == "rope":
        need_float(0)
        x = X[0]
        if x.ndim < 2:
            err("rope needs x [..., S, D]")
        D = x.shape[-1]
        dims = D if A["dims"] is None else A["dims"]
        if dims % 2 or dims <= 0 or dims > D:
            err(f"rope dims {dims} must be even and in (0, {D}]")
        off = A["offset"]
        if len(X) == 2:
            if T[1] != "i32" or X[1].shape != ():
                err(f"rope offset input must be an i32 scalar, got {T[1]} {list(X[1].shape)}")
            off = int(X[1])
        return out_float(rope(c, x, dims, A["base"], A["traditional"], A["scale"], off))
    if op == "scaled_masked_softmax":
        need_float(0)
        s = c.f(X[0])
        if s.ndim < 2:
            err("scaled_masked_softmax needs scores [..., Tq, Tk]")
        keep = np.ones(s.shape, dtype=bool)
        if A["causal"]:
            keep = keep & causal_keep(s.shape[-2], s.shape[-1])
        return out_float(masked_softmax(c, s * c.F(A["scale"]), keep))
    if op == "attention":
        for i in range(3):
            need_float(i)
        q, k, v = X[:3]
        r = q.ndim
        if r not in (2, 3, 4) or k.ndim != r or v.ndim != r:
            err(f"attention needs q, k, v of equal rank 2, 3 or 4, got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
        if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2] or k.shape[:-2] != v.shape[:-2]:
            err(f"attention shapes disagree: q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)}")
        if r >= 3:
            Hq, Hkv = q.shape[-3], k.shape[-3]
            if Hkv == 0 or Hq % Hkv:
                err(f"query heads {Hq} must be a multiple of key/value heads {Hkv}")
            if r == 4 and q.shape[0] != k.shape[0]:
                err(f"attention batch sizes differ: {q.shape[0]} and {k.shape[0]}")
        mask, is_bool = None, False
        if len(X) == 4:
            mask = X[3]
            is_bool = T[3] == "bool"
            if not is_bool and T[3] not in FLOAT_DTYPES:
                err(f"attention mask must be float or bool, is {T[3]}")
            full = q.shape[:-1] + (k.shape[-2],)
            full4 = (1,) * (4 - r) + full
            try:
                np.broadcast_to(mask, full4)
            except ValueError:
                err(f"mask {list(mask.shape)} does not broadcast to {list(full)}")
        return out_float(attention(c, q, k, v, mask, is_bool, A["scale"], A["causal"]))
    if op in ("layer_norm_vjp", "rms_norm_vjp", "softmax_vjp", "silu_vjp", "gelu_vjp"):
        need_float(0), need_float(1)
        dy, x = X
        if dy.shape != x.shape:
            err(f"{op} needs dy and its second input of equal shape, got {list(dy.shape)} and {list(x.shape)}")
        if op == "layer_norm_vjp":
            return out_float(layer_norm_vjp(c, dy, x, A["eps"]))
        if op == "rms_norm_vjp":
            return out_float(rms_norm_vjp(c, dy, x, A["eps"]))
        if op == "softmax_vjp":
            ax = _norm_axes(file, nid, [A["axis"]], x.ndim)[0]
            return out_float(softmax_vjp(c, dy, x, ax))
        if op == "silu_vjp":
            return out_float(c.f(dy) * silu_grad(c, x))
        return out_float(c.f(dy) * gelu_grad(c, x, A["approximate"]))
    r = eval_onnx_op(c, n, X, T, err)
    if r is not None:
        return r
    if op in graphlib_conv.SPATIAL_OPS:
        return out_float(graphlib_conv.eval_spatial(c, op, X, T, A, err))
    err(f"op '{op}' not implemented")  # pragma: no cover


# ----------------------------------------------------------------------------------------
# Running

def leaf_value(c, dtype, arr):
    """A leaf's value as the interpreter holds it."""
    if dtype in FLOAT_DTYPES:
        return c.f(round_to(np.asarray(arr, dtype=np.float64), dtype)), dtype
    if dtype in INT_DTYPES or dtype in QUANT_DTYPES:
        return np.asarray(arr).astype(np.int64), dtype
    return np.asarray(arr).astype(bool), "bool"


def npy_dtype_name(a):
    m = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(np.int32): "i32",
         np.dtype(np.int64): "i64", np.dtype(np.bool_): "bool", np.dtype(np.float64): "f64",
         np.dtype(np.int8): "i8", np.dtype(np.uint8): "u8"}
    return m.get(a.dtype, str(a.dtype))


def run(g, inputs, params, precision="f64", noise_ulps=0.0, seed=0):
    """Evaluates graph g. inputs: id -> np.ndarray; params: name -> (np.ndarray, file dtype).
    Returns {output id: (array, dtype)} in the order of g.outputs.
    noise_ulps (f32 model only): every float op result is multiplied by (1 + u), u uniform in
    +-noise_ulps * 2^-24 (seeded), a stand-in for implementations that are a few ulp off per op."""
    c = Ctx(precision)
    noise = np.random.default_rng(seed) if noise_ulps else None
    vals = {}
    symbols = {}
    for n in g.nodes:
        if n.op == "input":
            if n.id not in inputs:
                raise RunError(g.file, n.id, "no tensor bound to this input")
            a = np.asarray(inputs[n.id])
            if n.dtype == "bf16" and npy_dtype_name(a) == "f32":
                # NumPy has no bfloat16: a bf16 input comes as f32 values that are bf16 numbers.
                if not np.array_equal(round_bf16(a).astype(np.float32), a, equal_nan=True):
                    raise RunError(g.file, n.id, "bf16 input given as f32 values that are not bf16 numbers")
            elif npy_dtype_name(a) != n.dtype:
                raise RunError(g.file, n.id, f"bound tensor is {npy_dtype_name(a)}, input is {n.dtype}")
            if a.ndim != len(n.shape):
                raise RunError(g.file, n.id, f"bound tensor has shape {list(a.shape)}, input is {n.shape}")
            for d, s in zip(n.shape, a.shape):
                if isinstance(d, str):
                    if symbols.setdefault(d, s) != s:
                        raise RunError(g.file, n.id, f"symbol '{d}' bound to {symbols[d]} and {s}")
                elif d != s:
                    raise RunError(g.file, n.id, f"bound tensor has shape {list(a.shape)}, input is {n.shape}")
            vals[n.id] = leaf_value(c, n.dtype, a)
        elif n.op == "param":
            if n.name not in params:
                raise RunError(g.file, n.id, f"parameter '{n.name}' not found")
            a, fdt = params[n.name]
            if list(a.shape) != list(n.shape):
                raise RunError(g.file, n.id, f"parameter '{n.name}' has shape {list(a.shape)}, node says {n.shape}")
            if (fdt in FLOAT_DTYPES) != (n.dtype in FLOAT_DTYPES):
                raise RunError(g.file, n.id, f"parameter '{n.name}' is {fdt}, node is {n.dtype}")
            vals[n.id] = leaf_value(c, n.dtype, a)
        elif n.op == "constant":
            vals[n.id] = leaf_value(c, n.dtype, n.value)
        else:
            y, t = eval_node(c, g, n, vals)
            y = np.asarray(y)
            if noise is not None and t in FLOAT_DTYPES and n.op not in SHAPE_OPS and n.op not in EXACT_OPS:
                u = noise.uniform(-1, 1, y.shape) * (noise_ulps * 2.0 ** -24)
                y = (y * (1 + u)).astype(y.dtype)
            if n.shape is not None and list(y.shape) != list(n.shape):
                raise GraphError(g.file, n.id, f"declared shape {n.shape} but the op gives {list(y.shape)}")
            if n.dtype is not None and n.dtype != t:
                raise GraphError(g.file, n.id, f"declared dtype {n.dtype} but the op gives {t}")
            vals[n.id] = (y, t)
    return {o: vals[o] for o in g.outputs}


def check_static(g):
    """Runs the graph on zeros when every input shape is concrete (for validating bad graphs:
    inference errors surface as GraphError naming the node)."""
    inputs = {}
    params = {}
    for n in g.nodes:
        if n.op == "input":
            if any(isinstance(d, str) for d in n.shape):
                return
            inputs[n.id] = np.zeros(n.shape, dtype=NP_STORAGE.get(n.dtype, np.float32))
        elif n.op == "param":
            params[n.name] = (np.zeros(n.shape, dtype=np.float32), n.dtype)
    run(g, inputs, params)


# ----------------------------------------------------------------------------------------
# safetensors (hand-coded, tiny)

ST_DTYPES = {"F32": ("f32", np.float32, 4), "F16": ("f16", np.float16, 2), "BF16": ("bf16", None, 2),
             "I32": ("i32", np.int32, 4), "I64": ("i64", np.int64, 8), "BOOL": ("bool", np.bool_, 1),
             "I8": ("i8", np.int8, 1), "U8": ("u8", np.uint8, 1)}
ST_NAMES = {"f32": "F32", "f16": "F16", "bf16": "BF16", "i32": "I32", "i64": "I64", "bool": "BOOL",
            "i8": "I8", "u8": "U8"}


def encode_safetensors(tensors):
    """tensors: {name: (array, dtype name)} -> bytes. Sorted names, header padded with spaces to 8."""
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        a, dt = tensors[name]
        if dt == "bf16":
            a32 = np.ascontiguousarray(round_bf16(a).astype(np.float32))
            raw = (a32.view(np.uint32) >> 16).astype("<u2").tobytes()
        else:
            raw = np.ascontiguousarray(np.asarray(a).astype(np.dtype(NP_STORAGE[dt]).newbyteorder("<"))).tobytes()
        header[name] = {"dtype": ST_NAMES[dt], "shape": list(np.shape(a)), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def decode_safetensors(data, what="<safetensors>"):
    """bytes -> {name: (array, dtype name)}; bf16 is returned as float32 values."""
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n].decode())
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt, npdt, size = ST_DTYPES[info["dtype"]]
        b, e = info["data_offsets"]
        raw = data[base + b:base + e]
        shape = tuple(info["shape"])
        if dt == "bf16":
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            a = u.view(np.float32).reshape(shape)
        else:
            a = np.frombuffer(raw, dtype=np.dtype(npdt).newbyteorder("<")).reshape(shape).copy()
        assert a.size * size == e - b, f"{what}: {name}: size mismatch"
        out[name] = (a, dt)
    return out


def read_safetensors(path):
    with open(path, "rb") as f:
        return decode_safetensors(f.read(), path)


# ----------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("graph")
    ap.add_argument("--params", action="append", default=[])
    ap.add_argument("--input", action="append", default=[], metavar="ID=FILE.npy")
    ap.add_argument("--out", help="directory for <output id>.npy (float outputs as f32)")
    ap.add_argument("--f32", action="store_true", help="evaluate with the f32 model instead of float64")
    args = ap.parse_args(argv)
    try:
        g = load_graph(args.graph)
        params = {}
        for p in args.params:
            params.update(read_safetensors(p))
        inputs = {}
        for s in args.input:
            k, _, v = s.partition("=")
            inputs[k] = np.load(v)
        outs = run(g, inputs, params, "f32" if args.f32 else "f64")
    except GraphError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for k, (a, t) in outs.items():
        flat = np.asarray(a).reshape(-1)
        print(f"{k}: {t} {list(np.shape(a))} {flat[:6]}")
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            np.save(os.path.join(args.out, k + ".npy"), to_storage(a, t))
    return 0


def to_storage(a, t):
    """How an output is stored: float dtypes as f32 values, integers/bool in their own dtype."""
    if t in FLOAT_DTYPES:
        return np.asarray(a, dtype=np.float32)
    return np.asarray(a).astype(NP_STORAGE[t])


if __name__ == "__main__":
    sys.exit(main())
