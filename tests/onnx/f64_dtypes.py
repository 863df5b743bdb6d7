#!/usr/bin/python3
"""float64 and the other integer widths of ONNX models through `rlx run`, against NumPy
(docs/onnx.md, element types):
  * f64 values only double can hold (1 + k * 2^-40: f32 rounds them all to 1) through the
    elementwise ops, Max/Min/Mod, the reductions, MatMul (batched) and Gemm, CumSum, ArgMax,
    compares (x == x + 2^-40 is false only in f64), Where and the shape ops, and Cast to and from
    f64 (f64 -> f16 rounded once: 1 + 2^-11 + 2^-40 must round up, not tie to even after an f32
    step); each output is written with --output and must be a float64 .npy (bool, int64, f32, f16
    where the op says so) holding NumPy's values (exact, or within 1e-15 relative where libm
    rounds);
  * u64 beyond 2^63, u32, u16, i16 and i8 arithmetic in their own width (wrap-around as NumPy),
    Div exact in the type (truncating toward zero), BitShift (uint8 to uint64, a shift by the
    width giving 0), each output's dtype checked;
  * around the run: an f64 constant 1 + 2^-40 is not simplified away as a unit in compiled
    mode, `--json` prints f64 and u64 values exactly, `--check-numerics` judges f64 values in
    double, compiled plans of f64/u64 graphs are stored in the compile cache and read back;
  * refusals: an op without an f64 kernel (Softmax) is refused before running (exit 2, naming the
    node); a JSON graph naming f64 is refused (exit 2: the graph format has no f64); `rlx convert`
    of an f64 model to JSON is refused (exit 2); on Vulkan (where a device is present) an f64
    model is refused when planned (exit 3, "no f64 tensors") while the CPU part above still runs.
Every value case runs in eager, lazy and compiled mode on the CPU.

  tests/onnx/f64_dtypes.py --rlx build/apps/rlx/rlx [--out DIR]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
from onnx import TensorProto, helper

from onnx_build import init, model, vi  # noqa: E402

D, F, H, I64, B = TensorProto.DOUBLE, TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.BOOL
U8, U16, U32, U64, I16, I8 = (TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64,
                              TensorProto.INT16, TensorProto.INT8)
EPS = 2.0 ** -40


def node(op, ins, outs, **kw):
    return helper.make_node(op, ins, outs, **kw)


def f64_cases():
    rs = np.random.RandomState(3)
    # values f32 cannot tell apart from 1, 2, ...: every one differs from its f32 rounding
    x = (1.0 + EPS * rs.randint(1, 1000, (3, 4))).astype(np.float64)
    y = (2.0 + EPS * rs.randint(1, 1000, (3, 4))).astype(np.float64)
    z = (1.5 + EPS * rs.randint(1, 1000, (3, 4))).astype(np.float64)
    assert np.all(x.astype(np.float32).astype(np.float64) != x)
    c = []
    c.append(("arith", model([node("Add", ["x", "y"], ["s"]), node("Mul", ["s", "x"], ["m"]), node("Div", ["y", "x"], ["q"]),
                              node("Sub", ["m", "q"], ["r"])], [vi("x", [3, 4], D), vi("y", [3, 4], D)], [vi("r", None, D)]),
              {"x": x, "y": y}, {"r": (x + y) * x - y / x}, 0.0))
    c.append(("max_min3", model([node("Max", ["x", "y", "z"], ["mx"]), node("Min", ["x", "y", "z"], ["mn"])],
                                [vi("x", [3, 4], D), vi("y", [3, 4], D), vi("z", [3, 4], D)], [vi("mx", None, D), vi("mn", None, D)]),
              {"x": x, "y": y, "z": z}, {"mx": np.maximum(np.maximum(x, y), z), "mn": np.minimum(np.minimum(x, y), z)}, 0.0))
    a = np.array([[7.5 + EPS, -7.5 - EPS, 5.25 + EPS, -1e10 - 0.5]], np.float64)
    b = np.array([[-2.0 + EPS, 2.0 - EPS, 0.75 + EPS, 3.0 + EPS]], np.float64)
    c.append(("mod", model([node("Mod", ["a", "b"], ["f"], fmod=1), node("Mod", ["a", "b"], ["p"], fmod=0)],
                           [vi("a", [1, 4], D), vi("b", [1, 4], D)], [vi("f", None, D), vi("p", None, D)]),
              {"a": a, "b": b}, {"f": np.fmod(a, b), "p": np.mod(a, b)}, 0.0))
    c.append(("unary", model([node("Sqrt", ["x"], ["s"]), node("Exp", ["s"], ["e"]), node("Log", ["e"], ["l"]),
                              node("Tanh", ["y"], ["t"]), node("Neg", ["t"], ["n"]), node("Abs", ["n"], ["ab"]),
                              node("Add", ["l", "ab"], ["o"])], [vi("x", [3, 4], D), vi("y", [3, 4], D)], [vi("o", None, D)]),
              {"x": x, "y": y}, {"o": np.log(np.exp(np.sqrt(x))) + np.abs(-np.tanh(y))}, 1e-15))
    x3 = (1.0 + EPS * rs.randint(1, 1000, (2, 3, 4))).astype(np.float64)
    red = []
    outs = {}
    for op, fn in (("ReduceSum", np.sum), ("ReduceMean", np.mean), ("ReduceMax", np.max), ("ReduceMin", np.min),
                   ("ReduceProd", np.prod)):
        o = op.lower()
        red.append(node(op, ["x", "axes"], [o], keepdims=1) if op == "ReduceSum" else node(op, ["x"], [o], axes=[1], keepdims=1))
        outs[o] = fn(x3, axis=1, keepdims=True)
    c.append(("reduce", model(red, [vi("x", [2, 3, 4], D)], [vi(o, None, D) for o in outs], [init("axes", np.array([1], np.int64))]),
              {"x": x3}, outs, 1e-15))
    A = (1.0 + EPS * rs.randint(1, 1000, (2, 3, 5))).astype(np.float64)
    Bm = (1.0 + EPS * rs.randint(1, 1000, (5, 4))).astype(np.float64)
    c.append(("matmul", model([node("MatMul", ["a", "b"], ["y"])], [vi("a", [2, 3, 5], D), vi("b", [5, 4], D)], [vi("y", None, D)]),
              {"a": A, "b": Bm}, {"y": A @ Bm}, 1e-15))
    W = (0.5 + EPS * rs.randint(1, 1000, (4, 5))).astype(np.float64)
    bias = (EPS * rs.randint(1, 1000, (4,))).astype(np.float64)
    c.append(("gemm", model([node("Gemm", ["a", "w", "bias"], ["y"], transB=1)], [vi("a", [3, 5], D)], [vi("y", None, D)],
                            [init("w", W), init("bias", bias)]),
              {"a": A[0]}, {"y": A[0] @ W.T + bias}, 1e-15))
    c.append(("cumsum_argmax", model([node("CumSum", ["x", "ax"], ["cs"]), node("ArgMax", ["x"], ["am"], axis=1, keepdims=0)],
                                     [vi("x", [3, 4], D)], [vi("cs", None, D), vi("am", None, I64)], [init("ax", np.int64(1))]),
              {"x": x}, {"cs": np.cumsum(x, axis=1), "am": np.argmax(x, axis=1).astype(np.int64)}, 1e-15))
    xe = np.array([1.0, 1.0 + EPS, 3.0, 3.0 - EPS], np.float64)
    ye = np.array([1.0 + EPS, 1.0 + EPS, 3.0, 3.0], np.float64)
    c.append(("compare_where", model([node("Equal", ["x", "y"], ["eq"]), node("Less", ["x", "y"], ["lt"]),
                                      node("Where", ["lt", "x", "y"], ["w"])], [vi("x", [4], D), vi("y", [4], D)],
                                     [vi("eq", None, B), vi("lt", None, B), vi("w", None, D)]),
              {"x": xe, "y": ye}, {"eq": xe == ye, "lt": xe < ye, "w": np.where(xe < ye, xe, ye)}, 0.0))
    c.append(("shape_ops", model([node("Transpose", ["x"], ["t"], perm=[1, 0]), node("Concat", ["t", "t"], ["c"], axis=0),
                                  node("Slice", ["c", "st", "en"], ["s"]), node("Gather", ["s", "idx"], ["g"], axis=1)],
                                 [vi("x", [3, 4], D)], [vi("g", None, D)],
                                 [init("st", np.array([1], np.int64)), init("en", np.array([6], np.int64)),
                                  init("idx", np.array([2, 0], np.int64))]),
              {"x": x}, {"g": np.concatenate([x.T, x.T])[1:6][:, [2, 0]]}, 0.0))
    # a scalar constant that f32 would read as the unit 1 (compiled mode's x * 1 -> x must not fire)
    xs = np.array([1.0, 2.0, 3.0], np.float64)
    from onnx import numpy_helper
    c.append(("mul_near_one", model([node("Constant", [], ["c"], value=numpy_helper.from_array(np.float64(1.0 + EPS))),
                                     node("Mul", ["x", "c"], ["y"])], [vi("x", [3], D)], [vi("y", None, D)]),
              {"x": xs}, {"y": xs * (1.0 + EPS)}, 0.0))
    # BatchNormalization with constant statistics folds into a per-channel scale and shift: in
    # f64 for a double X (an f32 scale would be off by ~1e-8)
    xb = (1.0 + EPS * rs.randint(1, 1000, (2, 3, 2))).astype(np.float64)
    sc, bb, mu, var = [(v + EPS * rs.randint(1, 1000, 3)).astype(np.float64) for v in (1.3, 0.1, 0.9, 2.0)]
    eps = float(np.float32(1e-5))  # ONNX float attributes are float32
    want = (xb - mu[:, None]) / np.sqrt(var[:, None] + eps) * sc[:, None] + bb[:, None]
    c.append(("batchnorm", model([node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-5)], [vi("x", [2, 3, 2], D)],
                                 [vi("y", None, D)], [init("s", sc), init("b", bb), init("m", mu), init("v", var)]),
              {"x": xb}, {"y": want}, 1e-14))
    # 1 + 2^-11 is halfway between two f16 values: 2^-40 above it must round up (an f32 step first
    # would round it to the tie, then to even: 1.0)
    hv = np.array([1.0 + 2.0 ** -11 + EPS, 1.0 + 2.0 ** -11, -(1.0 + 3 * 2.0 ** -11) - EPS, 70000.0], np.float64)
    f32v = np.array([1.0 + 2.0 ** -23, 3.5, -0.1], np.float32)
    with np.errstate(over="ignore"):  # 70000 is beyond f16: inf
        h16 = hv.astype(np.float16)
    c.append(("cast", model([node("Cast", ["h"], ["h16"], to=H), node("Cast", ["h"], ["h32"], to=F), node("Cast", ["f"], ["f64"], to=D),
                             node("Cast", ["h"], ["hi"], to=I64)],
                            [vi("h", [4], D), vi("f", [3], F)], [vi("h16", None, H), vi("h32", None, F), vi("f64", None, D), vi("hi", None, I64)]),
              {"h": hv, "f": f32v}, {"h16": h16, "h32": hv.astype(np.float32), "f64": f32v.astype(np.float64),
                                     "hi": hv.astype(np.int64)}, 0.0))
    assert h16[0] != np.float16(1.0) and np.float32(hv[0]).astype(np.float16) == np.float16(1.0)  # the case means something
    return c


def int_cases():
    c = []
    u = np.array([2 ** 64 - 1, 2 ** 63 + 5, 7, 2 ** 63], np.uint64)
    v = np.array([2 ** 63 + 6, 2 ** 63 + 5, 2 ** 64 - 2, 3], np.uint64)
    c.append(("u64_max_min_mod", model([node("Max", ["u", "v"], ["mx"]), node("Min", ["u", "v"], ["mn"]), node("Mod", ["u", "v"], ["md"])],
                                       [vi("u", [4], U64), vi("v", [4], U64)], [vi("mx", None, U64), vi("mn", None, U64), vi("md", None, U64)]),
              {"u": u, "v": v}, {"mx": np.maximum(u, v), "mn": np.minimum(u, v), "md": np.mod(u, v)}, 0.0))
    # Div of these widths divides exactly in the type, truncating toward zero (f32 would round
    # 2^32 - 1 and 2^64 - 1); NumPy's floor division agrees for these non-negative values and is
    # adjusted for the signed ones
    for et, dt, a_, b_ in ((U32, np.uint32, [2 ** 32 - 1, 16777217, 7, 0], [3, 2, 7, 5]),
                           (U64, np.uint64, [2 ** 64 - 1, 2 ** 53 + 1, 9, 1], [7, 1, 2, 3]),
                           (I8, np.int8, [-7, 7, -128, 127], [2, -2, 3, -1]), (I16, np.int16, [-32768, 32767, -5, 9], [7, -7, 5, 4])):
        av, bv = np.array(a_, dt), np.array(b_, dt)
        q = np.array([int(abs(int(x)) // abs(int(y))) * (1 if (int(x) < 0) == (int(y) < 0) else -1) for x, y in zip(a_, b_)]).astype(dt)
        c.append((f"div_{np.dtype(dt).name}", model([node("Div", ["a", "b"], ["q"])], [vi("a", [4], et), vi("b", [4], et)], [vi("q", None, et)]),
                  {"a": av, "b": bv}, {"q": q}, 0.0))
    for et, dt, bits in ((U8, np.uint8, 8), (U16, np.uint16, 16), (U32, np.uint32, 32), (U64, np.uint64, 64)):
        xs = [1, 3, (1 << bits) - 1, 5, 1 << (bits - 1)]
        ss = [bits - 1, 2, 1, bits, 1]  # a shift by the width gives 0
        mask = (1 << bits) - 1
        left = np.array([(a << s) & mask if s < bits else 0 for a, s in zip(xs, ss)], dt)
        right = np.array([a >> s if s < bits else 0 for a, s in zip(xs, ss)], dt)
        c.append((f"bitshift_u{bits}", model([node("BitShift", ["x", "s"], ["l"], direction="LEFT"),
                                              node("BitShift", ["x", "s"], ["r"], direction="RIGHT")],
                                             [vi("x", [5], et), vi("s", [5], et)], [vi("l", None, et), vi("r", None, et)], opset=11),
                  {"x": np.array(xs, dt), "s": np.array(ss, dt)}, {"l": left, "r": right}, 0.0))
    for et, dt in ((I16, np.int16), (U16, np.uint16), (U32, np.uint32), (I8, np.int8), (U8, np.uint8)):
        info = np.iinfo(dt)
        a = np.array([info.max, info.min, 7, 100 if info.max > 100 else 3], dt)
        b = np.array([1, 1, 3, 9], dt)
        with np.errstate(over="ignore"):
            want = {"add": a + b, "sub": b - a, "mul": a * b, "max": np.maximum(a, b)}
        c.append((f"wrap_{np.dtype(dt).name}", model([node("Add", ["a", "b"], ["add"]), node("Sub", ["b", "a"], ["sub"]),
                                                      node("Mul", ["a", "b"], ["mul"]), node("Max", ["a", "b"], ["max"])],
                                                     [vi("a", [4], et), vi("b", [4], et)], [vi(k, None, et) for k in want]),
                  {"a": a, "b": b}, want, 0.0))
    return c


def close(got, want, rtol):
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if rtol == 0.0 or want.dtype.kind != "f":
        return np.array_equal(got, want)
    return bool(np.all(np.abs(got.astype(np.float64) - want) <= rtol * np.abs(want)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--out", default="/tmp/rlx-f64-dtypes")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    fails, runs = [], 0

    def check(name, ok, why=""):
        nonlocal runs
        runs += 1
        if not ok:
            fails.append(f"{name}: {why}")

    def run(*args):
        r = subprocess.run([a.rlx] + list(args), capture_output=True, text=True, timeout=120)
        return r.returncode, r.stdout, r.stderr

    for name, m, ins, exps, rtol in f64_cases() + int_cases():
        path = os.path.join(a.out, name + ".onnx")
        open(path, "wb").write(m.SerializeToString())
        args = []
        for k, v in ins.items():
            f = os.path.join(a.out, f"{name}.in.{k}.npy")
            np.save(f, v)
            args += ["-i", f"{k}=@{f}"]
        for mode in ("eager", "lazy", "compiled"):
            outs, oargs = [], []
            for k in exps:
                f = os.path.join(a.out, f"{name}.{mode}.out.{k}.npy")
                if os.path.exists(f):
                    os.remove(f)
                outs.append((k, f))
                oargs += ["-o", f"{k}={f}"]
            rc, _, err = run("run", path, "-b", "cpu", "-m", mode, *args, *oargs)
            if rc != 0:
                check(f"{name}/{mode}", False, f"exit {rc}: {err.strip()[-400:]}")
                continue
            for k, f in outs:
                got = np.load(f)
                check(f"{name}/{mode}/{k}", close(got, exps[k], rtol),
                      f"got {got.dtype} {got.ravel()[:6].tolist()}, want {exps[k].dtype} {exps[k].ravel()[:6].tolist()}")

    # refusals
    sm = model([node("Softmax", ["x"], ["y"])], [vi("x", [2, 3], D)], [vi("y", None, D)])
    p = os.path.join(a.out, "softmax_f64.onnx")
    open(p, "wb").write(sm.SerializeToString())
    for mode in ("eager", "lazy", "compiled"):
        rc, _, err = run("run", p, "-m", mode, "-i", "x=random")
        check(f"refused/softmax-f64/{mode}", rc == 2 and "no f64 kernel for softmax" in err, f"exit {rc}: {err}")
    g = {"format": "rlx.graph", "version": 1, "nodes": [{"id": "x", "op": "input", "shape": [2], "dtype": "f64"}], "outputs": ["x"]}
    gp = os.path.join(a.out, "f64.json")
    json.dump(g, open(gp, "w"))
    rc, _, err = run("run", gp, "-i", "x=2xf64=1,2")
    check("refused/json-f64", rc == 2 and "ONNX models only" in err, f"exit {rc}: {err}")
    rc, _, err = run("convert", os.path.join(a.out, "arith.onnx"), "-o", os.path.join(a.out, "arith.json"))
    check("refused/convert-f64-to-json", rc == 2 and "ONNX models only" in err and not os.path.exists(os.path.join(a.out, "arith.json")),
          f"exit {rc}: {err}")
    # an inline f64 value keeps every bit
    rc, out, err = run("run", os.path.join(a.out, "arith.onnx"), "-i", "x=3x4xf64=" + ",".join(["1.0000000000009095"] * 12),
                       "-i", "y=3x4xf64=" + ",".join(["2"] * 12), "-o", f"r={os.path.join(a.out, 'inline.npy')}")
    xv = 1.0000000000009095
    check("inline-f64-value", rc == 0 and np.array_equal(np.load(os.path.join(a.out, "inline.npy")), np.full((3, 4), (xv + 2) * xv - 2 / xv)),
          f"exit {rc}: {err}")
    # a compiled plan of f64 (and u64) tensors is stored in the compile cache and read back (its
    # dtype byte was refused as a bad entry beyond bool)
    shutil.rmtree(os.path.join(a.out, "cache"), ignore_errors=True)
    env = dict(os.environ, RLX_CACHE_DIR=os.path.join(a.out, "cache"))
    for name, ins in (("arith", ["x", "y"]), ("u64_max_min_mod", ["u", "v"])):
        args = [x for k in ins for x in ("-i", f"{k}=@{os.path.join(a.out, f'{name}.in.{k}.npy')}")]
        for attempt in ("store", "hit"):
            r = subprocess.run([a.rlx, "run", os.path.join(a.out, name + ".onnx"), "-m", "compiled", "--verbose"] + args,
                               capture_output=True, text=True, timeout=120, env=env)
            want = "compile cache: miss" if attempt == "store" else "compile cache: hit: plan"
            check(f"cache/{name}/{attempt}", r.returncode == 0 and want in r.stderr and "bad entry" not in r.stderr,
                  f"exit {r.returncode}: {r.stderr[-400:]}")
    # --json prints f64 and u64 values exactly
    rc, out, err = run("run", os.path.join(a.out, "mul_near_one.onnx"), "-i", f"x=@{os.path.join(a.out, 'mul_near_one.in.x.npy')}", "--json")
    got = json.loads(out)["outputs"][0]["values"] if rc == 0 else None
    check("json-f64-values-exact", got == (np.array([1.0, 2.0, 3.0]) * (1.0 + EPS)).tolist(), f"exit {rc}: {got} {err[-300:]}")
    rc, out, err = run("run", os.path.join(a.out, "u64_max_min_mod.onnx"), "-i", f"u=@{os.path.join(a.out, 'u64_max_min_mod.in.u.npy')}",
                       "-i", f"v=@{os.path.join(a.out, 'u64_max_min_mod.in.v.npy')}", "--json")
    got = json.loads(out)["outputs"][0]["values"] if rc == 0 else None
    want = np.maximum(np.load(os.path.join(a.out, "u64_max_min_mod.in.u.npy")), np.load(os.path.join(a.out, "u64_max_min_mod.in.v.npy")))
    check("json-u64-values-exact", got == [int(v) for v in want], f"exit {rc}: {got} {err[-300:]}")
    # --check-numerics looks at f64 values in double: 1e300 is finite (as f32 it would be inf)
    rc, _, err = run("run", os.path.join(a.out, "mul_near_one.onnx"), "-i", "x=3xf64=1e300,2,3", "--check-numerics")
    check("check-numerics-f64-finite", rc == 0, f"exit {rc}: {err[-300:]}")
    rc, _, err = run("run", os.path.join(a.out, "mul_near_one.onnx"), "-i", "x=3xf64=1.7976931348623157e308,2,3", "--check-numerics")
    check("check-numerics-f64-overflow", rc == 3 and "produced Inf at element 0" in err, f"exit {rc}: {err[-300:]}")
    # Vulkan: refused when planned, never computed in f32
    rc, devs, _ = run("devices")
    if "vulkan device 0" in devs:
        rc, _, err = run("run", os.path.join(a.out, "arith.onnx"), "-b", "vulkan", "-i", f"x=@{os.path.join(a.out, 'arith.in.x.npy')}",
                         "-i", f"y=@{os.path.join(a.out, 'arith.in.y.npy')}")
        check("vulkan/refuses-f64", rc == 3 and "no f64 tensors" in err, f"exit {rc}: {err}")
        rc, _, err = run("run", os.path.join(a.out, "bitshift_u8.onnx"), "-b", "vulkan", "-i", f"x=@{os.path.join(a.out, 'bitshift_u8.in.x.npy')}",
                         "-i", f"s=@{os.path.join(a.out, 'bitshift_u8.in.s.npy')}")
        check("vulkan/refuses-bit_shift", rc == 3 and "bit_shift" in err, f"exit {rc}: {err}")
    else:
        print("f64 dtypes: no Vulkan device; the Vulkan refusal was not checked")
    for f in fails:
        print("FAIL", f)
    print(f"f64 and integer widths: {runs - len(fails)} of {runs} checks passed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
