#!/usr/bin/python3
"""ONNX sequences and optionals through `rlx run` (docs/onnx.md, "Sequences and optionals"),
beyond ONNX's node tests (which have no SplitToSequence, ConcatFromSequence or SequenceErase
case), against NumPy:
  * SplitToSequence with split lengths and without (keepdims 0), SequenceErase and SequenceAt
    with negative positions, SequenceLength, ConcatFromSequence with and without new_axis,
    SequenceMap over a split: sequence outputs written as NAME.0, NAME.1, ...;
  * a sequence graph input of tensors of different shapes (--input xs.0=... --input xs.1=...),
    its length folded, its tensors concatenated;
  * a Loop carrying a sequence (unrolled at specialisation) with a trip count given by value;
  * repeat_interleave as torch.onnx writes it for a dynamic size: known repeats split into a
    sequence that a loop reads as shape arithmetic (the shape of each Expand stays known);
  * bad use: a missing sequence input, a gap in its numbering, a sequence given as one tensor,
    an out-of-range position, concatenating an empty sequence, a batch job over such a model:
    each exit 2 with a message naming the problem.
Every good case runs in eager, lazy and compiled mode on the chosen backend.

  tests/onnx/sequences.py --rlx build/apps/rlx/rlx [--out DIR] [--backend cpu|vulkan] [--modes ...]
"""
import argparse
import os
import subprocess
import sys

import numpy as np
from onnx import TensorProto, helper

import onnx_build  # noqa: E402
from onnx_build import case_args, init, vi  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def seq_vi(name, et=F, shape=None):
    return helper.make_tensor_sequence_value_info(name, et, shape)


def model(nodes, inputs, outputs, inits=()):
    return onnx_build.model(nodes, inputs, outputs, inits, opset=17)


def cases():
    rng = np.random.default_rng(7)
    out = []
    x = rng.standard_normal((6, 4)).astype(np.float32)
    body = helper.make_graph([helper.make_node("Mul", ["e", "two"], ["d"])], "double",
                             [vi("e", None)], [vi("d", None)], [init("two", np.float32(2))])
    m = model([
        helper.make_node("SplitToSequence", ["x", "lens"], ["parts"], axis=0),
        helper.make_node("SequenceErase", ["parts", "minus2"], ["kept"]),
        helper.make_node("SequenceAt", ["parts", "minus1"], ["last"]),
        helper.make_node("SequenceLength", ["kept"], ["n"]),
        helper.make_node("ConcatFromSequence", ["kept"], ["joined"], axis=0),
        helper.make_node("SplitToSequence", ["x"], ["cols"], axis=1, keepdims=0),
        helper.make_node("ConcatFromSequence", ["cols"], ["stacked"], axis=1, new_axis=1),
        helper.make_node("SequenceMap", ["cols"], ["doubled"], body=body),
    ], [vi("x", [6, 4])], [vi("last", None), vi("n", None, I64), vi("joined", None), vi("stacked", None), seq_vi("doubled")],
        [init("lens", np.array([1, 2, 3], np.int64)), init("minus2", np.int64(-2)), init("minus1", np.int64(-1))])
    exps = {"last": x[3:], "n": np.int64(2), "joined": np.concatenate([x[:1], x[3:]]), "stacked": x}
    for j in range(4):
        exps[f"doubled.{j}"] = 2 * x[:, j]
    out.append(("split_erase_concat_map", m, {"x": x}, exps))

    xs = [rng.standard_normal((2, k)).astype(np.float32) for k in (3, 1, 5)]
    m = model([
        helper.make_node("SequenceLength", ["xs"], ["n"]),
        helper.make_node("ConcatFromSequence", ["xs"], ["cat"], axis=1),
        helper.make_node("SequenceInsert", ["xs", "cat", "zero"], ["more"]),
    ], [seq_vi("xs", F, [2, "k"])], [vi("n", None, I64), vi("cat", None), seq_vi("more")], [init("zero", np.int64(0))])
    ins = {f"xs.{j}": a for j, a in enumerate(xs)}
    cat = np.concatenate(xs, axis=1)
    exps = {"n": np.int64(3), "cat": cat, "more.0": cat}
    exps.update({f"more.{j + 1}": a for j, a in enumerate(xs)})
    out.append(("sequence_input", m, ins, exps))

    # A loop that appends x[:i+1] to a sequence, M given by value: unrolled when specialised.
    lb = helper.make_graph([
        helper.make_node("Identity", ["c"], ["c_out"]),
        helper.make_node("Add", ["i", "one"], ["end"]),
        helper.make_node("Unsqueeze", ["end", "ax0"], ["end1"]),
        helper.make_node("Slice", ["v", "start", "end1"], ["piece"]),
        helper.make_node("SequenceInsert", ["s", "piece"], ["s_out"]),
    ], "body", [vi("i", [], I64), vi("c", [], TensorProto.BOOL), seq_vi("s")], [vi("c_out", [], TensorProto.BOOL), seq_vi("s_out")],
        [init("one", np.int64(1)), init("ax0", np.array([0], np.int64)), init("start", np.array([0], np.int64))])
    v = np.arange(5, dtype=np.float32)
    m = model([
        helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
        helper.make_node("Loop", ["M", "", "empty"], ["grown"], body=lb),
    ], [vi("M", [], I64)], [seq_vi("grown")], [init("v", v)])
    out.append(("loop_grows_sequence", m, {"M": np.int64(4)}, {f"grown.{j}": v[:j + 1] for j in range(4)}))

    # repeat_interleave as torch.onnx exports it where a size is dynamic: the repeats (known
    # values) split into a sequence, a loop reading repeat i as shape arithmetic (Concat, Equal,
    # Where) to Expand row i, the rows concatenated. The shape stays known through the sequence.
    reps = np.array([1, 3, 2, 2], np.int64)
    rb = helper.make_graph([
        helper.make_node("Identity", ["c"], ["c_out"]),
        helper.make_node("SequenceAt", ["rep_seq", "i"], ["r"]),
        helper.make_node("SequenceAt", ["row_seq", "i"], ["row"]),
        helper.make_node("Concat", ["r", "minus1"], ["want"], axis=0),
        helper.make_node("Equal", ["want", "minus1s"], ["is_m1"]),
        helper.make_node("Where", ["is_m1", "ones", "want"], ["shape"]),
        helper.make_node("Expand", ["row", "shape"], ["rows"]),
        helper.make_node("SequenceInsert", ["s", "rows"], ["s_out"]),
    ], "stretch", [vi("i", [], I64), vi("c", [], TensorProto.BOOL), seq_vi("s")], [vi("c_out", [], TensorProto.BOOL), seq_vi("s_out")],
        [init("minus1", np.array([-1], np.int64)), init("minus1s", np.array([-1, -1], np.int64)), init("ones", np.array([1, 1], np.int64))])
    xr = rng.standard_normal((4, 5)).astype(np.float32)
    m = model([
        helper.make_node("SplitToSequence", ["reps", "one"], ["rep_seq"], axis=0),
        helper.make_node("SplitToSequence", ["x", "one"], ["row_seq"], axis=0),
        helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
        helper.make_node("Loop", ["M", "", "empty"], ["stretched"], body=rb),
        helper.make_node("ConcatFromSequence", ["stretched"], ["y"], axis=0),
    ], [vi("x", [4, 5])], [vi("y", None)], [init("reps", reps), init("one", np.int64(1)), init("M", np.int64(4))])
    out.append(("repeat_interleave_loop", m, {"x": xr}, {"y": np.repeat(xr, reps, axis=0)}))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--out", default="/tmp/rlx-sequences")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--modes", default="eager,lazy,compiled")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    fails, runs = [], 0

    def run(args):
        return subprocess.run([a.rlx] + args, capture_output=True, text=True, timeout=300)

    paths = {}
    for name, m, ins, exps in cases():
        path = paths[name] = os.path.join(a.out, name + ".onnx")
        open(path, "wb").write(m.SerializeToString())
        args = case_args(a.out, name, ins, exps)
        for mode in a.modes.split(","):
            r = run(["run", path, "-b", a.backend, "-m", mode, "--atol", "1e-6", "--rtol", "1e-6"] + args)
            runs += 1
            if r.returncode != 0:
                fails.append(f"{name} {a.backend}/{mode}: exit {r.returncode}: {r.stderr.strip()[-500:]}")
            # every element of a sequence output is written, and no more
            written = [l.split(":")[0] for l in r.stdout.splitlines() if ": shape " in l]
            if r.returncode == 0 and sorted(written) != sorted(exps):
                fails.append(f"{name} {a.backend}/{mode}: outputs {sorted(written)}, expected {sorted(exps)}")

    # Bad use: exit 2 and a message that names the problem.
    x0 = os.path.join(a.out, "sequence_input.in.xs.0.npy")
    seq_model = paths["sequence_input"]
    bad = [
        ("missing sequence", ["run", seq_model], "no value given for input xs.0"),
        ("gap", ["run", seq_model, "-i", f"xs.0=@{x0}", "-i", f"xs.2=@{x0}"], "--input xs.1 is missing"),
        ("one tensor", ["run", seq_model, "-i", f"xs=@{x0}"], "'xs' is a sequence"),
        ("twice", ["run", seq_model, "-i", f"xs.0=@{x0}", "-i", f"xs.0=@{x0}"], "given twice"),
        ("empty and elements", ["run", seq_model, "-i", "xs=[]", "-i", f"xs.0=@{x0}"], "are both given"),
        ("empty concat", ["run", seq_model, "-i", "xs=[]"], "ConcatFromSequence of an empty sequence"),
    ]
    pos = model([helper.make_node("SequenceAt", ["xs", "p"], ["y"])], [seq_vi("xs", F, [2, "k"]), vi("p", [], I64)], [vi("y", None)])
    pos_path = os.path.join(a.out, "position.onnx")
    open(pos_path, "wb").write(pos.SerializeToString())
    bad.append(("position out of range", ["run", pos_path, "-i", f"xs.0=@{x0}", "-i", "p=i64=3"], "position 3 is out of range"))
    lst = os.path.join(a.out, "batch.jsonl")
    open(lst, "w").write('{"id": "a", "inputs": {"xs.0": "%s"}}\n' % x0)
    bad.append(("batch job", ["run", seq_model, "--batch", lst, "--out-dir", os.path.join(a.out, "batch")], "batch jobs take tensor inputs"))
    for what, args, want in bad:
        r = run(args)
        runs += 1
        if r.returncode != 2 or want not in r.stderr:
            fails.append(f"bad use '{what}': exit {r.returncode}, wanted 2 and '{want}' in: {r.stderr.strip()[-400:]}")

    return onnx_build.finish(f"sequences ({a.backend})", runs, fails)


if __name__ == "__main__":
    sys.exit(main())
