"""Small ONNX models and sample data of the quantization tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mlp_softmax_model(batch: int = 2, width: int = 8, hidden: int = 6) -> onnx.ModelProto:
    """``probs = Softmax(LayerNorm(Relu(x @ W + b) @ V))``, ``act = Relu(x @ W + b)``; LayerNorm and Softmax lower."""
    rng = np.random.default_rng(42)
    w = numpy_helper.from_array(rng.standard_normal((width, hidden)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), "b")
    v = numpy_helper.from_array(rng.standard_normal((hidden, 5)).astype(np.float32), "V")
    g = numpy_helper.from_array(rng.uniform(0.5, 2.0, 5).astype(np.float32), "g")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="mm0"),
        helper.make_node("Add", ["xw", "b"], ["h"], name="add0"),
        helper.make_node("Relu", ["h"], ["act"], name="relu0"),
        helper.make_node("MatMul", ["act", "V"], ["logits"], name="mm1"),
        helper.make_node("LayerNormalization", ["logits", "g"], ["normed"], name="ln0", axis=-1),
        helper.make_node("Softmax", ["normed"], ["probs"], name="sm0", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "mlp_softmax", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, width])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, 5]),
         helper.make_tensor_value_info("act", TensorProto.FLOAT, [batch, hidden])],
        initializer=[w, b, v, g])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def two_input_model() -> onnx.ModelProto:
    """``out = Tanh(a) * b`` on float32[1, 4] inputs a and b."""
    graph = helper.make_graph(
        [helper.make_node("Tanh", ["a"], ["t"], name="tanh0"),
         helper.make_node("Mul", ["t", "b"], ["out"], name="mul0")],
        "two_input", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 4]),
                      helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def conv_image_model(channels: int = 3, size: int = 6) -> onnx.ModelProto:
    """``y = Conv(img, K)`` with img float32[1, channels, size, size] and K [2, channels, 3, 3]."""
    k = numpy_helper.from_array(np.random.default_rng(3).standard_normal((2, channels, 3, 3)).astype(np.float32), "K")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["img", "K"], ["y"], name="conv0")], "conv_image",
        [helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, size - 2, size - 2])], initializer=[k])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
