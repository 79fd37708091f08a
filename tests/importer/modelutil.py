"""Small hand-built ONNX models for importer tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from glow_core.importer.context import import_rules

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def vi(name: str, elem: int = F, shape: Sequence[int | str] | None = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
          outputs: Sequence[onnx.ValueInfoProto], initializers: Sequence[onnx.TensorProto] = (),
          opset: int = 17, extra_opsets: Sequence[tuple[str, int]] = (), ir_version: int = 8) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(initializers))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    return helper.make_model(graph, opset_imports=opsets, ir_version=ir_version)


def relu_model(shape: Sequence[int | str] = (2, 3), opset: int = 17) -> onnx.ModelProto:
    """``y = Relu(x)``."""
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu_0")], [vi("x", F, shape)], [vi("y", F, shape)],
                 opset=opset)


def add_weight_model(weight: np.ndarray) -> onnx.ModelProto:
    """``y = x + w`` with ``w`` an initializer."""
    return model([helper.make_node("Add", ["x", "w"], ["y"], name="add_0")], [vi("x", F, weight.shape)],
                 [vi("y", F, weight.shape)], [numpy_helper.from_array(weight, "w")])


def has_rules(*op_types: str) -> bool:
    rules = import_rules()
    return all(("", op) in rules for op in op_types)
