#!/usr/bin/python3
"""Issue 21: hostile and unusual ONNX models, and output that scripts can trust.

Every model is built here with onnx.helper; every expected value is computed here with NumPy.
Bad input: exit 2 and a message naming the node (and the attribute or input); never a crash,
never a silent guess.

  tests/onnx/hostile_tests.py --rlx build/apps/rlx/rlx [-k SUBSTRING]
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper
import onnx_build  # noqa: E402
from onnx_build import vi  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from clitest import check, expect_rc, path, save  # noqa: E402
import clitest  # noqa: E402


def model(nodes, inputs, outputs, inits=(), opset=13):
    return onnx_build.model(nodes, inputs, outputs, inits, opset, ir_version=8)


def init(a, name):
    return numpy_helper.from_array(np.asarray(a), name)


def test_crashes():
    # Tile [2, 3] by [2^30, 2^30]: 2^62 elements fit int64, their bytes do not (SIGSEGV in the
    # CPU executor before issue 24): refused at load through the ONNX path too.
    m = model([helper.make_node("Tile", ["x", "r"], ["y"], name="t")], [vi("x", [2, 3])], [vi("y", None)],
              [init(np.array([2**30, 2**30], np.int64), "r")])
    p = save(m, "tile.onnx")
    for cmd in (["run", p, "--input", "x=random"], ["inspect", p], ["convert", p, "-o", path("tile.json")]):
        expect_rc(f"crash/tile-bytes-overflow/{cmd[0]}", cmd, 2, "node 't' (Tile)")
    # Tile whose repeat times the dimension overflows int64 itself.
    m = model([helper.make_node("Tile", ["x", "r"], ["y"], name="t")], [vi("x", [2, 3])], [vi("y", None)],
              [init(np.array([2**62, 1], np.int64), "r")])
    expect_rc("crash/tile-repeat-overflow", ["run", save(m, "tile2.onnx"), "--input", "x=random"], 2,
              "node 't' (Tile): repeats[0] = 4611686018427387904 times dimension 2 overflows int64")
    # Split with no outputs: a division by zero (SIGFPE) in the importer.
    for opset in (11, 13):
        m = model([helper.make_node("Split", ["x"], [], name="sp"), helper.make_node("Relu", ["x"], ["y"])],
                  [vi("x", [4])], [vi("y", None)], opset=opset)
        expect_rc(f"crash/split-without-outputs/opset{opset}", ["run", save(m, f"split0_{opset}.onnx"), "--input", "x=random"], 2,
                  "node 'sp' (Split): has no outputs")
    # The same when Split folds (its input is a known value, as in shape arithmetic): the fold
    # divided by zero too (found by fuzz_onnx_struct, tests/fuzz/seeds/onnx_struct/split_fold_no_outputs.onnx).
    m = model([helper.make_node("Split", ["c"], [], name="sp"), helper.make_node("Relu", ["x"], ["y"])],
              [vi("x", [4])], [vi("y", None)], [init(np.arange(4, dtype=np.int64), "c")])
    expect_rc("crash/split-fold-without-outputs", ["run", save(m, "split0_fold.onnx"), "--input", "x=random"], 2,
              "node 'sp' (Split): has no outputs")


def test_fuzz_findings():
    # fuzz_onnx_struct: a Conv/ConvTranspose weight of the wrong rank read its kernel shape past
    # the end of W's shape (std::length_error, exit 3 with a message about std::vector).
    for op in ("Conv", "ConvTranspose"):
        m = model([helper.make_node(op, ["x", "w"], ["y"], name="cv")], [vi("x", [1, 2, 4, 4])], [vi("y", None)],
                  [init(np.zeros(8, np.float32), "w")])
        expect_rc(f"fuzz/{op.lower()}-weight-rank", ["run", save(m, f"{op}_w1.onnx"), "--input", "x=random"], 2,
                  f"node 'cv' ({op}): W (input 1) has shape [8]; it must have rank 4 like X [1, 2, 4, 4]")


    # fuzz_onnx_struct: folded int64 arithmetic that leaves int64 (Abs of -2^63 was signed-overflow
    # UB; a wrapped value silently becomes a shape) is refused.
    big = np.array([-2**63], np.int64)
    for op, ins, inits, phrase in (
            ("Abs", ["a"], [init(big, "a")], "integer overflow: -(-9223372036854775808) does not fit int64"),
            ("Neg", ["a"], [init(big, "a")], "integer overflow: -(-9223372036854775808) does not fit int64"),
            ("Add", ["a", "b"], [init(np.array([2**62], np.int64), "a"), init(np.array([2**62], np.int64), "b")],
             "integer overflow: 4611686018427387904 + 4611686018427387904 does not fit int64"),
            ("Mul", ["a", "b"], [init(np.array([2**32], np.int64), "a"), init(np.array([2**32], np.int64), "b")],
             "integer overflow: 4294967296 * 4294967296 does not fit int64"),
            ("Div", ["a", "b"], [init(big, "a"), init(np.array([-1], np.int64), "b")],
             "integer overflow: -9223372036854775808 / -1 does not fit int64")):
        m = model([helper.make_node(op, ins, ["y"], name="f")], [vi("x", [1])], [vi("y", None, TensorProto.INT64)], inits)
        expect_rc(f"fuzz/folded-int64-overflow/{op}", ["run", save(m, f"ovf_{op}.onnx"), "--input", "x=random"], 2,
                  f"node 'f' ({op}): {phrase}")
    # fuzz_onnx_struct: Not of a known float tensor called an empty host function
    # (std::bad_function_call, exit 3); now the mapping refuses the dtype.
    m = model([helper.make_node("Not", ["a"], ["y"], name="nt")], [vi("x", [1])], [vi("y", None, TensorProto.BOOL)],
              [init(np.array([1.5, 0], np.float32), "a")])
    expect_rc("fuzz/not-of-a-float-initializer", ["run", save(m, "not_f.onnx"), "--input", "x=random"], 2,
              "node 'nt' (Not): input must be bool, got float")
    m = model([helper.make_node("Not", ["x"], ["y"], name="nt")], [vi("x", [2])], [vi("y", None, TensorProto.BOOL)])
    expect_rc("fuzz/not-of-a-float-input", ["run", save(m, "not_fi.onnx"), "--input", "x=2xf32=1.5,0"], 2,
              "node 'nt' (Not): input must be bool, got float")
    m = model([helper.make_node("Not", ["x"], ["y"], name="nt")], [vi("x", [2], TensorProto.BOOL)], [vi("y", None, TensorProto.BOOL)])
    np.save(path("not_y.npy"), np.array([False, True]))
    expect_rc("fuzz/not-of-bool-runs", ["run", save(m, "not_b.onnx"), "--input", "x=2xbool=1,0", "--expect", f"y=@{path('not_y.npy')}"], 0)
    # fuzz_onnx_struct: TopK's (and Trilu's) k with no element was read with .at(0)
    # (std::out_of_range escaped: exit 3 with a libstdc++ message).
    for op, ins in (("TopK", ["x", "k"]), ("Trilu", ["x", "k"])):
        m = model([helper.make_node(op, ins, ["y"], name="tk")], [vi("x", [2, 3])], [vi("y", None)],
                  [init(np.zeros((4, 0), np.int64), "k")])
        expect_rc(f"fuzz/{op.lower()}-empty-k", ["run", save(m, f"{op}_k0.onnx"), "--input", "x=random"], 2,
                  f"node 'tk' ({op}): k (input 1) must have one element, it has 0")
    x = np.array([[3, 1, 2], [0, 5, 4]], np.float32)
    np.save(path("tk_x.npy"), x)
    np.save(path("tk_y.npy"), -np.sort(-x, axis=1)[:, :2])
    m = model([helper.make_node("TopK", ["x", "k"], ["y", "i"], name="tk")], [vi("x", [2, 3])], [vi("y", None), vi("i", None, TensorProto.INT64)],
              [init(np.array([2], np.int64), "k")])
    expect_rc("fuzz/topk-k-runs", ["run", save(m, "topk_ok.onnx"), "--input", f"x=@{path('tk_x.npy')}", "--expect", f"y=@{path('tk_y.npy')}"], 0)
    # fuzz_onnx_struct: a folded Concat's axis sum overflowed int64 (UBSan), and its inputs'
    # other dims were not compared.
    t = TensorProto(name="e", data_type=TensorProto.INT32, dims=[2**63 - 1, 0, 1])
    m = model([helper.make_node("Concat", ["e", "e"], ["y"], name="cc", axis=0)], [vi("x", [1])], [vi("y", None, TensorProto.INT32)], [t])
    expect_rc("fuzz/concat-fold-axis-overflow", ["run", save(m, "cc_ovf.onnx"), "--input", "x=random"], 2,
              "node 'cc' (Concat): the concatenated axis 0 overflows int64")
    m = model([helper.make_node("Concat", ["a", "b"], ["y"], name="cc", axis=0)], [vi("x", [1])], [vi("y", None, TensorProto.INT64)],
              [init(np.zeros((2, 3), np.int64), "a"), init(np.zeros((2, 4), np.int64), "b")])
    expect_rc("fuzz/concat-fold-other-dims", ["run", save(m, "cc_dims.onnx"), "--input", "x=random"], 2,
              "node 'cc' (Concat): input 1 has shape [2, 4]; off axis 0 it must match [2, 3]")
    a, b = np.arange(6, dtype=np.int64).reshape(2, 3), np.arange(6, 9, dtype=np.int64).reshape(1, 3)
    m = model([helper.make_node("Concat", ["a", "b"], ["y"], name="cc", axis=0)], [vi("x", [1])], [vi("y", None, TensorProto.INT64)],
              [init(a, "a"), init(b, "b")])
    np.save(path("cc_y.npy"), np.concatenate([a, b], 0))
    expect_rc("fuzz/concat-fold-runs", ["run", save(m, "cc_ok.onnx"), "--input", "x=random", "--expect", f"y=@{path('cc_y.npy')}"], 0)
    # fuzz_onnx_struct: OneHot with a huge depth built a positions constant of that many values
    # on the host (exit 3 out of memory, or an ASan allocation abort).
    m = model([helper.make_node("OneHot", ["i", "d", "v"], ["y"], name="oh")], [vi("i", [2], TensorProto.INT64)], [vi("y", None)],
              [init(np.array(2**40, np.int64), "d"), init(np.array([0, 1], np.float32), "v")])
    expect_rc("fuzz/onehot-huge-depth", ["run", save(m, "onehot_big.onnx"), "--input", "i=2xi64=0,1"], 2,
              "node 'oh' (OneHot): needs a constant of shape [1, 1099511627776] (1099511627776 values), above the limit of 16777216")
    m = model([helper.make_node("OneHot", ["i", "d", "v"], ["y"], name="oh")], [vi("i", [3], TensorProto.INT64)], [vi("y", None)],
              [init(np.array(4, np.int64), "d"), init(np.array([0, 1], np.float32), "v")])
    np.save(path("oh_y.npy"), np.eye(4, dtype=np.float32)[[0, 3, 1]])
    expect_rc("fuzz/onehot-runs", ["run", save(m, "onehot_ok.onnx"), "--input", "i=3xi64=0,-1,1", "--expect", f"y=@{path('oh_y.npy')}"], 0)
    # In range, the folds stay exact at the edges (NumPy: -(-2^63 + 1), 2^62 + (2^62 - 1)).
    m = model([helper.make_node("Neg", ["a"], ["n"]), helper.make_node("Add", ["n", "b"], ["y"])], [vi("x", [1])],
              [vi("y", None, TensorProto.INT64)], [init(np.array([-2**63 + 1], np.int64), "a"), init(np.array([-1], np.int64), "b")])
    np.save(path("edge_y.npy"), np.array([2**63 - 2], np.int64))
    expect_rc("fuzz/folded-int64-edge-exact", ["run", save(m, "edge.onnx"), "--input", "x=random", "--expect", f"y=@{path('edge_y.npy')}"], 0)


def test_silent_misreads():
    # Gather with float indices (a graph input and an initializer): refused, not truncated.
    m = model([helper.make_node("Gather", ["x", "i"], ["y"], name="g")], [vi("x", [4]), vi("i", [2])], [vi("y", None)])
    expect_rc("misread/gather-float-indices-input", ["run", save(m, "gf.onnx"), "--input", "x=4xf32=1,2,3,4",
                                                     "--input", "i=2xf32=1.7,2.2"], 2, "node 'g' (Gather)", "indices must be i32 or i64, got f32")
    m = model([helper.make_node("Gather", ["x", "i"], ["y"], name="g")], [vi("x", [4])], [vi("y", None)],
              [init(np.array([1.7, 2.2], np.float32), "i")])
    expect_rc("misread/gather-float-indices-initializer", ["run", save(m, "gfi.onnx"), "--input", "x=4xf32=1,2,3,4"], 2,
              "node 'g' (Gather)", "indices must be i32 or i64, got f32")
    # Unsqueeze beyond rank 16 (accepted before): refused naming the node and its axes.
    for opset, kw, ins, inits in ((13, {}, ["x", "a"], [init(np.arange(16, dtype=np.int64), "a")]),
                                  (11, {"axes": list(range(16))}, ["x"], [])):
        m = model([helper.make_node("Unsqueeze", ins, ["y"], name="u", **kw)], [vi("x", [2])], [vi("y", None)], inits, opset=opset)
        expect_rc(f"misread/unsqueeze-rank-17/opset{opset}", ["run", save(m, f"unsq{opset}.onnx"), "--input", "x=random"], 2,
                  "node 'u' (Unsqueeze): axes has 16 entries for a rank-1 input: the result's rank 17 is above the limit of 16")
    # Rank 16 exactly stays fine (the boundary): y is x with 15 leading ones.
    m = model([helper.make_node("Unsqueeze", ["x", "a"], ["y"], name="u")], [vi("x", [2])], [vi("y", None)],
              [init(np.arange(15, dtype=np.int64), "a")])
    np.save(path("unsq_y.npy"), np.array([3, 4], np.float32).reshape([1] * 15 + [2]))
    expect_rc("misread/unsqueeze-rank-16-runs", ["run", save(m, "unsq16.onnx"), "--input", "x=2xf32=3,4",
                                                 "--expect", f"y=@{path('unsq_y.npy')}"], 0)
    # Range with a NaN limit (an empty result before), NaN start/delta, as initializers and as inputs.
    for which, vals in (("limit", (0, np.nan, 1)), ("start", (np.nan, 4, 1)), ("delta", (0, 4, np.nan)), ("limit-inf", (0, np.inf, 1))):
        m = model([helper.make_node("Range", ["s", "l", "d"], ["y"], name="rg")], [vi("x", [1])], [vi("y", None)],
                  [init(np.float32(v), n) for v, n in zip(vals, "sld")])
        w = which.split("-")[0]
        expect_rc(f"misread/range-nan-{which}", ["run", save(m, f"range_{which}.onnx"), "--input", "x=random"], 2,
                  f"node 'rg' (Range): {w} (input {'sld'.index(w[0])}", "must be finite, got " + ("inf" if "inf" in which else "NaN"))
    m = model([helper.make_node("Range", ["s", "l", "d"], ["y"], name="rg")], [vi("s", []), vi("l", []), vi("d", [])], [vi("y", None)])
    expect_rc("misread/range-nan-limit-as-input", ["run", save(m, "range_in.onnx"), "--input", "s=f32=0", "--input", "l=f32=nan",
                                                   "--input", "d=f32=1"], 2, "node 'rg' (Range): limit (input 1 'l') must be finite, got NaN")
    # An ordinary float Range still runs (the NumPy reference).
    np.save(path("range_y.npy"), np.arange(0.5, 3.0, 0.75, dtype=np.float32))
    expect_rc("misread/range-finite-runs", ["run", path("range_in.onnx"), "--input", "s=f32=0.5", "--input", "l=f32=3",
                                            "--input", "d=f32=0.75", "--expect", f"y=@{path('range_y.npy')}"], 0)
    # An i64 value of 2^32 + 5 given to an i32 input (ran as 5 once): inline, .npy, safetensors.
    m = model([helper.make_node("Neg", ["x"], ["y"], name="n")], [vi("x", [1], TensorProto.INT32)], [vi("y", None, TensorProto.INT32)])
    p = save(m, "i32.onnx")
    np.save(path("big64.npy"), np.array([2**32 + 5], np.int64))
    for how, spec in (("inline", "x=1xi64=4294967301"), ("npy", f"x=@{path('big64.npy')}")):
        expect_rc(f"misread/i64-into-i32-input/{how}", ["run", p, "--input", spec], 2,
                  "--input x: value 4294967301 at element 0 of the i64 tensor does not fit the declared i32")
    np.save(path("ok64.npy"), np.array([-7], np.int64))
    np.save(path("ok_y.npy"), np.array([7], np.int32))
    expect_rc("misread/i64-into-i32-input/fits", ["run", p, "--input", f"x=@{path('ok64.npy')}", "--expect", f"y=@{path('ok_y.npy')}"], 0)
    # An attribute that became an input at the model's opset (ReduceSum's axes at 13, Squeeze's at 13,
    # Clip's min at 11): it was ignored, so ReduceSum reduced every axis. Refused naming both opsets;
    # the same attribute below that opset still runs (the sums of rows, computed here).
    for op, kw, opset, since in (("ReduceSum", {"axes": [1], "keepdims": 0}, 13, 13), ("Squeeze", {"axes": [0]}, 13, 13),
                                 ("Clip", {"min": 0.0}, 11, 11), ("ReduceMean", {"axes": [1]}, 18, 18)):
        m = model([helper.make_node(op, ["x"], ["y"], name="n", **kw)], [vi("x", [1, 3])], [vi("y", None)], opset=opset)
        expect_rc(f"misread/attribute-moved-to-input/{op}", ["run", save(m, f"moved_{op}.onnx"), "--input", "x=random"], 2,
                  f"node 'n' ({op}): attribute '{list(kw)[0]}' is not part of {op} at opset {opset} (from opset {since} it is an input)")
    m = model([helper.make_node("ReduceSum", ["x"], ["y"], name="n", axes=[1], keepdims=0)], [vi("x", [2, 3])], [vi("y", None)], opset=12)
    np.save(path("rs12_y.npy"), np.array([6, 15], np.float32))
    expect_rc("misread/attribute-moved-to-input/ReduceSum-opset12-runs", ["run", save(m, "rs12.onnx"), "--input", "x=2x3xf32=1,2,3,4,5,6",
                                                                          "--expect", f"y=@{path('rs12_y.npy')}"], 0)


def test_absurd_sizes():
    big = [
        ("expand-2^42", model([helper.make_node("Expand", ["x", "s"], ["y"], name="e")], [vi("x", [1])], [vi("y", None)],
                              [init(np.array([2**21, 2**21], np.int64), "s")]), [], "node 'e' (Expand): result of shape [2097152, 2097152] has 4398046511104 elements, above the limit"),
        ("pad-2^40", model([helper.make_node("Pad", ["x", "p"], ["y"], name="pd")], [vi("x", [2])], [vi("y", None)],
                           [init(np.array([0, 2**40], np.int64), "p")]), [], "node 'pd' (Pad)"),
        ("dim-n-2^20", model([helper.make_node("Add", ["x", "x"], ["y"], name="a")], [vi("x", ["n", "n"])], [vi("y", None)]),
         ["--dim", "n=1048576"], "input 'x' of shape [1048576, 1048576] has 1099511627776 elements, above the limit of 68719476736"),
    ]
    for name, m, extra, phrase in big:
        p = save(m, f"{name}.onnx")
        run_extra = ["--input", "x=random"] if name != "dim-n-2^20" else ["--input", "x=random"]
        expect_rc(f"size/{name}/run", ["run", p] + run_extra + extra, 2, phrase)
        expect_rc(f"size/{name}/inspect", ["inspect", p] + extra, 2, phrase)
        out = path(f"{name}.json")
        expect_rc(f"size/{name}/convert", ["convert", p, "-o", out] + extra, 2, phrase)
        check(f"size/{name}/convert-wrote-nothing", not os.path.exists(out))
    # The limit itself is not a refusal of ordinary sizes: Expand to [4, 3] runs.
    m = model([helper.make_node("Expand", ["x", "s"], ["y"], name="e")], [vi("x", [3])], [vi("y", None)],
              [init(np.array([4, 3], np.int64), "s")])
    np.save(path("exp_y.npy"), np.broadcast_to(np.array([1, 2, 3], np.float32), (4, 3)))
    expect_rc("size/expand-small-runs", ["run", save(m, "exp_ok.onnx"), "--input", "x=3xf32=1,2,3", "--expect", f"y=@{path('exp_y.npy')}"], 0)


def test_dim_names():
    m = model([helper.make_node("Add", ["x", "x"], ["y"], name="a")], [vi("x", ["batch", "seq"])], [vi("y", None)])
    p = save(m, "dims.onnx")
    for cmd in (["run", p, "--input", "x=random"], ["inspect", p], ["convert", p, "-o", path("dims.json")]):
        expect_rc(f"dims/unknown-name/{cmd[0]}", cmd + ["--dim", "batch=2", "--dim", "sequ=3"], 2,
                  "--dim sequ=3:", "has no symbolic dimension 'sequ' (its dimensions: batch, seq)")
    expect_rc("dims/known-names-run", ["run", p, "--input", "x=random", "--dim", "batch=2", "--dim", "seq=3"], 0)
    m = model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [2])], [vi("y", None)])
    expect_rc("dims/model-without-symbols", ["run", save(m, "nodims.onnx"), "--input", "x=random", "--dim", "n=3"], 2,
              "has no symbolic dimension 'n' (it has none)")


def test_convert_files():
    m = model([helper.make_node("Add", ["x", "w"], ["y"], name="a")], [vi("x", [2])], [vi("y", None)],
              [init(np.ones(2, np.float32), "w")])
    p = save(m, "w.onnx")
    expect_rc("convert/params-out-npy-refused", ["convert", p, "-o", path("w.json"), "--params-out", path("w.npy")], 2,
              "--params-out", "give a file name ending in .safetensors")
    check("convert/params-out-npy-wrote-nothing", not os.path.exists(path("w.npy")) and not os.path.exists(path("w.json")))
    # The graph cannot be written (its directory is missing): refused before anything is written.
    expect_rc("convert/failed-graph-write", ["convert", p, "-o", path("missing/w.json"), "--params-out", path("w.safetensors")], 2,
              "cannot write " + path("missing/w.json") + ": directory " + path("missing") + " does not exist")
    check("convert/failed-graph-write-left-nothing", not os.path.exists(path("w.safetensors")),
          "  the weights were left behind although the graph was not written")
    # The graph's target is a directory: refused at write time, after the weights; they are removed.
    os.makedirs(path("adir.json"), exist_ok=True)
    expect_rc("convert/graph-onto-a-directory", ["convert", p, "-o", path("adir.json"), "--params-out", path("w2.safetensors")], 2)
    check("convert/graph-onto-a-directory-left-nothing", not os.path.exists(path("w2.safetensors")),
          "  the weights were left behind although the graph was not written")
    expect_rc("convert/ok", ["convert", p, "-o", path("w.json"), "--params-out", path("w.safetensors")], 0)
    check("convert/ok-wrote-both", os.path.exists(path("w.json")) and os.path.exists(path("w.safetensors")))


if __name__ == "__main__":
    sys.exit(clitest.main("hostile ONNX tests", globals()))
