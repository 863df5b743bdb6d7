#!/usr/bin/python3
"""ONNX control flow (If, Loop, Scan) through `rlx run`, against independent references.

Hand-written models (onnx.helper) whose conditions and trip counts are known only at run
time, checked against the same computation written in NumPy:
  * if_runtime: If on ReduceSum(x) > 0 whose then-branch holds a nested run-time If (on
    ReduceMax(x) > 1); the branches read outer values (x, an initializer) and the nested one
    reads a value of its enclosing branch. Three inputs take all three paths.
  * loop_cond: a Loop that stops when the body's condition turns false (carried values only),
    its trip count M given by value; and the same with M computed at run time from a
    100-element input (not bindable by value).
  * loop_scan: a Loop with M given by value, a carried sum and a scan output per iteration.
  * scan: Scan (opset 11) with two scan inputs (axis 1, one reversed), a carried state and two
    scan outputs (one along axis 1, one reversed).
  * loop_with_if: a Loop whose body holds a run-time If that reads the outer graph's input
    (captured through two levels) and the iteration number.
Each model is also converted (`rlx convert`) to an rlx JSON graph, control nodes with their
bodies nested, and that graph is run the same way. And a PyTorch model with a scripted loop and a data-dependent `if` (torch.jit.script, exported
by torch.onnx to Loop and If), checked against PyTorch's own forward pass. Every case runs in
eager, lazy and compiled mode on the chosen backend. Also: the refusals (exit 2, naming the
node) for a run-time If whose branches give different shapes and a loop with scan outputs that
stops early.

  tests/onnx/control_flow.py --rlx build/apps/rlx/rlx [--out DIR] [--backend cpu|vulkan] [--modes eager,lazy,compiled]
"""
import argparse
import os
import subprocess
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from onnx_build import case_args, model, vi  # noqa: E402

ATOL, RTOL = 1e-5, 1e-5
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name + "_v"))


def if_runtime():
    w = np.linspace(-1, 2, 9).astype(np.float32)  # x is [8, 9]: above the 64 elements an input may be bound by value
    inner_then = helper.make_graph([helper.make_node("Mul", ["t", "two"], ["it"])], "inner_then", [], [vi("it", [8, 9])])
    inner_else = helper.make_graph([helper.make_node("Neg", ["t"], ["ie"])], "inner_else", [], [vi("ie", [8, 9])])
    then_g = helper.make_graph([
        helper.make_node("Mul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["xw", "one"], ["t"]),
        helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=0),
        helper.make_node("Greater", ["mx", "one"], ["c2"]),
        helper.make_node("If", ["c2"], ["ty"], then_branch=inner_then, else_branch=inner_else),
    ], "then", [], [vi("ty", [8, 9])])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "w"], ["ey"])], "else", [], [vi("ey", [8, 9])])
    nodes = [
        const("one", np.float32(1)), const("two", np.float32(2)),
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="the_if"),
    ]
    m = model(nodes, [vi("x", [8, 9])], [vi("y", [8, 9])],
              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.float32(0), "zero")])

    def ref(x):
        if x.sum() > 0:
            t = x * w + 1
            return t * 2 if x.max() > 1 else -t
        return x - w
    rs = np.random.RandomState(1)
    cases = []
    for x in (np.abs(rs.randn(8, 9)) + 0.5, np.abs(rs.randn(8, 9)) * 0.01, -np.abs(rs.randn(8, 9))):
        x = x.astype(np.float32)
        cases.append(({"x": x}, {"y": ref(x)}))
    return m, cases


def loop_body_cond():
    # body(i, cond, acc, n) -> (acc * 0.5 + x < limit, acc * 0.5 + x, n + 1)
    return helper.make_graph([
        helper.make_node("Mul", ["acc", "half"], ["a1"]),
        helper.make_node("Add", ["a1", "x"], ["acc_out"]),
        helper.make_node("ReduceSum", ["acc_out"], ["s"], keepdims=0),
        helper.make_node("Less", ["s", "limit"], ["cond_out"]),
        helper.make_node("Add", ["n", "one64"], ["n_out"]),
    ], "body", [vi("i", [], I64), vi("cond", [], B), vi("acc", [4]), vi("n", [], I64)],
        [vi("cond_out", [], B), vi("acc_out", [4]), vi("n_out", [], I64)])


def loop_ref(x, M, limit):
    acc, n = np.zeros(4, np.float32), 0
    for _ in range(M):
        acc = (acc * np.float32(0.5) + x).astype(np.float32)
        n += 1
        if not acc.sum() < limit:
            break
    return acc, np.int64(n)


def loop_cond():
    limit = np.float32(10)
    inits = [numpy_helper.from_array(np.zeros(4, np.float32), "acc0"), numpy_helper.from_array(np.int64(0), "n0"),
             numpy_helper.from_array(np.float32(0.5), "half"), numpy_helper.from_array(limit, "limit"),
             numpy_helper.from_array(np.int64(1), "one64"), numpy_helper.from_array(np.array(True), "true")]
    m = model([helper.make_node("Loop", ["M", "true", "acc0", "n0"], ["acc", "n"], body=loop_body_cond(), name="the_loop")],
              [vi("x", [4]), vi("M", [], I64)], [vi("acc", [4]), vi("n", [], I64)], inits)
    cases = []
    for x, M in ((np.array([2, 2, 1, 1], np.float32), 20), (np.array([1, 2, 0.5, 0.25], np.float32), 20), (np.array([0.1, 0.2, 0.1, 0.1], np.float32), 20),
                 (np.array([1, 1, 1, 1], np.float32), 2)):
        acc, n = loop_ref(x, M, limit)
        assert (n < M) == (x.sum() > 5), "the cases cover a loop that stops on its condition and ones that run M times"
        cases.append(({"x": x, "M": np.int64(M)}, {"acc": acc, "n": n}))
    # M computed at run time from a 100-element input: M = sum(mask)
    m2 = model([helper.make_node("ReduceSum", ["mask"], ["ms"], keepdims=0), helper.make_node("Cast", ["ms"], ["M"], to=I64),
                helper.make_node("Loop", ["M", "true", "acc0", "n0"], ["acc", "n"], body=loop_body_cond(), name="the_loop")],
               [vi("x", [4]), vi("mask", [100])], [vi("acc", [4]), vi("n", [], I64)], inits)
    cases2 = []
    for x, k in ((np.array([0.1, 0.2, 0.1, 0.1], np.float32), 3), (np.array([0.1, 0.2, 0.1, 0.1], np.float32), 40),
                 (np.array([3, 1, 1, 1], np.float32), 40)):
        mask = np.zeros(100, np.float32)
        mask[:k] = 1
        acc, n = loop_ref(x, k, limit)
        cases2.append(({"x": x, "mask": mask}, {"acc": acc, "n": n}))
    return (m, cases), (m2, cases2)


def loop_scan():
    body = helper.make_graph([
        helper.make_node("Identity", ["cond"], ["cond_out"]),
        helper.make_node("Cast", ["i"], ["fi"], to=F),
        helper.make_node("Mul", ["x", "fi"], ["y"]),
        helper.make_node("Add", ["sum", "y"], ["sum_out"]),
    ], "body", [vi("i", [], I64), vi("cond", [], B), vi("sum", [2, 2])],
        [vi("cond_out", [], B), vi("sum_out", [2, 2]), vi("y", [2, 2])])
    m = model([helper.make_node("Loop", ["M", "", "s0"], ["sum", "ys"], body=body, name="the_loop")],
              [vi("x", [2, 2]), vi("M", [], I64)], [vi("sum", [2, 2]), vi("ys", [5, 2, 2])],
              [numpy_helper.from_array(np.zeros((2, 2), np.float32), "s0")])
    x = np.random.RandomState(3).randn(2, 2).astype(np.float32)
    ys = np.stack([x * np.float32(i) for i in range(5)]).astype(np.float32)
    return m, [({"x": x, "M": np.int64(5)}, {"sum": ys.sum(0), "ys": ys})]


def scan():
    body = helper.make_graph([
        helper.make_node("Add", ["st", "a"], ["st1"]),
        helper.make_node("Mul", ["st1", "b"], ["st_out"]),
        helper.make_node("Sub", ["a", "b"], ["d"]),
        helper.make_node("Identity", ["st_out"], ["o1"]),
    ], "body", [vi("st", [3]), vi("a", [3]), vi("b", [3])], [vi("st_out", [3]), vi("o1", [3]), vi("d", [3])])
    node = helper.make_node("Scan", ["st0", "A", "Bm"], ["st", "O1", "D"], body=body, num_scan_inputs=2,
                            scan_input_axes=[1, 1], scan_input_directions=[0, 1], scan_output_axes=[1, 0],
                            scan_output_directions=[0, 1], name="the_scan")
    m = model([node], [vi("st0", [3]), vi("A", [3, 4]), vi("Bm", [3, 4])], [vi("st", [3]), vi("O1", [3, 4]), vi("D", [4, 3])], opset=11)
    rs = np.random.RandomState(4)
    st0, A, Bm = (rs.rand(3) + 0.5).astype(np.float32), rs.randn(3, 4).astype(np.float32), (rs.rand(3, 4) + 0.5).astype(np.float32)
    st, o1, d = st0.copy(), [], []
    for t in range(4):
        a, b = A[:, t], Bm[:, 3 - t]
        st = ((st + a) * b).astype(np.float32)
        o1.append(st)
        d.append(a - b)
    O1 = np.stack(o1, axis=1)
    D = np.stack(d[::-1], axis=0)
    return m, [({"st0": st0, "A": A, "Bm": Bm}, {"st": st, "O1": O1, "D": D})]


def nested():
    """A Loop whose body holds a run-time If (on the carried value's sum) reading the outer x
    (a capture two levels down) and the iteration number: acc = acc + x if sum(acc) < 5 else acc * 0.5 - i."""
    then_g = helper.make_graph([helper.make_node("Add", ["acc", "x"], ["t"])], "then", [], [vi("t", [70])])
    else_g = helper.make_graph([helper.make_node("Mul", ["acc", "half"], ["h"]), helper.make_node("Cast", ["i"], ["fi"], to=F),
                                helper.make_node("Sub", ["h", "fi"], ["e"])], "else", [], [vi("e", [70])])
    body = helper.make_graph([
        helper.make_node("ReduceSum", ["acc"], ["s"], keepdims=0),
        helper.make_node("Less", ["s", "five"], ["c"]),
        helper.make_node("If", ["c"], ["acc_out"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Identity", ["cond"], ["cond_out"]),
        helper.make_node("ReduceMax", ["acc_out"], ["mx"], keepdims=0),
    ], "body", [vi("i", [], I64), vi("cond", [], B), vi("acc", [70])], [vi("cond_out", [], B), vi("acc_out", [70]), vi("mx", [])])
    m = model([helper.make_node("Loop", ["M", "", "acc0"], ["acc", "mxs"], body=body)], [vi("x", [70]), vi("acc0", [70])],
              [vi("acc", [70]), vi("mxs", [6])],
              [numpy_helper.from_array(np.int64(6), "M"), numpy_helper.from_array(np.float32(5), "five"),
               numpy_helper.from_array(np.float32(0.5), "half")])
    rs = np.random.RandomState(6)
    x, acc0 = (rs.rand(70) * 0.05).astype(np.float32), (rs.rand(70) * 0.02).astype(np.float32)
    acc, mxs = acc0.copy(), []
    for i in range(6):
        acc = (acc + x if acc.sum() < 5 else acc * np.float32(0.5) - np.float32(i)).astype(np.float32)
        mxs.append(acc.max())
    return m, [({"x": x, "acc0": acc0}, {"acc": acc, "mxs": np.array(mxs, np.float32)})]


def torch_model(out):
    import torch

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x, n: int):
            h = x
            for i in range(n):
                h = torch.tanh(self.lin(h)) + h * 0.5
            if h.sum() > 0:
                y = h * 2.0
            else:
                y = -h
            return y

    torch.manual_seed(0)
    m = torch.jit.script(M().eval())
    p = os.path.join(out, "torch_loop_if.onnx")
    torch.onnx.export(m, (torch.randn(2, 4), 3), p, input_names=["x", "n"], output_names=["y"], opset_version=16)
    cases = []
    rs = np.random.RandomState(5)
    for n, sign in ((3, 1), (1, -1), (4, 1)):
        x = (rs.randn(2, 4) * 0.1 + sign * 2).astype(np.float32)
        with torch.no_grad():
            y = m(torch.from_numpy(x), n).numpy()
        cases.append(({"x": x, "n": np.int64(n)}, {"y": y}))
    return p, cases


def run_cases(rlx, name, path, cases, out, backend, modes, fails, atol=ATOL, json_too=True):
    for k, (ins, exps) in enumerate(cases):
        args = case_args(out, f"{name}.{k}", ins, exps)
        graphs = [path]
        if json_too:
            # the same model written as an rlx graph (bodies nested in their nodes), then run
            jp, wp = os.path.join(out, f"{name}.{k}.json"), os.path.join(out, f"{name}.{k}.safetensors")
            conv = [rlx, "convert", path, "-o", jp, "--params-out", wp] + [x for n in ins for x in ("-i", f"{n}=@{os.path.join(out, f'{name}.{k}.in.{n}.npy')}")]
            r = subprocess.run(conv, capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                fails.append(f"{name} case {k}: rlx convert: exit {r.returncode}: {r.stderr.strip()[-600:]}")
            else:
                graphs.append(jp)
        for g in graphs:
            extra = ["-p", g[:-5] + ".safetensors"] if g.endswith(".json") and os.path.exists(g[:-5] + ".safetensors") else []
            for mode in modes:
                r = subprocess.run([rlx, "run", g, "-b", backend, "-m", mode, "--atol", str(atol), "--rtol", str(RTOL)] + extra + args,
                                   capture_output=True, text=True, timeout=300)
                if r.returncode != 0:
                    fails.append(f"{name} case {k} {os.path.basename(g)} {backend}/{mode}: exit {r.returncode}: {r.stderr.strip()[-600:]}")
    return len(cases) * len(modes) * (2 if json_too else 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--out", default=None)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--modes", default="eager,lazy,compiled")
    a = ap.parse_args()
    rlx = os.path.abspath(a.rlx)
    out = a.out or os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(rlx))), "onnx-control-flow")
    os.makedirs(out, exist_ok=True)
    modes = a.modes.split(",")
    fails, runs = [], 0
    (lc, lc_cases), (lc2, lc2_cases) = loop_cond()
    for name, (m, cases) in {"if_runtime": if_runtime(), "loop_cond": (lc, lc_cases), "loop_cond_runtime_M": (lc2, lc2_cases),
                             "loop_scan": loop_scan(), "scan": scan(), "loop_with_if": nested()}.items():
        p = os.path.join(out, name + ".onnx")
        with open(p, "wb") as f:
            f.write(m.SerializeToString())
        runs += run_cases(rlx, name, p, cases, out, a.backend, modes, fails)
    # the If above runs as a host step (its condition is known only at run time), not folded
    r = subprocess.run([rlx, "run", os.path.join(out, "if_runtime.onnx"), "-b", a.backend, "-m", "compiled", "--dump-plan",
                        "--input", f"x=@{os.path.join(out, 'if_runtime.0.in.x.npy')}"], capture_output=True, text=True, timeout=300)
    if r.returncode != 0 or "host step: if" not in r.stdout + r.stderr:
        fails.append(f"if_runtime: the plan shows no host step for the If:\n{(r.stdout + r.stderr)[-1500:]}")
    p, cases = torch_model(out)
    runs += run_cases(rlx, "torch_loop_if", p, cases, out, a.backend, modes, fails, atol=1e-4)

    # refusals: exit 2, naming the node
    def refused(name, m, ins, phrase):
        p = os.path.join(out, name + ".onnx")
        with open(p, "wb") as f:
            f.write(m.SerializeToString())
        args = case_args(out, name, ins, {})
        r = subprocess.run([rlx, "run", p, "-b", a.backend] + args, capture_output=True, text=True, timeout=300)
        if r.returncode != 2 or phrase not in r.stderr:
            fails.append(f"{name}: exit {r.returncode} (want 2 with {phrase!r}): {r.stderr.strip()[-600:]}")
    tg = helper.make_graph([helper.make_node("Identity", ["x"], ["a"])], "t", [], [vi("a", None)])
    eg = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["b"], axis=0)], "e", [], [vi("b", None)])
    refused("if_shapes_differ", model([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                                       helper.make_node("Greater", ["s", "zero"], ["c"]),
                                       helper.make_node("If", ["c"], ["y"], then_branch=tg, else_branch=eg, name="shape_if")],
                                      [vi("x", [80])], [vi("y", None)], [numpy_helper.from_array(np.float32(0), "zero")]),
            {"x": np.ones(80, np.float32)}, "'shape_if' (If): unsupported")
    body = helper.make_graph([
        helper.make_node("Less", ["i", "two"], ["cond_out"]),
        helper.make_node("Identity", ["x"], ["y"]),
    ], "body", [vi("i", [], I64), vi("cond", [], B)], [vi("cond_out", [], B), vi("y", [2])])
    refused("loop_stops_early", model([helper.make_node("Loop", ["M", ""], ["ys"], body=body, name="early")],
                                      [vi("x", [2]), vi("M", [], I64)], [vi("ys", None)],
                                      [numpy_helper.from_array(np.int64(2), "two")]),
            {"x": np.ones(2, np.float32), "M": np.int64(6)}, "'early/loop' (loop)")
    for f in fails:
        print("FAIL " + f)
    print(f"onnx control flow ({a.backend}): {runs} runs (If, Loop, Scan, a scripted PyTorch loop and if; each also "
          f"converted to an rlx JSON graph with bodies) "
          f"{'all match' if not fails else 'with failures'}; 2 refusals checked")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
