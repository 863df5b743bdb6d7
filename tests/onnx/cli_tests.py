#!/usr/bin/python3
"""`rlx` on ONNX files: names, symbolic dims, defaults, convert, and hostile files.

Every model is built here with onnx.helper; every expected value is computed here with NumPy.
Each case asserts the exit code and a key phrase of the message (bad input: exit 2).

  tests/onnx/cli_tests.py --rlx build/apps/rlx/rlx [-k SUBSTRING]
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from onnx_build import model, vi  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from clitest import check, expect_rc, path, rlx, save  # noqa: E402
import clitest  # noqa: E402


def write(model, p):
    with open(p, "wb") as f:
        f.write(model.SerializeToString())


def npy(name, a):
    p = path(name)
    np.save(p, a)
    return p




rng = np.random.RandomState(0)


def test_names_dims_defaults_convert():
    # Exporter-style names with ':' '.' and '::' in NAME=SPEC, symbolic dims from two exporters.
    W = rng.randn(4, 3).astype(np.float32)
    b = rng.randn(3).astype(np.float32)
    scale = np.array([2.0], np.float32)
    m = model([helper.make_node("MatMul", ["onnx::MatMul_0", "W"], ["h"]),
               helper.make_node("Add", ["h", "b"], ["h2"]),
               helper.make_node("Mul", ["h2", "scale"], ["softmax_0.tmp_0"])],
              [vi("onnx::MatMul_0", ["batch", "p2o.DynamicDimension.0", 4]), vi("scale", [1])],
              [vi("softmax_0.tmp_0", ["batch", "p2o.DynamicDimension.0", 3])],
              [numpy_helper.from_array(W, "W"), numpy_helper.from_array(b, "b"), numpy_helper.from_array(scale, "scale")])
    p = save(model_with_ir(m), "names.onnx")
    x = rng.randn(2, 5, 4).astype(np.float32)
    ref = (x @ W + b) * 2.0
    npy("names_x.npy", x)
    npy("names_ref.npy", ref)
    for mode in ("eager", "lazy", "compiled"):
        expect_rc(f"names/{mode}", ["run", p, "-m", mode, "--input", f"onnx::MatMul_0=@{path('names_x.npy')}",
                                    "--expect", f"softmax_0.tmp_0=@{path('names_ref.npy')}", "--atol", "1e-5"], 0)
    # The initializer 'scale' is also a graph input: a default that --input overrides.
    npy("names_ref3.npy", (x @ W + b) * 3.0)
    expect_rc("names/default-overridden", ["run", p, "--input", f"onnx::MatMul_0=@{path('names_x.npy')}",
                                           "--input", "scale=1xf32=3", "--expect", f"softmax_0.tmp_0=@{path('names_ref3.npy')}"], 0)
    # Content, not extension: the same bytes under another name.
    os.link(p, path("names.bin"))
    expect_rc("names/by-content", ["run", path("names.bin"), "--input", f"onnx::MatMul_0=@{path('names_x.npy')}",
                                   "--expect", f"softmax_0.tmp_0=@{path('names_ref.npy')}"], 0)
    # Symbolic dims for random inputs come from --dim; missing ones are named.
    # Every unknown dimension is named in the one error, so one more try is enough.
    expect_rc("dims/random-needs-dim", ["run", p, "--input", "onnx::MatMul_0=random:1"], 2,
              "dimensions 'batch', 'p2o.DynamicDimension.0' are symbolic; give their sizes with "
              "--dim batch=N --dim p2o.DynamicDimension.0=N")
    # (convert: `inspect` without --dim now summarises the model's symbolic shapes; tests/cli_scripts.py)
    expect_rc("dims/all-named-at-once", ["convert", p, "-o", path("dims_out.json")], 2,
              "input 'onnx::MatMul_0': dimensions 'batch', 'p2o.DynamicDimension.0' are symbolic; give their sizes "
              "with --dim batch=N --dim p2o.DynamicDimension.0=N")
    expect_rc("dims/only-the-unbound-named", ["convert", p, "-o", path("dims_out.json"), "--dim", "batch=2"], 2,
              "input 'onnx::MatMul_0': dimension 'p2o.DynamicDimension.0' is symbolic; give its size with "
              "--dim p2o.DynamicDimension.0=N")
    two = save(model_with_ir(model([helper.make_node("Add", ["a", "b"], ["c"])],
                                   [vi("a", ["batch", "seq"]), vi("b", ["batch", 1])], [vi("c", ["batch", "seq"])], [])),
               "two_inputs.onnx")
    expect_rc("dims/every-input-named", ["convert", two, "-o", path("dims_out.json")], 2,
              "inputs 'a', 'b': dimensions 'batch', 'seq' are symbolic; give their sizes with --dim batch=N --dim seq=N")
    expect_rc("dims/bound-by-a-later-input", ["run", two, "--input", "a=random", "--input", "b=2x1xf32=1,2",
                                              "--dim", "seq=3"], 0)
    expect_rc("dims/random-with-dim", ["run", p, "--input", "onnx::MatMul_0=random:1", "--dim", "batch=3",
                                       "--dim", "p2o.DynamicDimension.0=2"], 0)
    expect_rc("names/unknown-input", ["run", p, "--input", "nope=1xf32=1"], 2, "has no input 'nope'")
    expect_rc("names/missing-input", ["run", p], 2, "no value given for input onnx::MatMul_0")
    expect_rc("names/params-refused", ["run", p, "-p", path("names_x.npy"), "--input", "onnx::MatMul_0=random"], 2, "--params is not used")
    # convert: the written graph (JSON + safetensors) gives the same outputs as the direct run.
    expect_rc("convert/write", ["convert", p, "-o", path("names.json"), "--params-out", path("names.safetensors"),
                                "--input", f"onnx::MatMul_0=@{path('names_x.npy')}"], 0)
    expect_rc("convert/run-json", ["run", path("names.json"), "-p", path("names.safetensors"),
                                   "--input", f"onnx::MatMul_0=@{path('names_x.npy')}",
                                   "--expect", f"softmax_0.tmp_0=@{path('names_ref.npy')}"], 0)
    expect_rc("convert/needs-params-out", ["convert", p, "-o", path("names2.json"), "--dim", "batch=1",
                                           "--dim", "p2o.DynamicDimension.0=1"], 2, "--params-out")
    check("convert/nothing-written-on-error", not os.path.exists(path("names2.json")))
    # Wrong kind of file either way gets a clear message.
    expect_rc("kind/onnx-as-params", ["run", path("names.json"), "-p", p, "--input", "onnx::MatMul_0=random"], 2)
    with open(path("graph_named.onnx"), "w") as f:
        f.write(open(path("names.json")).read())
    expect_rc("kind/json-named-onnx", ["convert", path("graph_named.onnx"), "-o", path("x.json")], 2, "not an ONNX model")
    expect_rc("kind/npy-as-graph", ["run", path("names_x.npy")], 2, "not an rlx JSON graph")


def model_with_ir(m):
    m.ir_version = 8
    return m


def test_integer_and_shape_folding():
    # PyTorch-style dynamic reshape: Shape -> Gather -> Unsqueeze -> Concat -> Reshape, int64 ids -> Gather.
    E = rng.randn(50, 8).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["E", "ids"], ["emb"]),  # [b, s, 8]
        helper.make_node("Shape", ["emb"], ["shp"]),
        helper.make_node("Constant", [], ["i0"], value=numpy_helper.from_array(np.array(0, np.int64))),
        helper.make_node("Gather", ["shp", "i0"], ["b"]),
        helper.make_node("Constant", [], ["ax"], value=numpy_helper.from_array(np.array([0], np.int64))),
        helper.make_node("Unsqueeze", ["b", "ax"], ["b1"]),
        helper.make_node("Constant", [], ["m1"], value=numpy_helper.from_array(np.array([-1], np.int64))),
        helper.make_node("Concat", ["b1", "m1"], ["newshape"], axis=0),
        helper.make_node("Reshape", ["emb", "newshape"], ["flat"]),
        helper.make_node("ArgMax", ["flat"], ["am"], axis=1, keepdims=0),
    ]
    m = model(nodes, [vi("ids", ["batch", "seq"], TensorProto.INT64)],
              [vi("flat", ["batch", "n"]), vi("am", ["batch"], TensorProto.INT64)], [numpy_helper.from_array(E, "E")])
    p = save(model_with_ir(m), "fold.onnx")
    ids = np.array([[1, 49, 7], [0, 3, 3]], np.int64)
    flat = E[ids].reshape(2, -1)
    npy("fold_ids.npy", ids)
    npy("fold_flat.npy", flat)
    npy("fold_am.npy", flat.argmax(1).astype(np.int64))
    for mode in ("eager", "compiled"):
        expect_rc(f"fold/{mode}", ["run", p, "-m", mode, "--input", f"ids=@{path('fold_ids.npy')}",
                                   "--expect", f"flat=@{path('fold_flat.npy')}", "--expect", f"am=@{path('fold_am.npy')}"], 0)
    # Another sequence length specialises again (no failure): 1x5.
    ids2 = np.array([[4, 5, 6, 7, 8]], np.int64)
    npy("fold_ids2.npy", ids2)
    npy("fold_flat2.npy", E[ids2].reshape(1, -1))
    expect_rc("fold/other-shape", ["run", p, "--input", f"ids=@{path('fold_ids2.npy')}", "--expect", f"flat=@{path('fold_flat2.npy')}"], 0)
    npy("fold_bad.npy", np.array([[1, 50, 2]], np.int64))
    expect_rc("fold/index-out-of-range", ["run", p, "--input", f"ids=@{path('fold_bad.npy')}"], 3)
    # Slice folded on the host (its data is a constant): negative and huge steps, ends past
    # either end (INT64_MIN/MAX, as exporters write "to the end"), against NumPy's slicing.
    big, lo, hi = 1 << 62, np.iinfo(np.int64).min, np.iinfo(np.int64).max
    data = np.arange(10, dtype=np.int64)
    for name, (st, en, sp), ref in [("neg-step", (8, lo, -3), data[8::-3]), ("huge-step", (1, hi, big), data[1::big]),
                                    ("huge-neg-step", (-1, lo, -big), data[-1::-big]), ("empty", (5, 2, 1), data[5:2])]:
        consts = [numpy_helper.from_array(data, "D")] + [numpy_helper.from_array(np.array([v], np.int64), k)
                                                          for k, v in (("st", st), ("en", en), ("ax", 0), ("sp", sp))]
        m = model([helper.make_node("Slice", ["D", "st", "en", "ax", "sp"], ["s"]),
                   helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT),
                   helper.make_node("Add", ["y", "x"], ["z"])],
                  [vi("x", [1])], [vi("z", [len(ref)])], consts)
        npy(f"slice_{name}.npy", ref.astype(np.float32) + 1)
        expect_rc(f"fold/slice-{name}", ["run", save(model_with_ir(m), f"slice_{name}.onnx"), "--input", "x=1xf32=1",
                                         "--expect", f"z=@{path(f'slice_{name}.npy')}"], 0)


def scatter_nd_ref(data, indices, updates, reduction):
    """ScatterND as the ONNX spec writes it: a plain loop over the index tuples, in order."""
    out = data.copy()
    k = indices.shape[-1]
    for t in np.ndindex(indices.shape[:-1]):
        at = tuple(int(v) for v in indices[t])
        if reduction == "add":
            out[at] = out[at] + updates[t]
        elif reduction == "mul":
            out[at] = out[at] * updates[t]
        else:
            out[at] = updates[t]
    assert k <= data.ndim
    return out


def test_scatternd_folding():
    # Swin Transformer builds its shifted-window mask with ScatterND on a zero tensor whose
    # shape comes from the input's: folded on the host, then used by a runtime Add.
    idx = np.array([[[0, 1], [2, 2]], [[1, 0], [-1, 0]]], np.int64)  # 2x2 tuples of 2 indices; -1 counts from the end
    upd = np.array([[1.5, 2.0], [3.0, -4.0]], np.float32)
    dup = np.array([[0, 1], [0, 1], [2, 2]], np.int64)  # a repeated target: reductions accumulate in order
    dupd = np.array([2.0, 3.0, 5.0], np.float32)
    x = rng.randn(1, 3, 3).astype(np.float32)
    cases = [("none", 13, idx, upd, None), ("add", 16, dup, dupd, "add"), ("mul", 16, dup, dupd, "mul")]
    for name, opset, ind, up, red in cases:
        base = np.full((3, 3), 1.0 if red == "mul" else 0.0, np.float32)
        attrs = {"reduction": red} if red else {}
        nodes = [helper.make_node("Shape", ["x"], ["shp"]),
                 helper.make_node("Slice", ["shp", "s1", "s3"], ["hw"]),
                 helper.make_node("ConstantOfShape", ["hw"], ["z"], value=numpy_helper.from_array(np.array([base[0, 0]], np.float32))),
                 helper.make_node("ScatterND", ["z", "ind", "upd"], ["mask"], **attrs),
                 helper.make_node("Add", ["x", "mask"], ["y"])]
        inits = [numpy_helper.from_array(np.array([1], np.int64), "s1"), numpy_helper.from_array(np.array([3], np.int64), "s3"),
                 numpy_helper.from_array(ind, "ind"), numpy_helper.from_array(up, "upd")]
        m = model(nodes, [vi("x", [1, 3, 3])], [vi("y", [1, 3, 3])], inits, opset=opset)
        p = save(model_with_ir(m), f"scatternd_{name}.onnx")
        ref = x + scatter_nd_ref(base, np.where(ind < 0, ind + 3, ind), up, red)
        npy("scatternd_x.npy", x)
        npy(f"scatternd_{name}_y.npy", ref)
        for mode in ("eager", "compiled"):
            expect_rc(f"scatternd/{name}/{mode}", ["run", p, "-m", mode, "--input", f"x=@{path('scatternd_x.npy')}",
                                                   "--expect", f"y=@{path(f'scatternd_{name}_y.npy')}"], 0)
    # Bad index tuples and shapes are refused with the node named; data known only at run time is
    # refused with what would make it foldable.
    def scatter_model(ind, up, data_is_input=False):
        nodes = [helper.make_node("ScatterND", ["x" if data_is_input else "d", "ind", "upd"], ["s"], name="sc"),
                 helper.make_node("Add", ["x", "s"], ["y"])]
        inits = [numpy_helper.from_array(ind, "ind"), numpy_helper.from_array(up, "upd")]
        if not data_is_input:
            inits.append(numpy_helper.from_array(np.zeros((3, 3), np.float32), "d"))
        return model_with_ir(model(nodes, [vi("x", [3, 3])], [vi("y", [3, 3])], inits))
    expect_rc("scatternd/index-out-of-range", ["run", save(scatter_model(np.array([[3, 0]], np.int64), np.ones(1, np.float32)), "sc_oob.onnx"),
                                               "--input", "x=random"], 2, "node 'sc' (ScatterND): index 3 is out of range for axis 0 of size 3")
    expect_rc("scatternd/updates-shape", ["run", save(scatter_model(np.array([[1]], np.int64), np.ones(2, np.float32)), "sc_shape.onnx"),
                                          "--input", "x=random"], 2, "updates have shape [2], expected [1, 3]")
    expect_rc("scatternd/tuple-too-long", ["run", save(scatter_model(np.zeros((1, 3), np.int64), np.ones(1, np.float32)), "sc_long.onnx"),
                                           "--input", "x=random"], 2, "must be between 1 and the rank of data (2)")
    # At run time (data, indices and updates all graph inputs), as a KV cache is written at a
    # position: reduction none, the last update of a repeated row wins (as ONNX Runtime applies
    # them in order), negative indices from the end.
    cache = rng.randn(2, 3, 6, 4).astype(np.float32)  # [batch, heads, positions, dim]
    for name, ind in [("kv-write", np.array([[[0, 0, 5], [0, 1, 5], [0, 2, 5]], [[1, 0, 2], [1, 1, 2], [1, 2, -1]]], np.int64)),
                      ("repeated-row", np.array([[[0, 1, 3], [0, 1, 3], [1, 2, 0]], [[1, 2, 0], [0, 0, 0], [0, 1, 3]]], np.int64))]:
        upd = rng.randn(2, 3, 4).astype(np.float32)
        m = model([helper.make_node("ScatterND", ["c", "i", "u"], ["y"])],
                  [vi("c", list(cache.shape)), vi("i", list(ind.shape), TensorProto.INT64), vi("u", list(upd.shape))],
                  [vi("y", list(cache.shape))])
        ref = scatter_nd_ref(cache, np.where(ind < 0, ind + np.array(cache.shape[:3]), ind), upd, None)
        args = ["run", save(model_with_ir(m), f"sc_{name}.onnx"), "--input", f"c=@{npy('sc_c.npy', cache)}",
                "--input", f"i=@{npy(f'sc_{name}_i.npy', ind)}", "--input", f"u=@{npy(f'sc_{name}_u.npy', upd)}",
                "--expect", f"y=@{npy(f'sc_{name}_y.npy', ref)}"]
        for mode in ("eager", "compiled"):
            expect_rc(f"scatternd/runtime-{name}/{mode}", args + ["-m", mode], 0)
    # add and mul at run time: every update naming a row is folded in (a repeated row twice).
    ind = np.array([[1, 1], [0, 2], [1, 1], [-1, 0]], np.int64)
    base = rng.randn(3, 3).astype(np.float32)
    upd = rng.randn(4).astype(np.float32)
    for red in ("add", "mul"):
        m = model([helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction=red)],
                  [vi("x", [3, 3]), vi("i", [4, 2], TensorProto.INT64), vi("u", [4])], [vi("y", [3, 3])], opset=16)
        ref = scatter_nd_ref(base, np.where(ind < 0, ind + 3, ind), upd, red)
        expect_rc(f"scatternd/runtime-{red}", ["run", save(model_with_ir(m), f"sc_rt_{red}.onnx"), "--input", f"x=@{npy('sc_rt_x.npy', base)}",
                                              "--input", f"i=@{npy('sc_rt_i.npy', ind)}", "--input", f"u=@{npy('sc_rt_u.npy', upd)}",
                                              "--expect", f"y=@{npy(f'sc_rt_{red}_y.npy', ref)}"], 0)
    expect_rc("scatternd/runtime-out-of-range", ["run", save(model_with_ir(model([helper.make_node("ScatterND", ["x", "i", "u"], ["y"])],
              [vi("x", [3, 3]), vi("i", [1, 2], TensorProto.INT64), vi("u", [1])], [vi("y", [3, 3])])), "sc_rt_oob.onnx"),
              "--input", "x=random", "--input", "i=1x2xi64=0,3", "--input", "u=random"], 3, "index 3 at position 0 is outside [-3, 3)")


def test_einsum():
    # Equations as exporters write them (rotary outer products, attention, bilinear forms, ellipsis
    # broadcasting, implicit outputs), against NumPy's einsum.
    cases = [("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("i,j->ij", [(6,), (4,)]),
             ("bhqd,bhkd->bhqk", [(2, 3, 5, 4), (2, 3, 6, 4)]), ("...ij,...jk->...ik", [(1, 3, 4), (2, 4, 5)]),
             ("ij->ji", [(3, 4)]), ("ij->", [(3, 4)]), ("ijk->j", [(2, 3, 4)]), ("ij,jk", [(3, 4), (4, 2)]),
             ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
             ("ij,j->i", [(3, 4), (4,)]), ("b i d, b j d -> b i j", [(2, 3, 4), (2, 5, 4)]), ("i,i->", [(7,), (7,)]),
             ("abc,cd->abd", [(2, 1, 3), (3, 4)]), ("ik,jk->ijk", [(2, 3), (4, 3)])]
    for k, (eq, shapes) in enumerate(cases):
        names = [f"x{j}" for j in range(len(shapes))]
        arrays = [rng.randn(*s).astype(np.float32) for s in shapes]
        ref = np.einsum(eq.replace(" ", ""), *arrays).astype(np.float32)
        m = model([helper.make_node("Einsum", names, ["y"], equation=eq)], [vi(n, list(s)) for n, s in zip(names, shapes)],
                  [vi("y", list(ref.shape))], opset=12)
        p = save(model_with_ir(m), f"einsum{k}.onnx")
        args = ["run", p]
        for n, a in zip(names, arrays):
            args += ["--input", f"{n}=@{npy(f'einsum{k}_{n}.npy', a)}"]
        args += ["--expect", f"y=@{npy(f'einsum{k}_y.npy', ref)}", "--atol", "1e-5", "--rtol", "1e-5"]
        for mode in ("eager", "compiled"):
            expect_rc(f"einsum/{eq}/{mode}", args + ["-m", mode], 0)
    # a diagonal (a repeated index within one operand) needs equal sizes (diagonals run: tests/onnx/op_edges.py)
    m = model([helper.make_node("Einsum", ["x"], ["y"], name="es", equation="ii->i")], [vi("x", [3, 4])], [vi("y", [3])], opset=12)
    expect_rc("einsum/diagonal-not-square", ["run", save(model_with_ir(m), "einsum_diag.onnx"), "--input", "x=random"], 2,
              "node 'es' (Einsum): index 'i' has sizes 3 and 4 within operand 0")
    m = model([helper.make_node("Einsum", ["x", "z"], ["y"], name="es", equation="ij,jk->ik")], [vi("x", [3, 4]), vi("z", [5, 2])],
              [vi("y", [3, 2])], opset=12)
    expect_rc("einsum/size-mismatch", ["run", save(model_with_ir(m), "einsum_bad.onnx"), "--input", "x=random", "--input", "z=random"], 2,
              "index 'j' has sizes 4 and 5")
    m = model([helper.make_node("Einsum", ["x"], ["y"], name="es", equation="...i->0")], [vi("x", [3, 3])], [vi("y", [3])], opset=12)
    expect_rc("einsum/digit-index-refused", ["run", save(model_with_ir(m), "einsum_digit.onnx"), "--input", "x=random"], 2,
              "the equation has an invalid output index '0' (indices are letters)")


def scatter_elements_ref(data, indices, updates, axis, reduction):
    """ScatterElements as the ONNX spec writes it: a loop over the positions of indices, in order."""
    out = data.copy()
    for c in np.ndindex(indices.shape):
        t = list(c)
        v = int(indices[c])
        t[axis] = v + data.shape[axis] if v < 0 else v
        t = tuple(t)
        out[t] = out[t] + updates[c] if reduction == "add" else out[t] * updates[c] if reduction == "mul" else updates[c]
    return out


def test_scatter_elements():
    data = rng.randn(3, 5, 2).astype(np.float32)
    for name, axis, red, ind in [("axis1-none", 1, None, np.array([[[0, 4], [2, 2], [-1, 1]]] * 3, np.int64)),
                                 ("axis1-repeats-last-wins", 1, None, np.array([[[3, 3], [3, 3]]] * 3, np.int64)),
                                 ("axis0-add", 0, "add", np.array([[[0, 2]] * 5, [[0, 0]] * 5], np.int64)),
                                 ("axis-neg1-mul", -1, "mul", np.array([[[1, 1, 0]] * 5] * 3, np.int64))]:
        upd = rng.randn(*ind.shape).astype(np.float32)
        attrs = {"axis": axis, **({"reduction": red} if red else {})}
        m = model([helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], **attrs)],
                  [vi("d", list(data.shape)), vi("i", list(ind.shape), TensorProto.INT64), vi("u", list(ind.shape))],
                  [vi("y", list(data.shape))], opset=16)
        ref = scatter_elements_ref(data, ind, upd, axis % 3, red)
        args = ["run", save(model_with_ir(m), f"se_{name}.onnx"), "--input", f"d=@{npy('se_d.npy', data)}",
                "--input", f"i=@{npy(f'se_{name}_i.npy', ind)}", "--input", f"u=@{npy(f'se_{name}_u.npy', upd)}",
                "--expect", f"y=@{npy(f'se_{name}_y.npy', ref)}"]
        for mode in ("eager", "compiled"):
            expect_rc(f"scatter-elements/{name}/{mode}", args + ["-m", mode], 0)
    m = model([helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], name="se", axis=1)],
              [vi("d", [3, 5]), vi("i", [2, 2], TensorProto.INT64), vi("u", [2, 2])], [vi("y", [3, 5])], opset=16)
    expect_rc("scatter-elements/partial-refused", ["run", save(model_with_ir(m), "se_part.onnx"), "--input", "d=random",
                                                   "--input", "i=2x2xi64=0,1,2,3", "--input", "u=random"], 2,
              "node 'se' (ScatterElements): unsupported: ScatterElements whose indices cover part of data across the axis")
    m = model([helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], name="se", axis=1)],
              [vi("d", [1, 5]), vi("i", [1, 1], TensorProto.INT64), vi("u", [1, 1])], [vi("y", [1, 5])], opset=16)
    expect_rc("scatter-elements/out-of-range", ["run", save(model_with_ir(m), "se_oob.onnx"), "--input", "d=random",
                                                "--input", "i=1x1xi64=5", "--input", "u=random"], 3, "index 5 at position 0 is outside [-5, 5)")


def test_scatter_elements_host_step():
    # Beyond a 2^22-entry match table ScatterElements runs as a host step (torchvision's
    # MultiScaleRoIAlign): none with repeated indices (the last wins), add and mul, negative
    # indices, against the spec's loop; an index out of range is an error naming the node.
    data = rng.randn(300, 40, 7).astype(np.float32)
    for name, red in [("none", None), ("add", "add"), ("mul", "mul")]:
        ind = rng.randint(-300, 300, size=(260, 40, 7)).astype(np.int64)
        upd = rng.randn(*ind.shape).astype(np.float32)
        attrs = {"axis": 0, **({"reduction": red} if red else {})}
        m = model([helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], **attrs)],
                  [vi("d", list(data.shape)), vi("i", list(ind.shape), TensorProto.INT64), vi("u", list(ind.shape))],
                  [vi("y", list(data.shape))], opset=16)
        ref = scatter_elements_ref(data, ind, upd, 0, red)
        args = ["run", save(model_with_ir(m), f"seh_{name}.onnx"), "--input", f"d=@{npy('seh_d.npy', data)}",
                "--input", f"i=@{npy(f'seh_{name}_i.npy', ind)}", "--input", f"u=@{npy(f'seh_{name}_u.npy', upd)}",
                "--expect", f"y=@{npy(f'seh_{name}_y.npy', ref)}", "--atol", "1e-5", "--rtol", "1e-5"]
        for mode in ("eager", "compiled"):
            expect_rc(f"scatter-elements-host/{name}/{mode}", args + ["-m", mode], 0)
    bad = np.zeros((260, 40, 7), np.int64)
    bad[7, 3, 2] = 300
    expect_rc("scatter-elements-host/out-of-range", ["run", save(model_with_ir(m), "seh_bad.onnx"), "--input", f"d=@{npy('seh_d.npy', data)}",
                                                     "--input", f"i=@{npy('seh_bad_i.npy', bad)}", "--input", "u=random"], 2,
              "index 300 at element")


def test_det():
    # Det by cofactors up to 4x4 (batched), against NumPy; 5x5 is refused by name.
    for n in (1, 2, 3, 4):
        x = rng.randn(2, 3, n, n).astype(np.float32)
        m = model([helper.make_node("Det", ["x"], ["y"])], [vi("x", [2, 3, n, n])], [vi("y", [2, 3])], opset=11)
        args = ["run", save(model_with_ir(m), f"det{n}.onnx"), "--input", f"x=@{npy(f'det{n}_x.npy', x)}",
                "--expect", f"y=@{npy(f'det{n}_y.npy', np.linalg.det(x.astype(np.float64)).astype(np.float32))}",
                "--atol", "1e-5", "--rtol", "1e-5"]
        for mode in ("eager", "compiled"):
            expect_rc(f"det/{n}x{n}/{mode}", args + ["-m", mode], 0)
    m = model([helper.make_node("Det", ["x"], ["y"], name="d5")], [vi("x", [5, 5])], [vi("y", [])], opset=11)
    expect_rc("det/5x5-refused", ["run", save(model_with_ir(m), "det5.onnx"), "--input", "x=random"], 2,
              "node 'd5' (Det): unsupported: Det of 5x5 matrices")


def test_reverse_sequence():
    # 3-D inputs, either axis order, lengths 0 to the full length; against a NumPy loop.
    x = rng.randn(5, 3, 2).astype(np.float32)
    lens = np.array([5, 0, 3], np.int64)
    for name, ta, ba in (("time-major", 0, 1), ("batch-major", 1, 0)):
        xi = x if ta == 0 else np.ascontiguousarray(x.transpose(1, 0, 2))
        ref = xi.copy()
        for b, n in enumerate(lens):
            for t in range(n):
                src = n - 1 - t
                if ta == 0:
                    ref[t, b] = xi[src, b]
                else:
                    ref[b, t] = xi[b, src]
        m = model([helper.make_node("ReverseSequence", ["x", "l"], ["y"], time_axis=ta, batch_axis=ba)],
                  [vi("x", list(xi.shape)), vi("l", [3], TensorProto.INT64)], [vi("y", list(xi.shape))])
        args = ["run", save(model_with_ir(m), f"rs_{name}.onnx"), "--input", f"x=@{npy(f'rs_{name}_x.npy', xi)}",
                "--input", f"l=@{npy('rs_l.npy', lens)}", "--expect", f"y=@{npy(f'rs_{name}_y.npy', ref)}"]
        for mode in ("eager", "compiled"):
            expect_rc(f"reverse-sequence/{name}/{mode}", args + ["-m", mode], 0)
    m = model([helper.make_node("ReverseSequence", ["x", "l"], ["y"], name="rs", time_axis=0, batch_axis=1)],
              [vi("x", [4, 2]), vi("l", [2], TensorProto.INT64)], [vi("y", [4, 2])])
    expect_rc("reverse-sequence/length-beyond-axis", ["run", save(model_with_ir(m), "rs_bad.onnx"), "--input", "x=random",
                                                      "--input", "l=2xi64=5,1"], 3, "is outside [-4, 4)")


def gather_nd_ref(data, indices, b):
    """GatherND as the ONNX spec writes it, with a loop over the batch and the index tuples."""
    bshape = data.shape[:b]
    k = indices.shape[-1]
    out = np.empty(indices.shape[:-1] + data.shape[b + k:], data.dtype)
    for bi in np.ndindex(bshape):
        for t in np.ndindex(indices.shape[b:-1]):
            coords = tuple(int(c) for c in indices[bi + t])
            out[bi + t] = data[bi][coords]
    return out


def test_gathernd():
    data = rng.randn(2, 3, 4, 5).astype(np.float32)
    cases = [("b0-k2", 0, np.array([[[0, 1], [1, -1]], [[1, 2], [0, 0]]], np.int64)),  # -1 counts from the end
             ("b1-k2", 1, np.array([[[2, 3], [0, -4]], [[1, 1], [2, 0]]], np.int64)),
             ("b0-k4", 0, np.array([[1, 2, 3, 4], [0, 0, 0, -1]], np.int64)),
             ("b2-k1", 2, np.array([[[1], [3], [0]], [[2], [2], [1]]], np.int64))]
    for name, b, idx in cases:
        m = model([helper.make_node("GatherND", ["d", "i"], ["y"], batch_dims=b)],
                  [vi("d", list(data.shape)), vi("i", list(idx.shape), TensorProto.INT64)], [vi("y", None)], opset=13)
        p = save(model_with_ir(m), f"gathernd_{name}.onnx")
        ref = gather_nd_ref(data, np.where(idx < 0, idx + np.array(data.shape[b:b + idx.shape[-1]]), idx), b)
        args = ["run", p, "--input", f"d=@{npy('gnd_d.npy', data)}", "--input", f"i=@{npy(f'gnd_{name}_i.npy', idx)}",
                "--expect", f"y=@{npy(f'gnd_{name}_y.npy', ref)}"]
        for mode in ("eager", "compiled"):
            expect_rc(f"gathernd/{name}/{mode}", args + ["-m", mode], 0)
    # A coordinate out of its axis's range is an error even where the row it would make exists.
    bad = np.array([[0, 5]], np.int64)
    m = model([helper.make_node("GatherND", ["d", "i"], ["y"], name="gnd")],
              [vi("d", [3, 4]), vi("i", [1, 2], TensorProto.INT64)], [vi("y", [1])], opset=13)
    expect_rc("gathernd/coordinate-out-of-range", ["run", save(model_with_ir(m), "gathernd_bad.onnx"), "--input", "d=random",
                                                   "--input", f"i=@{npy('gnd_bad.npy', bad)}"], 3, "index 5 at position 0 is outside [-4, 4)")


def test_half_precision():
    # --dtype f16/bf16 runs an ONNX model in half precision, as it does a graph file (it used to
    # be ignored for ONNX: the run stayed f32). The output is written in the half type.
    Wt = (rng.randn(6, 8) * 0.3).astype(np.float32)
    b = rng.randn(6).astype(np.float32)
    x = rng.randn(4, 8).astype(np.float32)
    m = model([helper.make_node("Gemm", ["x", "W", "b"], ["h"], transB=1), helper.make_node("Tanh", ["h"], ["y"])],
              [vi("x", [4, 8])], [vi("y", [4, 6])], [numpy_helper.from_array(Wt, "W"), numpy_helper.from_array(b, "b")])
    p = save(model_with_ir(m), "half.onnx")
    ref = np.tanh(x @ Wt.T + b)
    xin = f"x=@{npy('half_x.npy', x)}"
    for dt, np_dt, tol in (("f16", np.float16, 2e-3), ("bf16", np.float32, 2e-2)):
        out = path(f"half_{dt}.npy")
        expect_rc(f"half/{dt}", ["run", p, "--dtype", dt, "--input", xin, "--output", f"y={out}"], 0)
        if os.path.exists(out):
            y = np.load(out)
            check(f"half/{dt}-dtype", y.dtype == np_dt, f"  output dtype {y.dtype}, want {np.dtype(np_dt)}")
            err = float(np.abs(y.astype(np.float32) - ref).max())
            check(f"half/{dt}-values", err <= tol and err > 0, f"  max abs error {err} (want (0, {tol}]: rounded, not f32)")
    expect_rc("half/f64-refused", ["run", p, "--dtype", "f64", "--input", xin], 2, "--dtype f64: expected bf16, f16 or f32")


def test_refusals():
    m = model([helper.make_node("Bernoulli", ["x"], ["y"], name="b_1")], [vi("x", [2, 2])], [vi("y", [2, 2])], opset=15)
    expect_rc("refuse/op", ["run", save(model_with_ir(m), "op.onnx"), "--input", "x=random"], 2, "'b_1' (Bernoulli)")
    m = model([helper.make_node("Resize", ["x", "", "s"], ["y"], name="rs", coordinate_transformation_mode="tf_crop_and_resize")], [vi("x", [1, 1, 2, 2])], [vi("y", [1, 1, 4, 4])],
              [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s")])
    expect_rc("refuse/attr", ["run", save(model_with_ir(m), "attr.onnx"), "--input", "x=random"], 2, "'rs' (Resize)")
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])], opset=22)
    expect_rc("refuse/opset", ["run", save(model_with_ir(m), "opset22.onnx"), "--input", "x=random"], 2, "opset 22")
    # Opsets 1..6 are read for the operators unchanged up to opset 7: Softsign at opset 1 runs
    # (against NumPy), Relu at opset 5 (consumed_inputs, changed at 6) and Add at opset 6 (its
    # `broadcast` attribute, changed at 7) are refused naming the operator and both opsets.
    m = model([helper.make_node("Softsign", ["x"], ["y"])], [vi("x", [3])], [vi("y", [3])], opset=1)
    xs = np.array([-2, 0, 3], np.float32)
    np.save(path("softsign_x.npy"), xs)
    np.save(path("softsign_y.npy"), xs / (1 + np.abs(xs)))
    expect_rc("opset1/softsign-runs", ["run", save(model_with_ir(m), "opset1.onnx"), "--input", "x=@" + path("softsign_x.npy"),
                                       "--expect", "y=@" + path("softsign_y.npy"), "--atol", "1e-6"], 0)
    m = model([helper.make_node("Relu", ["x"], ["y"], name="r5")], [vi("x", [2])], [vi("y", [2])], opset=5)
    expect_rc("refuse/opset5-relu", ["run", save(model_with_ir(m), "opset5.onnx"), "--input", "x=random"], 2,
              "'r5' (Relu): unsupported: operator Relu as defined at opset 5")
    m = model([helper.make_node("Add", ["x", "x"], ["y"], name="a6")], [vi("x", [2])], [vi("y", [2])], opset=6)
    expect_rc("refuse/opset6-add", ["run", save(model_with_ir(m), "opset6.onnx"), "--input", "x=random"], 2,
              "it changed at opset 7")
    # Opsets 18..21 are read (for the quantization operators), but an operator whose meaning
    # changed after 17 (ReduceMean's axes became an input in 18) is refused naming the opset.
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])], opset=18)
    expect_rc("opset18/relu-runs", ["run", save(model_with_ir(m), "opset18.onnx"), "--input", "x=random"], 0)
    m = model([helper.make_node("ReduceMean", ["x", "ax"], ["y"], name="rm")], [vi("x", [2, 3])], [vi("y", [2, 1])],
              [numpy_helper.from_array(np.array([1], np.int64), "ax")], opset=18)
    expect_rc("refuse/opset18-reducemean", ["run", save(model_with_ir(m), "opset18_rm.onnx"), "--input", "x=random"], 2,
              "'rm' (ReduceMean): unsupported: operator ReduceMean as of opset 18")
    # Quantization: an unknown com.microsoft operator by name; a bad scale shape naming the node.
    m = model([helper.make_node("QAttention", ["x"], ["y"], name="qa", domain="com.microsoft")], [vi("x", [2])], [vi("y", [2])])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    expect_rc("refuse/com.microsoft", ["run", save(model_with_ir(m), "qattn.onnx"), "--input", "x=random"], 2,
              "operator com.microsoft.QAttention")
    m = model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], name="ql", axis=1)], [vi("x", [2, 3])], [vi("y", [2, 3], TensorProto.UINT8)],
              [numpy_helper.from_array(np.ones(2, np.float32), "s"), numpy_helper.from_array(np.zeros(2, np.uint8), "z")])
    expect_rc("refuse/quantize-scale-shape", ["run", save(model_with_ir(m), "ql.onnx"), "--input", "x=random"], 2,
              "'ql' (QuantizeLinear)")
    m = model([helper.make_node("ConvInteger", ["x", "w"], ["y"], name="ci")], [vi("x", [1, 2, 4, 4], TensorProto.UINT8)],
              [vi("y", [1, 3, 2, 2], TensorProto.INT32)], [numpy_helper.from_array(np.ones((3, 2, 3, 3), np.float32), "w")])
    expect_rc("refuse/convinteger-float-w", ["run", save(model_with_ir(m), "ci.onnx"), "--input", "x=random"], 2,
              "'ci' (ConvInteger)")
    # double is an rlx dtype now (f64, tests/onnx/f64_dtypes.py); complex is not
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2], TensorProto.COMPLEX64)], [vi("y", [2], TensorProto.COMPLEX64)])
    expect_rc("refuse/complex64", ["run", save(model_with_ir(m), "complex.onnx"), "--input", "x=random"], 2,
              "unsupported element type complex64")
    # A cycle: a node reads what a later node writes.
    m = model([helper.make_node("Relu", ["z"], ["y"]), helper.make_node("Neg", ["y"], ["z"])], [vi("x", [2])], [vi("y", [2])])
    expect_rc("hostile/cycle", ["run", save(model_with_ir(m), "cycle.onnx"), "--input", "x=random"], 2, "not produced by any earlier node")
    # A node missing a required input that must be known at import (found by fuzz_onnx: the
    # message read the missing input's name past the end of the node's input list).
    m = model([helper.make_node("Slice", ["x", "st"], ["y"], name="sl")], [vi("x", [4])], [vi("y", [2])],
              [numpy_helper.from_array(np.array([1], np.int64), "st")])
    expect_rc("hostile/slice-without-ends", ["run", save(model_with_ir(m), "slice_no_ends.onnx"), "--input", "x=random"], 2,
              "node 'sl' (Slice): ends (input 2) is required")
    # An axis of a scalar (fuzz_onnx: Split, Concat, Slice, Squeeze and Gather indexed the
    # empty shape at axis 0, which the importer let through for rank 0).
    m = model([helper.make_node("Split", ["x"], ["y", "z"], name="sp")], [vi("x", [])], [vi("y", []), vi("z", [])])
    expect_rc("hostile/split-of-a-scalar", ["run", save(model_with_ir(m), "split_scalar.onnx"), "--input", "x=f32=1"], 2,
              "node 'sp' (Split): axis 0 is out of range for rank 0")
    m = model([helper.make_node("Concat", ["x", "x"], ["y"], name="cc", axis=0)], [vi("x", [])], [vi("y", [2])])
    expect_rc("hostile/concat-of-scalars", ["run", save(model_with_ir(m), "concat_scalar.onnx"), "--input", "x=f32=1"], 2,
              "axis 0 is out of range for rank 0")
    # A binary op with one input, folded on the host (fuzz_onnx: read a second value that was not there).
    for op in ("Sub", "Div"):
        m = model([helper.make_node(op, ["c"], ["y"], name="b1")], [vi("x", [1])], [vi("y", [1], TensorProto.INT64)],
                  [numpy_helper.from_array(np.array([3], np.int64), "c")])
        expect_rc(f"hostile/{op.lower()}-with-one-input", ["run", save(model_with_ir(m), f"{op}1.onnx"), "--input", "x=random"], 2,
                  "is required")
    # Recurrent nets: only full-length sequences, and the listed activation functions.
    W, R = rng.randn(1, 4, 3).astype(np.float32), rng.randn(1, 4, 4).astype(np.float32)
    rnn_inits = [numpy_helper.from_array(W, "W"), numpy_helper.from_array(R, "R"),
                 numpy_helper.from_array(np.array([5, 3], np.int32), "lens")]
    m = model([helper.make_node("RNN", ["x", "W", "R", "", "lens"], ["y"], name="rnn", hidden_size=4)],
              [vi("x", [5, 2, 3])], [vi("y", [5, 1, 2, 4])], rnn_inits)
    expect_rc("refuse/rnn-sequence-lens", ["run", save(model_with_ir(m), "rnn_lens.onnx"), "--input", "x=random"], 2,
              "node 'rnn' (RNN): unsupported: sequence_lens other than the full sequence length 5 (got 3)")
    m = model([helper.make_node("RNN", ["x", "W", "R"], ["y"], name="rnn", hidden_size=4, activations=["Gelu"])],
              [vi("x", [5, 2, 3])], [vi("y", [5, 1, 2, 4])], rnn_inits[:2])
    expect_rc("refuse/rnn-activation", ["run", save(model_with_ir(m), "rnn_act.onnx"), "--input", "x=random"], 2,
              "unsupported: activation function \"Gelu\"")
    # An RNN with LeakyRelu of alpha 2 (above 1: x where x >= 0 is then the smaller of x and 2x),
    # against a NumPy loop of the ONNX equations.
    x = rng.randn(5, 2, 3).astype(np.float32)
    h, ys = np.zeros((2, 4), np.float32), []
    for t in range(5):
        z = x[t] @ W[0].T + h @ R[0].T
        h = np.where(z >= 0, z, 2 * z).astype(np.float32)
        ys.append(h)
    m = model([helper.make_node("RNN", ["x", "W", "R"], ["y"], hidden_size=4, activations=["LeakyRelu"], activation_alpha=[2.0])],
              [vi("x", [5, 2, 3])], [vi("y", [5, 1, 2, 4])], rnn_inits[:2])
    expect_rc("rnn/leaky-relu-alpha-above-1", ["run", save(model_with_ir(m), "rnn_leaky.onnx"), "--input", f"x=@{npy('rnn_x.npy', x)}",
                                               "--expect", f"y=@{npy('rnn_leaky_y.npy', np.stack(ys)[:, None])}"], 0)
    m = model([helper.make_node("RNN", ["x", "W", "R"], ["y"], name="rnn", hidden_size=5)],
              [vi("x", [5, 2, 3])], [vi("y", [5, 1, 2, 5])], rnn_inits[:2])
    expect_rc("refuse/rnn-weight-shape", ["run", save(model_with_ir(m), "rnn_w.onnx"), "--input", "x=random"], 2,
              "W has shape [1, 4, 3], expected [1, 5, 3]")
    # DepthToSpace / SpaceToDepth geometry is checked before the reshape it becomes.
    m = model([helper.make_node("DepthToSpace", ["x"], ["y"], name="d2s", blocksize=2)], [vi("x", [1, 6, 2, 2])], [vi("y", [1, 1, 4, 4])])
    expect_rc("refuse/depthtospace-channels", ["run", save(model_with_ir(m), "d2s.onnx"), "--input", "x=random"], 2,
              "node 'd2s' (DepthToSpace): channels (6) must be a multiple of blocksize^2 (4)")
    m = model([helper.make_node("SpaceToDepth", ["x"], ["y"], name="s2d", blocksize=0)], [vi("x", [1, 1, 4, 4])], [vi("y", [1, 1, 4, 4])])
    expect_rc("refuse/spacetodepth-blocksize", ["run", save(model_with_ir(m), "s2d.onnx"), "--input", "x=random"], 2,
              "node 's2d' (SpaceToDepth): blocksize must be a positive integer, got 0")
    # A target shape whose product overflows int64 (fuzz_onnx: signed overflow in Reshape).
    m = model([helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")], [vi("x", [4])], [vi("y", [4])],
              [numpy_helper.from_array(np.array([2, 7309449295936094207, -1], np.int64), "s")])
    expect_rc("hostile/reshape-overflow", ["run", save(model_with_ir(m), "reshape_big.onnx"), "--input", "x=random"], 2,
              "has more elements than int64 can count")
    # Constant inputs of the wrong size (fuzz_onnx: both read past the end of the values).
    m = model([helper.make_node("Range", ["s", "l", "d"], ["y"], name="rg")], [vi("x", [1])], [vi("y", [3])],
              [numpy_helper.from_array(np.zeros(0, np.int64), "s"), numpy_helper.from_array(np.array(3, np.int64), "l"),
               numpy_helper.from_array(np.array(1, np.int64), "d")])
    expect_rc("hostile/range-empty-start", ["run", save(model_with_ir(m), "range_empty.onnx"), "--input", "x=random"], 2,
              "start (input 0) must have one element, it has 0")
    c = [numpy_helper.from_array(np.ones(n, np.float32), name) for n, name in ((3, "sc"), (3, "bi"), (2, "mu"), (3, "var"))]
    m = model([helper.make_node("BatchNormalization", ["x", "sc", "bi", "mu", "var"], ["y"], name="bn")],
              [vi("x", [1, 3, 2, 2])], [vi("y", [1, 3, 2, 2])], c)
    expect_rc("hostile/batchnorm-short-mean", ["run", save(model_with_ir(m), "bn_short.onnx"), "--input", "x=random"], 2,
              "input_mean has 2 elements; X has 3 channels")
    # raw_data whose size disagrees with the shape.
    t = numpy_helper.from_array(np.zeros(6, np.float32), "W")
    t.dims[:] = [7]
    m = model([helper.make_node("Add", ["x", "W"], ["y"])], [vi("x", [7])], [vi("y", [7])], [t])
    expect_rc("hostile/raw-size", ["run", save(model_with_ir(m), "rawsize.onnx"), "--input", "x=random"], 2, "raw_data has 24 bytes")
    # Absurd dims.
    t = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[1 << 40, 1 << 30], raw_data=b"")
    m = model([helper.make_node("Add", ["x", "W"], ["y"])], [vi("x", [1])], [vi("y", [1])], [t])
    expect_rc("hostile/absurd-dims", ["run", save(model_with_ir(m), "absurd.onnx"), "--input", "x=random"], 2, "too many elements")
    # Truncated protobuf: every few prefixes of a valid file.
    good = open(path("names.onnx"), "rb").read()
    bad_rcs = set()
    for n in range(1, len(good), max(1, len(good) // 23)):
        with open(path("trunc.onnx"), "wb") as f:
            f.write(good[:n])
        rc, _, err = rlx("run", path("trunc.onnx"), "--input", "onnx::MatMul_0=random", "--dim", "batch=1", "--dim", "p2o.DynamicDimension.0=1")
        bad_rcs.add(rc)
    check("hostile/truncated", bad_rcs == {2}, f"  exit codes {bad_rcs}")


def test_attribute_binder_and_definitions():
    # Attributes are read as the type ONNX declares: another type is refused, not read as the
    # default (Softmax's axis as a string or a float was silently ignored).
    def softmax(**attrs):
        n = helper.make_node("Softmax", ["x"], ["y"], name="sm")
        for k, v in attrs.items():
            n.attribute.append(helper.make_attribute(k, v))
        return model([n], [vi("x", [2, 3])], [vi("y", [2, 3])])
    expect_rc("binder/axis-as-string", ["run", save(model_with_ir(softmax(axis="0")), "axis_str.onnx"), "--input", "x=random"], 2,
              "node 'sm' (Softmax): attribute 'axis' must be an int, it is a string")
    expect_rc("binder/axis-as-float", ["run", save(model_with_ir(softmax(axis=0.0)), "axis_float.onnx"), "--input", "x=random"], 2,
              "node 'sm' (Softmax): attribute 'axis' must be an int, it is a float")
    expect_rc("binder/axis-as-int", ["run", save(model_with_ir(softmax(axis=0)), "axis_int.onnx"), "--input", "x=random"], 0)
    m = model([helper.make_node("LeakyRelu", ["x"], ["y"], name="lr", alpha=1)], [vi("x", [2])], [vi("y", [2])])
    expect_rc("binder/alpha-as-int", ["run", save(model_with_ir(m), "alpha_int.onnx"), "--input", "x=random"], 2,
              "node 'lr' (LeakyRelu): attribute 'alpha' must be a float, it is an int")
    m = model([helper.make_node("Transpose", ["x"], ["y"], name="tr", perm=[1.0, 0.0])], [vi("x", [2, 3])], [vi("y", [3, 2])])
    expect_rc("binder/perm-as-floats", ["run", save(model_with_ir(m), "perm_floats.onnx"), "--input", "x=random"], 2,
              "node 'tr' (Transpose): attribute 'perm' must be a list of ints, it is a list of floats")
    # An attribute given twice on one node.
    m = softmax(axis=0)
    m.graph.node[0].attribute.append(helper.make_attribute("axis", 1))
    expect_rc("hostile/attribute-twice", ["run", save(model_with_ir(m), "attr_twice.onnx"), "--input", "x=random"], 2,
              "node 'sm' (Softmax): attribute 'axis' is given twice")
    # A value defined twice: by two nodes, or by a node and an initializer (the later one won).
    m = model([helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Neg", ["x"], ["y"], name="b")],
              [vi("x", [2])], [vi("y", [2])])
    expect_rc("hostile/output-twice", ["run", save(model_with_ir(m), "out_twice.onnx"), "--input", "x=random"], 2,
              "node 'b' (Neg): output 'y' is also produced by node 'a' (Relu)")
    m = model([helper.make_node("Relu", ["x"], ["w"], name="r"), helper.make_node("Add", ["x", "w"], ["y"])],
              [vi("x", [2])], [vi("y", [2])], [numpy_helper.from_array(np.ones(2, np.float32), "w")])
    expect_rc("hostile/output-is-an-initializer", ["run", save(model_with_ir(m), "out_init.onnx"), "--input", "x=random"], 2,
              "node 'r' (Relu): output 'w' has the name of an initializer")


def external_model(location, offset=None, length=None, nbytes=16):
    t = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[4])
    t.data_location = TensorProto.EXTERNAL
    kv = [("location", location)]
    if offset is not None:
        kv.append(("offset", str(offset)))
    if length is not None:
        kv.append(("length", str(length)))
    for k, v in kv:
        e = t.external_data.add()
        e.key, e.value = k, v
    return model_with_ir(model([helper.make_node("Add", ["x", "W"], ["y"])], [vi("x", [4])], [vi("y", [4])], [t]))


def test_external_data():
    d = path("ext")
    os.makedirs(os.path.join(d, "sub"))
    W = np.arange(8, dtype=np.float32) * 0.5
    W.tofile(os.path.join(d, "sub", "w.bin"))
    x = np.ones(4, np.float32)
    np.save(os.path.join(d, "x.npy"), x)
    np.save(os.path.join(d, "ref.npy"), x + W[2:6])
    write(external_model("sub/w.bin", offset=8, length=16), os.path.join(d, "ok.onnx"))
    xin = f"x=@{os.path.join(d, 'x.npy')}"
    expect_rc("external/ok", ["run", os.path.join(d, "ok.onnx"), "--input", xin, "--expect", f"y=@{os.path.join(d, 'ref.npy')}"], 0)
    # Converting keeps the values (they are copied into the safetensors file).
    expect_rc("external/convert", ["convert", os.path.join(d, "ok.onnx"), "-o", os.path.join(d, "ok.json"),
                                   "--params-out", os.path.join(d, "ok.safetensors")], 0)
    expect_rc("external/convert-run", ["run", os.path.join(d, "ok.json"), "-p", os.path.join(d, "ok.safetensors"), "--input", xin,
                                       "--expect", f"y=@{os.path.join(d, 'ref.npy')}"], 0)
    cases = {
        "parent": ("../../etc/passwd", "leaves the model's folder"),
        "absolute": ("/etc/passwd", "must be a relative path"),
        "missing": ("sub/nope.bin", "not found"),
        "directory": ("sub", "not a regular file"),
    }
    for k, (loc, phrase) in cases.items():
        write(external_model(loc), os.path.join(d, f"{k}.onnx"))
        expect_rc(f"external/{k}", ["run", os.path.join(d, f"{k}.onnx"), "--input", xin], 2, phrase)
    os.symlink("/etc/hostname" if os.path.exists("/etc/hostname") else "/etc/passwd", os.path.join(d, "out_link.bin"))
    write(external_model("out_link.bin"), os.path.join(d, "symlink.onnx"))
    expect_rc("external/symlink-out", ["run", os.path.join(d, "symlink.onnx"), "--input", xin], 2, "resolves outside the model's folder")
    write(external_model("sub/w.bin", offset=24), os.path.join(d, "past_end.onnx"))
    expect_rc("external/past-end", ["run", os.path.join(d, "past_end.onnx"), "--input", xin], 2, "runs past its end")
    write(external_model("sub/w.bin", offset=1 << 62), os.path.join(d, "huge_offset.onnx"))
    expect_rc("external/huge-offset", ["run", os.path.join(d, "huge_offset.onnx"), "--input", xin], 2, "runs past its end")
    write(external_model("sub/w.bin", length=12), os.path.join(d, "bad_length.onnx"))
    expect_rc("external/length-mismatch", ["run", os.path.join(d, "bad_length.onnx"), "--input", xin], 2, "differs from the 16 bytes")
    write(external_model("sub/w.bin", offset="-4"), os.path.join(d, "neg_offset.onnx"))
    expect_rc("external/negative-offset", ["run", os.path.join(d, "neg_offset.onnx"), "--input", xin], 2, "not a non-negative integer")


def test_output_names_never_leave_out_dir():
    # Issue 24: an ONNX output name is model-given; under --out-dir it becomes a file name only
    # when it is a plain one, else exit 2 naming --output. Nothing is written outside the folder.
    d = path("names")
    os.makedirs(os.path.join(d, "out"))
    m = model([helper.make_node("Neg", ["x"], ["../onnx_escaped"])], [vi("x", [2])], [vi("../onnx_escaped", [2])])
    p = os.path.join(d, "m.onnx")
    write(m, p)
    out = os.path.join(d, "out")
    expect_rc("names/dotdot-refused", ["run", p, "--input", "x=2xf32=1,2", "--out-dir", out], 2,
              "output '../onnx_escaped' cannot be a file name (it contains a path separator); name its file with --output")
    check("names/nothing-beside-out-dir", not os.path.exists(os.path.join(d, "onnx_escaped.npy")), f"  {os.listdir(d)}")
    check("names/nothing-in-out-dir", os.listdir(out) == [], f"  {os.listdir(out)}")
    # The way out the message names: --output gives the file, and --out-dir skips that output.
    target = os.path.join(out, "named.npy")
    got, _, err = rlx("run", p, "--input", "x=2xf32=1,2", "--out-dir", out, "--output", "../onnx_escaped=" + target)
    check("names/output-flag-works", got == 0 and os.path.exists(target), f"  exit {got}: {err.strip()[:400]}")
    if os.path.exists(target):
        check("names/output-flag-values", np.array_equal(np.load(target), -np.array([1, 2], np.float32)))
    check("names/only-the-named-file", sorted(os.listdir(out)) == ["named.npy"], f"  {os.listdir(out)}")


def test_docs_table():
    # docs/onnx.md carries the operator table `rlx onnx-ops` prints; they must agree.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    doc = open(os.path.join(root, "docs", "onnx.md")).read()
    begin, end = "<!-- onnx-ops:begin -->\n", "<!-- onnx-ops:end -->"
    check("docs/markers", begin in doc and end in doc)
    if begin in doc and end in doc:
        in_doc = doc.split(begin, 1)[1].split(end, 1)[0].strip()
        _, out, _ = rlx("onnx-ops")
        generated = out.split("\n\n", 1)[0].strip()
        check("docs/table-matches-binary", in_doc == generated,
              "  docs/onnx.md's operator table differs from `rlx onnx-ops`: regenerate it")


def test_subgraphs():
    # Subgraph attributes (If/Loop/Scan bodies) get the main graph's checks; outer names are
    # visible per ONNX's lexical scoping; a value-bound condition re-specialises when it changes.
    x = vi("x", [3])
    one = helper.make_node("Constant", [], ["one"], value=numpy_helper.from_array(np.array(True), "one_v"))

    def if_model(then_nodes, then_out, else_nodes=None, else_out=None, extra=()):
        tg = helper.make_graph(then_nodes, "then", [], [vi(then_out, None)])
        eg = helper.make_graph(else_nodes or [helper.make_node("Identity", ["x"], ["e"])], "else", [], [vi(else_out or "e", None)])
        return model([one] + list(extra) + [helper.make_node("If", ["one"], ["y"], then_branch=tg, else_branch=eg, name="the_if")],
                     [x], [vi("y", None)])
    xin = "x=3xf32=1,2,3"
    p = save(if_model([helper.make_node("Neg", ["nowhere"], ["t"])], "t"), "sub_undefined.onnx")
    expect_rc("subgraph/undefined-outer-name", ["run", p, "-i", xin], 2, "reads 'nowhere', which is not defined")
    p = save(if_model([helper.make_node("Neg", ["x"], ["one"])], "one"), "sub_shadow.onnx")
    expect_rc("subgraph/redefines-outer-name", ["run", p, "-i", xin], 2, "already defined in this graph or an enclosing one")
    # nesting deeper than the limit (16)
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["d0"])], "leaf", [], [vi("d0", None)])
    for k in range(1, 18):
        g = helper.make_graph([helper.make_node("If", ["one"], [f"d{k}"], then_branch=g, else_branch=g)], f"level{k}", [], [vi(f"d{k}", None)])
    p = save(model([one, helper.make_node("If", ["one"], ["y"], then_branch=g, else_branch=g)], [x], [vi("y", None)]), "sub_deep.onnx")
    expect_rc("subgraph/too-deep", ["run", p, "-i", xin], 2, "above the limit of 16")
    # an outer value produced after the node is not visible
    late = helper.make_node("Neg", ["x"], ["late"])
    tg = helper.make_graph([helper.make_node("Identity", ["late"], ["t"])], "then", [], [vi("t", None)])
    eg = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [vi("e", None)])
    p = save(model([one, helper.make_node("If", ["one"], ["y"], then_branch=tg, else_branch=eg), late], [x], [vi("y", None)]), "sub_late.onnx")
    expect_rc("subgraph/outer-value-defined-later", ["run", p, "-i", xin], 2, "reads 'late'")
    # a folded If reads outer values, and a branch's names do not leak out of it
    p = save(if_model([helper.make_node("Mul", ["x", "x"], ["t"])], "t"), "sub_fold.onnx")
    _, out, _ = expect_rc("subgraph/folded-if", ["run", p, "-i", xin, "--expect", "y=3xf32=1,4,9"], 0)
    # the condition from a small input given by value: --steps with the value fed back
    # specialises again (then: y = x, else: y = concat(x, x)), never reusing the first graph
    tg = helper.make_graph([helper.make_node("Identity", ["x"], ["a"])], "t", [], [vi("a", None)])
    eg = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["b"], axis=0)], "e", [], [vi("b", None)])
    m = model([helper.make_node("Equal", ["sr", "k16"], ["c"]), helper.make_node("If", ["c"], ["y"], then_branch=tg, else_branch=eg),
               helper.make_node("Sub", ["sr", "k8"], ["sr_next"])], [x, vi("sr", [], TensorProto.INT64)],
              [vi("y", None), vi("sr_next", [], TensorProto.INT64)],
              [numpy_helper.from_array(np.int64(16000), "k16"), numpy_helper.from_array(np.int64(8000), "k8")])
    p = save(m, "sub_sr.onnx")
    expect_rc("subgraph/value-bound-if-then", ["run", p, "-i", xin, "-i", "sr=i64=16000", "--expect", "y=3xf32=1,2,3"], 0)
    expect_rc("subgraph/value-bound-if-else", ["run", p, "-i", xin, "-i", "sr=i64=8000", "--expect", "y=6xf32=1,2,3,1,2,3"], 0)
    expect_rc("subgraph/value-bound-if-respecialised-on-feed",
              ["run", p, "-i", xin, "-i", "sr=i64=16000", "--steps", "2", "--feed", "sr_next=sr", "--expect", "y=6xf32=1,2,3,1,2,3",
               "--expect", "sr_next=i64=0"], 0)

    # malformed control flow: exit 2 naming the node, never a crash or a guess
    x80, X = vi("x", [80]), ["-i", "x=random:1"]
    zero = [numpy_helper.from_array(np.float32(0), "z")]
    cond = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "z"], ["c"])]
    neg = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "t", [], [vi("t", [80])])
    body = lambda nodes, outs: helper.make_graph(nodes, "b", [vi("i", [], TensorProto.INT64), vi("cond", [], TensorProto.BOOL), vi("acc", [80])], outs)
    add = helper.make_node("Add", ["acc", "x"], ["ao"])
    bad = {
        "if-without-else": (model(cond + [helper.make_node("If", ["c"], ["y"], then_branch=neg, name="n")], [x80], [vi("y", None)], zero),
                            X, "'else_branch' (a graph) is required"),
        "if-vector-condition": (model([helper.make_node("Greater", ["x", "z"], ["c"]), helper.make_node("If", ["c"], ["y"], then_branch=neg, else_branch=neg)],
                                      [x80], [vi("y", None)], zero), X, "the condition must have one element"),
        "loop-vector-trip-count": (model([helper.make_node("Cast", ["x"], ["M"], to=TensorProto.INT64),
                                          helper.make_node("Loop", ["M", "", "x"], ["y"], body=body([helper.make_node("Identity", ["cond"], ["co"]), add],
                                                                                                    [vi("co", [], TensorProto.BOOL), vi("ao", [80])]))],
                                         [x80], [vi("y", None)]), X, "the trip count M must have one element"),
        "loop-vector-body-condition": (model([helper.make_node("Loop", ["M", "", "x"], ["y"], body=body([helper.make_node("Greater", ["acc", "acc"], ["co"]), add],
                                                                                                        [vi("co", [80], TensorProto.BOOL), vi("ao", [80])]))],
                                             [x80, vi("M", [], TensorProto.INT64)], [vi("y", None)]), X + ["-i", "M=i64=3"],
                                       "(the body's condition): the condition must have one element"),
        "scan-axis-out-of-range": (model([helper.make_node("Scan", ["x"], ["y"], num_scan_inputs=1, scan_input_axes=[3],
                                                           body=helper.make_graph([helper.make_node("Identity", ["a"], ["o"])], "b", [vi("a", [])], [vi("o", [])]))],
                                         [x80], [vi("y", None)], opset=11), X, "axis 3 is out of range"),
        "scan-body-inputs": (model([helper.make_node("Scan", ["x"], ["y"], num_scan_inputs=1,
                                                     body=helper.make_graph([helper.make_node("Identity", ["a"], ["o"])], "b", [vi("a", []), vi("b", [])], [vi("o", [])]))],
                                   [x80], [vi("y", None)], opset=11), X, "has 2 inputs, 1 expected"),
    }
    for name, (m, args, phrase) in bad.items():
        p = save(m, f"bad_{name}.onnx")
        expect_rc(f"subgraph/{name}", ["run", p] + args, 2, phrase)


if __name__ == "__main__":
    sys.exit(clitest.main("ONNX CLI tests", globals()))
