"""Small builders of ONNX models for rlx's Python tests (python3-onnx's helper underneath):
one place for the boilerplate each test file used to repeat."""
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
