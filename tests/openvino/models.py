"""Models of the OpenVINO backend's tests: one with an operator OpenVINO's ONNX frontend lacks (Det)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def det_model(seed: int = 0) -> onnx.ModelProto:
    """``y = Sigmoid(Reshape(Det(Relu(x @ w))) @ w2)``: Det has no conversion in OpenVINO's ONNX frontend;
    x is float32[4, 3, 3], y float32[1, 5]."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array([1, 4], np.int64), "shape")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Det", ["r"], ["d"], name="det"),
             helper.make_node("Reshape", ["d", "shape"], ["d2"], name="reshape"),
             helper.make_node("MatMul", ["d2", "w2"], ["m"], name="matmul2"),
             helper.make_node("Sigmoid", ["m"], ["y"], name="sigmoid")]
    graph = helper.make_graph(nodes, "det", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
