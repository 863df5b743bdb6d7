"""Small builders of ONNX models and cases for rlx's Python tests (python3-onnx's helper underneath):
one place for the boilerplate each test file used to repeat."""
import os

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def vi(name, shape, et=TensorProto.FLOAT):
    """A graph input or output: name, shape (None: unknown rank; strings: symbolic dims), element type."""
    return helper.make_tensor_value_info(name, et, shape)


def model(nodes, inputs, outputs, inits=(), opset=13, producer="rlx_tests", ir_version=None):
    """A one-graph model of the default domain at `opset`."""
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name=producer)
    if ir_version is not None:
        m.ir_version = ir_version
    return m


def init(name, value):
    """An initializer named `name` holding np.asarray(value)."""
    return numpy_helper.from_array(np.asarray(value), name)


def case_args(out, stem, ins, exps):
    """Saves a case's inputs and expected outputs as out/STEM.in.NAME.npy and out/STEM.exp.NAME.npy;
    returns the `rlx run` arguments that read them (--input NAME=@... and --expect NAME=@...)."""
    args = []
    for kind, flag, values in (("in", "--input", ins), ("exp", "--expect", exps)):
        for n, v in values.items():
            f = os.path.join(out, f"{stem}.{kind}.{n}.npy")
            np.save(f, v)
            args += [flag, f"{n}=@{f}"]
    return args


def finish(title, runs, fails):
    """Prints each failure and the summary line; returns the exit status (1 when a check failed)."""
    for f in fails:
        print("FAIL", f)
    print(f"{title}: {runs - len(fails)} passed, {len(fails)} failed")
    return 1 if fails else 0
