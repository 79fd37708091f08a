"""The memory budget: every tensor is checked before it is allocated (glow_core.budget)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core import budget
from glow_core.errors import BudgetError, GlowTypeError, ModelError
from tests.robustness.util import F, I64, model

pytestmark = pytest.mark.robustness


def _const_i64(name: str, values: list[int]) -> TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def test_folding_chain_stops_at_the_running_total(monkeypatch: pytest.MonkeyPatch) -> None:
    """1 KB model: a 64 MiB ConstantOfShape and 8 chained Adds, folded eagerly (5.2 GB with 1 GiB before).
    A fold's dead operand is freed (tests/robustness/test_budget_loops.py), so two 64 MiB constants are alive
    at a time: over a 100 MiB total."""
    monkeypatch.setenv(budget.ENV_TOTAL, "100M")
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["c0"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]))]
    for k in range(8):
        nodes.append(helper.make_node("Add", [f"c{k}", f"c{k}"], [f"c{k + 1}"], name=f"add{k}"))
    nodes.append(helper.make_node("Add", ["x", "c8"], ["y"]))
    m = model(nodes, [("x", F, [16 * 1024 * 1024])], [("y", F, [16 * 1024 * 1024])],
              [_const_i64("shape", [16 * 1024 * 1024])])
    assert len(m.SerializeToString()) < 1024
    with pytest.raises(BudgetError, match=r"add\d.*constants reach .* over the 100.0 MiB limit"):
        glow_core.compile(m)


def test_option_overrides_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(budget.ENV_TENSOR, "1K")
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [1024])], [("y", F, [1024])])
    with pytest.raises(BudgetError, match="4.0 KiB, over the 1.0 KiB limit for one tensor"):
        glow_core.compile(m)
    net = glow_core.compile(m, options={budget.OPTION_TENSOR: "1M"})
    np.testing.assert_array_equal(net.run({"x": -np.ones(1024, np.float32)})["y"], np.zeros(1024, np.float32))


@pytest.mark.parametrize("op", ["HannWindow", "BlackmanWindow"])
def test_huge_window_is_refused_before_allocation(op: str) -> None:
    n = numpy_helper.from_array(np.array(2**31 - 1, np.int64), "n")
    m = model([helper.make_node(op, ["n"], ["y"])], [], [("y", F, [2**31 - 1])], [n], opset=17)
    with pytest.raises(BudgetError, match=rf"{op}.*window of shape \[2147483647\] needs 8.0 GiB"):
        glow_core.compile(m)


def test_huge_range_is_refused_before_allocation() -> None:
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("a", 0), ("b", 10**12), ("d", 1))]
    m = model([helper.make_node("Range", ["a", "b", "d"], ["y"])], [], [("y", I64, [10**12])], inits)
    with pytest.raises(BudgetError, match=r"Range.*7.3 TiB"):
        glow_core.compile(m)


@pytest.mark.parametrize("limit", [np.inf, -np.inf, np.nan])
def test_range_with_infinite_bounds_is_a_type_error(limit: float) -> None:
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("a", 0.0), ("b", limit), ("d", 1.0))]
    m = model([helper.make_node("Range", ["a", "b", "d"], ["y"])], [], [("y", F, [4])], inits)
    with pytest.raises(GlowTypeError, match="no finite element count"):
        glow_core.compile(m)


def test_huge_activation_is_refused_at_import() -> None:
    """A 32768 x 32768 float ConstantOfShape fed into a run-time Add: 4 GiB, over the 2 GiB default."""
    m = model([helper.make_node("ConstantOfShape", ["shape"], ["c"]), helper.make_node("Add", ["x", "c"], ["y"])],
              [("x", F, [1])], [("y", F, [32768, 32768])], [_const_i64("shape", [32768, 32768])])
    with pytest.raises(BudgetError, match=r"4.0 GiB, over the 2.0 GiB limit"):
        glow_core.compile(m)


def test_initializer_dims_that_wrap_int64_are_refused() -> None:
    """dims [3, -2**62]: the int64 product wraps; the initializer used to be read as [3, 1]."""
    t = numpy_helper.from_array(np.zeros((3, 1), np.float32), "w")
    del t.dims[:]
    t.dims.extend([3, -(2**62)])
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [("x", F, [3, 1])], [("y", F, [3, 1])], [t])
    with pytest.raises(ModelError, match=r"initializer 'w'.*negative dimension \[3, -4611686018427387904\]"):
        glow_core.compile(m)


def test_initializer_over_the_tensor_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(budget.ENV_TENSOR, "100")
    t = numpy_helper.from_array(np.zeros((64,), np.float32), "w")
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [("x", F, [64])], [("y", F, [64])], [t])
    with pytest.raises(BudgetError, match="initializer 'w'.*256 bytes, over the 100 bytes limit"):
        glow_core.compile(m)


def test_cpu_arena_is_checked_against_the_total(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("glow_backend_cpu")
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Exp", ["a"], ["b"]),
             helper.make_node("Neg", ["b"], ["y"])]
    m = model(nodes, [("x", F, [4096])], [("y", F, [4096])])
    with pytest.raises(BudgetError, match="activation arena"):
        glow_core.compile(m, backend="cpu", options={budget.OPTION_TOTAL: 1000, "cache": False})


@pytest.mark.parametrize("text, want", [("4G", 4 << 30), ("512M", 512 << 20), ("1000", 1000), ("2GiB", 2 << 30)])
def test_parse_bytes(text: str, want: int) -> None:
    assert budget.parse_bytes(text, "x") == want


@pytest.mark.parametrize("text", ["lots", "-1", "0"])
def test_parse_bytes_refuses_nonsense(text: str) -> None:
    with pytest.raises(BudgetError):
        budget.parse_bytes(text, "x")


def test_split_num_outputs_far_above_the_output_count_is_refused_before_allocating() -> None:
    """num_outputs = 2**31-1 on a 2-output Split built a list of 2**31 sizes (the process was OOM-killed)."""
    node = helper.make_node("Split", ["x"], ["a", "b"], axis=0, num_outputs=2**31 - 1)
    m = model([node], [("x", F, [5])], [("a", F, [3]), ("b", F, [2])], opset=18)
    with pytest.raises(GlowTypeError, match="cannot split into 2147483647 parts with 2 outputs"):
        glow_core.compile(m)


def test_prepared_function_is_checked_before_the_backend_compiles() -> None:
    """What lowering makes counts too: a value under the limit at import but over it after is caught."""
    from glow_core.ir.graph import Function
    from glow_core.ir.types import ElemKind, TensorType

    fn = Function("f")
    x = fn.add_input("x", TensorType(ElemKind.FLOAT32, (256,)))
    y = fn.create("Relu", [x], {}, name="r", origin="relu_node").outputs[0]
    fn.set_output("y", y)
    budget.check_function(fn, budget.Budget(tensor_bytes=1024))
    with pytest.raises(BudgetError, match=r"Relu 'r' \(from ONNX node 'relu_node'\): output .* 1.0 KiB, over the "
                                          r"1000 bytes limit"):
        budget.check_function(fn, budget.Budget(tensor_bytes=1000))
