#!/usr/bin/python3
"""rlx quantize (issue 19; docs/quantize.md), checked against NumPy.

  tests/quantize_tests.py --rlx build/apps/rlx/rlx [-k SUBSTRING]

A small graph made here (a linear [48, 64] with bias, a plain matmul [64, 32], a small linear
below --min-size, an embedding gather) is quantized to int8 and to q4, asymmetric and symmetric:
- the written weights, scales and zero points equal a NumPy implementation of the rules in
  docs/quantize.md (round half to even, per-channel max-abs / block min-max);
- the quantized graph, run by `rlx run` in eager, lazy and compiled mode on the CPU (and Vulkan
  where this rlx has a device), equals NumPy's computation of the quantized model (int8: the
  dynamic activation quantization, the exact integer product, the scales; q4: the dequantized
  weights);
- the reported max abs error, relative RMS error, argmax agreement and bytes equal NumPy's;
- `rlx inspect` lists the quantized weights, `rlx convert` keeps them quantized;
- bad input (unknown format, bad block size, no weight, colliding paths) exits 2 with a message;
- an ONNX model (Gemm with transB and MatMul initializers) is quantized to q4 and runs.
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import graphlib as gl  # noqa: E402

import clitest  # noqa: E402
from clitest import check  # noqa: E402

f32 = np.float32


def rlx(*args):
    return clitest.rlx(*args, cwd=clitest.S.tmp, timeout=120)


def has_vulkan():
    _, out, _ = rlx("devices")
    return "vulkan device 0" in out


def read_st(path):
    with open(path, "rb") as f:
        return {k: a for k, (a, _) in gl.decode_safetensors(f.read()).items()}


# ---------------------------------------------------------------- the model
def make_model():
    rng = np.random.default_rng(19)
    t = {
        "lin.weight": (rng.standard_normal((48, 64)) * 0.2).astype(f32),  # linear: [N, K]
        "lin.bias": (rng.standard_normal(48) * 0.1).astype(f32),
        "mm.weight": (rng.standard_normal((64, 32)) * 0.2).astype(f32),   # matmul: [K, N]
        "small.weight": (rng.standard_normal((8, 48)) * 0.2).astype(f32),  # 384 values: below --min-size 1000
        "emb.weight": rng.standard_normal((10, 64)).astype(f32),
    }
    t["lin.weight"][3, :] = 0  # an all-zero channel: scale 0
    g = {"format": "rlx.graph", "version": 1, "name": "qtest", "nodes": [
        {"id": "x", "op": "input", "shape": ["batch", 64]},
        {"id": "ids", "op": "input", "shape": [3], "dtype": "i64"},
        {"id": "w_lin", "op": "param", "shape": [48, 64], "name": "lin.weight"},
        {"id": "b_lin", "op": "param", "shape": [48], "name": "lin.bias"},
        {"id": "w_mm", "op": "param", "shape": [64, 32], "name": "mm.weight"},
        {"id": "w_small", "op": "param", "shape": [8, 48], "name": "small.weight"},
        {"id": "emb", "op": "param", "shape": [10, 64], "name": "emb.weight"},
        {"id": "y_lin", "op": "linear", "inputs": ["x", "w_lin", "b_lin"]},
        {"id": "y_mm", "op": "matmul", "inputs": ["x", "w_mm"]},
        {"id": "y_small", "op": "linear", "inputs": ["y_lin", "w_small"]},
        {"id": "e", "op": "gather", "inputs": ["emb", "ids"], "attrs": {"axis": 0}},
    ], "outputs": ["y_lin", "y_mm", "y_small", "e"]}
    gp, pp = os.path.join(clitest.S.tmp, "q.json"), os.path.join(clitest.S.tmp, "q.safetensors")
    with open(gp, "w") as f:
        json.dump(g, f)
    with open(pp, "wb") as f:
        f.write(gl.encode_safetensors({k: (v, "f32") for k, v in t.items()}))
    # 40 rows: products above 16 rows (matmul_nbits expands its weights per task there; the
    # decode kernel takes up to 16)
    x = rng.standard_normal((40, 64)).astype(f32)
    ids = np.array([1, 7, 3], dtype=np.int64)
    np.save(os.path.join(clitest.S.tmp, "x.npy"), x)
    np.save(os.path.join(clitest.S.tmp, "ids.npy"), ids)
    return gp, pp, t, x, ids


# ---------------------------------------------------------------- the rules, in NumPy
def int8_rule(w_nk):
    s = (np.max(np.abs(w_nk), axis=1) / f32(127)).astype(f32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(s[:, None] == 0, 0, np.clip(np.rint(w_nk / s[:, None]), -127, 127))
    return q.astype(np.int8).T.copy(), s  # [K, N], [N]


def q4_rule(w_nk, bs, symmetric):
    N, K = w_nk.shape
    kb = K // bs
    b = w_nk.reshape(N, kb, bs)
    with np.errstate(divide="ignore", invalid="ignore"):
        if symmetric:
            s = (np.max(np.abs(b), axis=2) / f32(7)).astype(f32)
            q = np.where(s[..., None] == 0, 8, np.clip(np.rint(b / s[..., None]), -8, 7) + 8)
            z = np.full((N, kb), 8)
        else:
            lo = np.minimum(b.min(axis=2), f32(0))
            hi = np.maximum(b.max(axis=2), f32(0))
            s = ((hi - lo) / f32(15)).astype(f32)
            z = np.where(s == 0, 0, np.clip(np.rint(-lo / s), 0, 15))
            q = np.where(s[..., None] == 0, 0, np.clip(np.rint(b / s[..., None]) + z[..., None], 0, 15))
    q = q.astype(np.uint8)
    blob = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    zp = None
    if not symmetric:
        zc = (kb + 1) // 2
        zp = np.zeros((N, zc), np.uint8)
        for j in range(kb):
            zp[:, j // 2] |= (z[:, j].astype(np.uint8) << (4 * (j % 2)))
    deq = ((q.astype(f32) - z[..., None].astype(f32)) * s[..., None]).reshape(N, K)
    return blob, s, zp, deq


def dynamic_int8_linear(x, q_kn, s_w, bias=None):
    """DynamicQuantizeLinear(x) -> matmul_integer -> cast -> mul(x_scale * w_scale) [+ bias], in f32."""
    hi = np.maximum(x.max(), f32(0))
    lo = np.minimum(x.min(), f32(0))
    s = f32(f32(hi - lo) / f32(255))
    z = np.rint(np.minimum(f32(0) - f32(lo / s), f32(255)))
    xq = np.clip(np.rint(x / s) + z, 0, 255)
    acc = (xq.astype(np.int64) - int(z)) @ q_kn.astype(np.int64)
    y = acc.astype(f32) * (s * s_w).astype(f32)
    return y + bias if bias is not None else y


def errors(f, q):
    d = q.astype(np.float64) - f.astype(np.float64)
    den = np.sqrt(np.sum(f.astype(np.float64) ** 2))
    out = {"max_abs": float(np.max(np.abs(d))), "rel_rms": float(np.sqrt(np.sum(d * d)) / den) if den > 0 else None}
    if f.ndim and f.shape[-1] >= 2:
        a, b = f.reshape(-1, f.shape[-1]).argmax(1), q.reshape(-1, f.shape[-1]).argmax(1)
        out["argmax_rows"], out["argmax_agree"] = int(a.size), int(np.sum(a == b))
    return out


def close(a, b, rtol, atol):
    return a is not None and b is not None and abs(a - b) <= atol + rtol * abs(b)


# ---------------------------------------------------------------- the tests
def run_outputs(gp, pp, mode, backend):
    od = os.path.join(clitest.S.tmp, f"out_{os.path.basename(gp)}_{mode}_{backend}")
    rc, out, err = rlx("run", gp, "-p", pp, "-i", "x=@x.npy", "-i", "ids=@ids.npy", "-m", mode, "-b", backend, "--out-dir", od)
    if rc != 0:
        return None, err
    return {n: np.load(os.path.join(od, n + ".npy")) for n in ("y_lin", "y_mm", "y_small", "e")}, ""


def check_quantized(tag, gp, pp, t, x, ids, args, expect_params, expect_out, bytes_after):
    out = os.path.join(clitest.S.tmp, f"{tag}.json")
    rc, so, se = rlx("quantize", gp, "-p", pp, "--out", out, "-i", "x=@x.npy", "-i", "ids=@ids.npy", "--min-size", "1000",
                     "--json", *args)
    check(f"{tag}/exit-0", rc == 0, se)
    if rc != 0:
        return None
    rep = json.loads(so)
    qp = out[:-5] + ".safetensors"
    st = read_st(qp)
    # the weights, scales and zero points: NumPy's rule, exactly
    for name, want in expect_params.items():
        got = st.get(name)
        check(f"{tag}/param/{name}", got is not None and got.dtype == want.dtype and got.shape == want.shape and
              np.array_equal(got, want), f"got {None if got is None else (got.dtype, got.shape)} want {(want.dtype, want.shape)}"
              + ("" if got is None or got.shape != want.shape else f", {int(np.sum(got != want))} differ"))
    # the kept weights stay f32 and as they were; the replaced f32 ones are gone
    for k in ("lin.bias", "small.weight", "emb.weight"):
        check(f"{tag}/kept/{k}", k in st and st[k].dtype == f32 and np.array_equal(st[k], t[k]))
    for k in ("lin.weight", "mm.weight"):
        check(f"{tag}/replaced/{k}", k not in st, sorted(st))
    kept = {w["param"]: w for w in rep["weights"]}
    check(f"{tag}/report/small-kept", not kept["small.weight"]["quantized"] and "min-size" in kept["small.weight"]["kept_why"])
    check(f"{tag}/report/emb-not-listed", "emb.weight" not in kept)
    # the run of the quantized graph: NumPy's quantized model, in every mode and backend
    backends = ["cpu"] + (["vulkan"] if has_vulkan() else [])
    for b in backends:
        for m in ("eager", "lazy", "compiled"):
            o, err = run_outputs(out, qp, m, b)
            check(f"{tag}/run/{b}/{m}", o is not None, err)
            if o is None:
                continue
            for n, want in expect_out.items():
                tol = 1e-5 if b == "cpu" else 1e-4
                ok = o[n].shape == want.shape and np.allclose(o[n], want, rtol=tol, atol=tol)
                check(f"{tag}/run/{b}/{m}/{n}", ok, f"max diff {np.max(np.abs(o[n] - want)) if o[n].shape == want.shape else o[n].shape}")
            check(f"{tag}/run/{b}/{m}/e-unchanged", np.array_equal(o["e"], t["emb.weight"][ids]))
    # the reported errors: NumPy's, of NumPy's quantized outputs against the f32 model
    f = {"y_lin": x @ t["lin.weight"].T + t["lin.bias"], "y_mm": x @ t["mm.weight"]}
    f["y_small"] = f["y_lin"] @ t["small.weight"].T
    qo = dict(expect_out)
    qo["y_small"] = expect_out["y_lin"] @ t["small.weight"].T
    for o in rep["outputs"]:
        if o["name"] == "e":
            check(f"{tag}/report/e-exact", o["max_abs"] == 0, o)
            continue
        want = errors(f[o["name"]], qo[o["name"]])
        check(f"{tag}/report/{o['name']}/max_abs", close(o["max_abs"], want["max_abs"], 1e-3, 1e-6), f"{o} vs {want}")
        check(f"{tag}/report/{o['name']}/rel_rms", close(o["rel_rms"], want["rel_rms"], 1e-3, 1e-7), f"{o} vs {want}")
        check(f"{tag}/report/{o['name']}/argmax", o.get("argmax_rows") == want["argmax_rows"] and o.get("argmax_agree") == want["argmax_agree"],
              f"{o} vs {want}")
    before = sum(a.nbytes for a in t.values())
    check(f"{tag}/report/bytes", rep["bytes"] == {"before": before, "after": bytes_after}, f"{rep['bytes']} vs {before}, {bytes_after}")
    return out, qp


def test_int8(model):
    gp, pp, t, x, ids = model
    ql, sl = int8_rule(t["lin.weight"])
    qm, sm = int8_rule(t["mm.weight"].T)
    check("int8/zero-channel-scale", sl[3] == 0)
    params = {"lin.weight.int8": ql, "lin.weight.scale": sl, "mm.weight.int8": qm, "mm.weight.scale": sm}
    outs = {"y_lin": dynamic_int8_linear(x, ql, sl, t["lin.bias"]), "y_mm": dynamic_int8_linear(x, qm, sm)}
    kept = t["lin.bias"].nbytes + t["small.weight"].nbytes + t["emb.weight"].nbytes
    after = sum(a.nbytes for a in params.values()) + kept + 4 + 4 + 1  # constants: 0.0, 255.0, i8 zero point
    r = check_quantized("int8", gp, pp, t, x, ids, ["--format", "int8"], params, outs, after)
    if r:
        test_roundtrip("int8", *r, "i8", outs)


def test_q4(model):
    gp, pp, t, x, ids = model
    for sym, bs in ((False, 32), (True, 16)):
        tag = f"q4-{'sym' if sym else 'asym'}-{bs}"
        bl, sl, zl, dl = q4_rule(t["lin.weight"], bs, sym)
        bm, sm, zm, dm = q4_rule(t["mm.weight"].T.copy(), bs, sym)
        params = {"lin.weight.q4": bl, "lin.weight.q4_scales": sl, "mm.weight.q4": bm, "mm.weight.q4_scales": sm}
        if not sym:
            params.update({"lin.weight.q4_zero_points": zl, "mm.weight.q4_zero_points": zm})
        outs = {"y_lin": x @ dl.T + t["lin.bias"], "y_mm": x @ dm.T}
        kept = t["lin.bias"].nbytes + t["small.weight"].nbytes + t["emb.weight"].nbytes
        after = sum(a.nbytes for a in params.values()) + kept
        args = ["--format", "q4", "--block-size", str(bs), "--symmetric" if sym else "--asymmetric"]
        r = check_quantized(tag, gp, pp, t, x, ids, args, params, outs, after)
        if r and not sym:
            test_roundtrip(tag, *r, "u8", outs)


def test_roundtrip(tag, out, qp, dtype, outs):
    rc, so, se = rlx("inspect", out, "--json")
    qw = json.loads(so).get("quantized_weights", []) if rc == 0 else []
    names = sorted(w["weight"] for w in qw)
    sc = ".scale" if dtype == "i8" else ".q4_scales"
    check(f"{tag}/inspect/lists", rc == 0 and len(qw) == 2 and all(w["weight_type"].startswith(dtype) and
                                                                  w.get("scales", "").endswith(sc) for w in qw), f"{se} {qw}")
    rc, so, _ = rlx("inspect", out)
    check(f"{tag}/inspect/text", rc == 0 and "quantized weights:" in so and all(n in so for n in names), so)
    c, cp = os.path.join(clitest.S.tmp, f"{tag}_conv.json"), os.path.join(clitest.S.tmp, f"{tag}_conv.safetensors")
    rc, _, se = rlx("convert", out, "-p", qp, "-o", c, "--params-out", cp)
    check(f"{tag}/convert/exit-0", rc == 0, se)
    if rc:
        return
    a, b = read_st(qp), read_st(cp)
    check(f"{tag}/convert/same-params", sorted(a) == sorted(b) and all(a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]) for k in a))
    with open(c) as f:
        g = json.load(f)
    qn = [n for n in g["nodes"] if n["op"] == "param" and n.get("name", "").endswith((".int8", ".q4"))]
    check(f"{tag}/convert/param-dtypes", len(qn) == 2 and all(n["dtype"] == dtype for n in qn), qn)
    o, err = run_outputs(c, cp, "compiled", "cpu")
    check(f"{tag}/convert/runs", o is not None and all(np.allclose(o[n], w, rtol=1e-5, atol=1e-5) for n, w in outs.items()), err)


def test_shared_and_tied(model):
    """One weight read by two linears is quantized once; a table read by a gather and a linear
    (a tied embedding / LM head) stays f32 for both."""
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((64, 64)) * 0.1).astype(f32)
    emb = rng.standard_normal((100, 64)).astype(f32)
    g = {"format": "rlx.graph", "version": 1, "nodes": [
        {"id": "x", "op": "input", "shape": [4, 64]}, {"id": "ids", "op": "input", "shape": [2], "dtype": "i64"},
        {"id": "w", "op": "param", "shape": [64, 64]}, {"id": "emb", "op": "param", "shape": [100, 64]},
        {"id": "a", "op": "linear", "inputs": ["x", "w"]}, {"id": "b", "op": "linear", "inputs": ["a", "w"]},
        {"id": "e", "op": "gather", "inputs": ["emb", "ids"]}, {"id": "lm", "op": "linear", "inputs": ["b", "emb"]}],
        "outputs": ["lm", "e"]}
    with open(os.path.join(clitest.S.tmp, "shared.json"), "w") as f:
        json.dump(g, f)
    with open(os.path.join(clitest.S.tmp, "shared.safetensors"), "wb") as f:
        f.write(gl.encode_safetensors({"w": (w, "f32"), "emb": (emb, "f32")}))
    x = rng.standard_normal((4, 64)).astype(f32)
    np.save(os.path.join(clitest.S.tmp, "xs.npy"), x)
    np.save(os.path.join(clitest.S.tmp, "idss.npy"), np.array([5, 99], np.int64))
    rc, so, se = rlx("quantize", "shared.json", "-p", "shared.safetensors", "-f", "int8", "--min-size", "0", "-o", "shared8.json",
                     "-i", "x=@xs.npy", "-i", "ids=@idss.npy", "--json")
    check("shared/exit-0", rc == 0, se)
    if rc:
        return
    ws = {r["node"]: r for r in json.loads(so)["weights"]}
    check("shared/w-once", ws["w"]["quantized"] and ws["w"]["consumers"] == "a, b", ws)
    check("shared/tied-kept", not ws["emb"]["quantized"] and "gather" in ws["emb"]["kept_why"], ws)
    st = read_st(os.path.join(clitest.S.tmp, "shared8.safetensors"))
    check("shared/params", sorted(st) == ["emb", "w.int8", "w.scale"], sorted(st))
    q, s = int8_rule(w)
    a = dynamic_int8_linear(x, q, s)
    want = dynamic_int8_linear(a, q, s) @ emb.T
    od = os.path.join(clitest.S.tmp, "shared_out")
    rc, _, se = rlx("run", "shared8.json", "-p", "shared8.safetensors", "-i", "x=@xs.npy", "-i", "ids=@idss.npy", "-m", "compiled",
                    "--out-dir", od)
    got = np.load(os.path.join(od, "lm.npy")) if rc == 0 else None
    check("shared/run", got is not None and np.allclose(got, want, rtol=1e-4, atol=1e-4), se)
    # a weight holding NaN stays f32 (no scale represents it): here nothing is left to quantize
    w[1, 2] = np.nan
    with open(os.path.join(clitest.S.tmp, "nan.safetensors"), "wb") as f:
        f.write(gl.encode_safetensors({"w": (w, "f32"), "emb": (emb, "f32")}))
    rc, _, se = rlx("quantize", "shared.json", "-p", "nan.safetensors", "-f", "int8", "--min-size", "0", "-o", "nan8.json")
    check("shared/nan-weight-kept", rc == 2 and "w [64, 64]: holds NaN" in se, se)


def test_bad_input(model):
    gp, pp, t, x, ids = model
    base = [gp, "-p", pp, "-i", "x=@x.npy", "-i", "ids=@ids.npy", "--min-size", "1000"]
    cases = [
        ("unknown-format", ["--format", "int4", "--out", "a.json"], "unknown format"),
        ("block-not-16", ["--format", "q4", "--block-size", "24", "--out", "a.json"], "power of 2, at least 16"),
        ("block-too-small", ["--format", "q4", "--block-size", "8", "--out", "a.json"], "power of 2, at least 16"),
        ("block-not-dividing", ["--format", "q4", "--block-size", "128", "--out", "a.json"], "not a multiple of --block-size 128"),
        ("no-weights", ["--format", "int8", "--exclude", "lin.weight", "--exclude", "w_mm", "--out", "a.json"], "no weight to quantize"),
        ("out-is-model", ["--format", "int8", "--out", gp], "is the model being quantized"),
        ("params-out-is-params", ["--format", "int8", "--out", "a.json", "--params-out", pp], "is a --params file being read"),
        ("out-not-json", ["--format", "int8", "--out", "a.safetensors"], "ending in .json"),
        ("int8-asymmetric", ["--format", "int8", "--asymmetric", "--out", "a.json"], "always symmetric"),
        ("exclude-unknown", ["--format", "int8", "--exclude", "nope", "--out", "a.json"], "no node or parameter named 'nope'"),
    ]
    for name, args, msg in cases:
        rc, _, se = rlx("quantize", *base, *args)
        check(f"bad/{name}", rc == 2 and msg in se, f"exit {rc}: {se.strip()}")
        check(f"bad/{name}/nothing-written", not os.path.exists(os.path.join(clitest.S.tmp, "a.json")))
    rc, so, _ = rlx("quantize", *base, "--format", "int4", "--out", "a.json", "--json")
    check("bad/json-error", rc == 2 and json.loads(so).get("exit_code") == 2, so)
    # --exclude keeps a weight f32 by parameter name
    rc, so, se = rlx("quantize", *base, "--format", "int8", "--exclude", "mm.weight", "--out", "ex.json", "--json")
    w = {w["param"]: w for w in json.loads(so)["weights"]} if rc == 0 else {}
    check("exclude/kept", rc == 0 and not w["mm.weight"]["quantized"] and w["lin.weight"]["quantized"], se)


def test_onnx():
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        check("onnx/python-onnx-available", False, "python3-onnx is missing")
        return
    rng = np.random.default_rng(7)
    W1 = (rng.standard_normal((48, 64)) * 0.2).astype(f32)  # Gemm transB: [N, K]
    b1 = (rng.standard_normal(48) * 0.1).astype(f32)
    W2 = (rng.standard_normal((48, 16)) * 0.2).astype(f32)  # MatMul: [K, N]
    nodes = [helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "W2"], ["y"])]
    g = helper.make_graph(nodes, "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
                          initializer=[numpy_helper.from_array(W1, "W1"), numpy_helper.from_array(b1, "b1"), numpy_helper.from_array(W2, "W2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = os.path.join(clitest.S.tmp, "q.onnx")
    onnx.save(m, path)
    x = rng.standard_normal((4, 64)).astype(f32)
    np.save(os.path.join(clitest.S.tmp, "xo.npy"), x)
    rc, so, se = rlx("quantize", path, "--format", "q4", "--block-size", "16", "--min-size", "0", "--out", "qo.json", "-i", "x=@xo.npy", "--json")
    check("onnx/q4/exit-0", rc == 0, se)
    if rc:
        return
    rep = json.loads(so)
    check("onnx/q4/two-weights", sum(w["quantized"] for w in rep["weights"]) == 2, rep["weights"])
    _, _, _, d1 = q4_rule(W1, 16, False)
    _, _, _, d2 = q4_rule(W2.T.copy(), 16, False)
    want = np.maximum(x @ d1.T + b1, 0) @ d2.T
    od = os.path.join(clitest.S.tmp, "qo_out")
    rc, _, se = rlx("run", "qo.json", "-p", "qo.safetensors", "-i", "x=@xo.npy", "-m", "compiled", "--out-dir", od)
    got = np.load(os.path.join(od, "y.npy")) if rc == 0 else None
    check("onnx/q4/run", got is not None and np.allclose(got, want, rtol=1e-5, atol=1e-5), se)
    f = np.maximum(x @ W1.T + b1, 0) @ W2
    e = errors(f, want)
    check("onnx/q4/report", close(rep["outputs"][0]["max_abs"], e["max_abs"], 1e-3, 1e-6), f"{rep['outputs']} vs {e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlx", required=True)
    ap.add_argument("-k", default="")
    a = ap.parse_args()
    clitest.S.rlx = os.path.abspath(a.rlx)
    with tempfile.TemporaryDirectory(prefix="rlx-quantize-") as t:
        clitest.S.tmp = t
        model = make_model()
        for name, fn in list(globals().items()):
            if name.startswith("test_") and name != "test_roundtrip" and a.k in name:
                fn() if name == "test_onnx" else fn(model)
    return clitest.finish("rlx quantize tests")


if __name__ == "__main__":
    sys.exit(main())
