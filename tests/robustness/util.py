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


def assert_campaign_case_matches(seed: int, index: int, folder: Any, backends: Sequence[str]) -> None:
    """Case ``index`` of campaign ``seed``, regenerated into ``folder`` with today's mutators: each backend's
    answer is a judged match (skips without the ONNX node tests the campaigns draw their seeds from)."""
    import pytest

    from glow_tools.fuzz import MUTATORS
    from glow_tools.fuzz.cases import generate, write_case
    from glow_tools.fuzz.isolate import Outcome
    from glow_tools.fuzz.runners import classify, run_glow, run_reference
    from glow_tools.fuzz.seeds import seed_names

    names = seed_names()
    if len(names) < 100:
        pytest.skip("needs the ONNX node tests ($GLOW_ONNX_NODE_TESTS)")
    write_case(generate(seed, index, names, MUTATORS), folder)
    ref = run_reference(str(folder))
    for backend in backends:
        got = run_glow(str(folder), backend)
        assert got["kind"] == "outputs", got
        assert classify(Outcome("ok", got), Outcome("ok", ref)) == ("match", ""), backend
