"""Small hostile models for the robustness tests."""

from __future__ import annotations

from typing import Any, Sequence

import onnx
from onnx import TensorProto, helper


def model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[Any], outputs: Sequence[Any],
          initializers: Sequence[onnx.TensorProto] = (), opset: int = 21) -> onnx.ModelProto:
    """A model from (name, elem, shape) tuples or value infos."""
    def vi(x: Any) -> onnx.ValueInfoProto:
        return x if isinstance(x, onnx.ValueInfoProto) else helper.make_tensor_value_info(*x)

    g = helper.make_graph(list(nodes), "hostile", [vi(i) for i in inputs], [vi(o) for o in outputs],
                          list(initializers))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


F = TensorProto.FLOAT
I64 = TensorProto.INT64
