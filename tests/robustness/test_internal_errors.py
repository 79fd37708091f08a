"""Extreme values that surfaced as Python internal errors now give a GlowError naming the node."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import glow_core
from glow_core.errors import BudgetError, GlowError, ModelError
from tests.robustness.util import F, model

pytestmark = pytest.mark.robustness


def _resize(scales: list[float]):  # type: ignore[no-untyped-def]
    s = numpy_helper.from_array(np.array(scales, np.float32), "s")
    return model([helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest")], [("x", F, [1, 1, 2, 2])],
                 [("y", F, [1, 1, 4, 4])], [s], opset=13)


def _attention(heads: int):  # type: ignore[no-untyped-def]
    vis = [(n, F, [1, 3, 8]) for n in "qkv"]
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], q_num_heads=heads, kv_num_heads=heads)
    return model([node], vis, [("y", F, [1, 3, 8])], opset=23)


@pytest.mark.parametrize("make, arg, what", [
    (_resize, [1, 1, np.inf, 2], "OverflowError"),
    (_attention, 10**12, "ZeroDivisionError"),
])
def test_extreme_attributes_are_model_errors(make, arg, what: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ModelError, match=rf"ONNX node 'y' .*out of range \({what}"):
        glow_core.compile(make(arg))


def test_memory_error_at_run_time_is_a_budget_error_not_a_backend_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [4])], [("y", F, [4])])
    net = glow_core.compile(m)

    def oom(feeds):  # type: ignore[no-untyped-def]
        raise MemoryError

    monkeypatch.setattr(net.executable, "execute", oom)
    with pytest.raises(BudgetError, match="ran out of memory") as info:
        net.run({"x": np.zeros(4, np.float32)})
    assert "bug" not in info.value.one_line()


def test_memory_error_while_importing_names_the_node(monkeypatch: pytest.MonkeyPatch) -> None:
    from glow_core.importer import context

    def oom(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise MemoryError

    monkeypatch.setattr(context, "fold_node", oom)
    from glow_core.importer import onnx_importer

    monkeypatch.setattr(onnx_importer, "fold_node", oom)
    c = numpy_helper.from_array(np.ones(4, np.float32), "c")
    m = model([helper.make_node("Relu", ["c"], ["r"], name="relu_c"), helper.make_node("Add", ["x", "r"], ["y"])],
              [("x", F, [4])], [("y", F, [4])], [c])
    with pytest.raises(BudgetError, match="relu_c.*out of memory"):
        glow_core.compile(m)
    assert issubclass(BudgetError, GlowError)
