"""Small hostile models for the robustness tests."""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

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


def run_together(n: int, work: Callable[[], Any]) -> list[Any]:
    """``work()`` in ``n`` threads started at once (a barrier); their results, or the first error raised."""
    errors: list[BaseException] = []
    results: list[Any] = []
    start = threading.Barrier(n)

    def one() -> None:
        try:
            start.wait()
            results.append(work())
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
