"""glow_tools.testing: the tolerance table, comparisons, statistics, and running nodes against the reference."""

from __future__ import annotations

from collections.abc import Iterator
from types import MappingProxyType

import ml_dtypes
import numpy as np
import pytest

from glow_core.ir.kinds import all_kinds
from glow_core.ir.types import ElemKind
from glow_core.plugin_host import registry, reset_registry
from glow_sdk import BackendSpec, hookimpl
from glow_tools.divergence import first_divergence
from glow_tools.scaffold.backend import TemplateBackend
from glow_tools.scaffold.kernels import KERNELS
from glow_tools.testing import (
    BITWISE,
    EXACT,
    KIND_TOLERANCES,
    TOLERANCE_CLASSES,
    Tolerance,
    array_stats,
    assert_matches_reference,
    check_node,
    compare_arrays,
    pad_operands,
    tolerance_class,
    tolerance_for,
)
from tests.cliutil import add_relu_model

E = ElemKind
F32 = np.float32


def test_the_tolerance_table() -> None:
    assert set(KIND_TOLERANCES) <= set(all_kinds())
    for cls, table in TOLERANCE_CLASSES.items():
        assert set(table) == {E.FLOAT32, E.FLOAT16, E.BFLOAT16, E.FLOAT64}, cls
    assert tolerance_for("Add", E.FLOAT32) == EXACT and tolerance_for("Reshape", E.FLOAT16) == BITWISE
    assert tolerance_for("Exp", E.FLOAT32).rtol > 0 and tolerance_for("ReduceSum", E.FLOAT32).scaled
    assert tolerance_for("Exp", E.INT32) == EXACT  # integers always compare exactly
    assert tolerance_class("Gelu") == "composite" and tolerance_class("LSTM") == "composite-accumulate"
    assert tolerance_for("Add", E.FLOAT32, "model") == TOLERANCE_CLASSES["model"][E.FLOAT32]
    assert "exact" in EXACT.describe() and "signed zeros" in BITWISE.describe()


def test_compare_integers_exactly() -> None:
    assert compare_arrays(np.arange(5), np.arange(5)).ok
    c = compare_arrays(np.array([1, 2, 4]), np.array([1, 2, 3]))
    assert not c.ok and c.mismatches == 1 and c.where == (2,) and (c.got_value, c.want_value) == (4, 3)
    assert "1 of 3 elements differ" in c.message and "got 4, expected 3" in c.message
    assert "dtype int32, expected int64" in compare_arrays(np.zeros(3, np.int32), np.zeros(3, np.int64)).message
    assert "shape [4], expected [3]" in compare_arrays(np.zeros(4), np.zeros(3)).message


def test_compare_floats_special_values() -> None:
    want = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], F32)
    assert compare_arrays(want.copy(), want).ok
    assert not compare_arrays(np.array([1.0, 0.0, np.inf, -np.inf, 0.0], F32), want).ok  # NaN must meet NaN
    assert not compare_arrays(np.array([1.0, np.nan, -np.inf, -np.inf, 0.0], F32), want).ok  # same infinity
    neg0 = np.array([1.0, np.nan, np.inf, -np.inf, -0.0], F32)
    assert compare_arrays(neg0, want, EXACT).ok and not compare_arrays(neg0, want, BITWISE).ok
    denorm = np.array([1e-45], F32)
    assert compare_arrays(np.zeros(1, F32), denorm, EXACT).ok  # flushing a denormal to zero is accepted
    assert not compare_arrays(np.zeros(1, F32), denorm, BITWISE).ok


def test_compare_floats_relative_and_scaled() -> None:
    want = np.array([1000.0, 1e-3], F32)
    got = np.array([1000.05, 1.05e-3], F32)
    assert not compare_arrays(got, want, Tolerance(1e-4, 0)).ok  # 5% on the small element
    assert compare_arrays(got, want, Tolerance(1e-4, 0, scaled=True)).ok  # relative to the largest |value|
    c = compare_arrays(np.array([1.0, 2.5], F32), np.array([1.0, 2.0], F32), Tolerance(1e-3, 1e-6))
    assert not c.ok and c.where == (1,) and c.max_abs_error == pytest.approx(0.5)
    assert "worst at [1]: got 2.5, expected 2" in c.message
    bf = np.array([1.0, 2.0], ml_dtypes.bfloat16)
    assert compare_arrays(bf.copy(), bf, tolerance_for("Exp", E.BFLOAT16)).ok
    assert compare_arrays(np.zeros((0, 3), F32), np.zeros((0, 3), F32)).ok


def test_compare_share_of_largest_value() -> None:
    # logits: the one near zero carries the absolute error of the large ones
    want = np.array([10.5, 0.002, -3.0], F32)
    got = np.array([10.5001, 0.00203, -3.0001], F32)
    elementwise = Tolerance(1e-3, 1e-5)
    assert not compare_arrays(got, want, elementwise).ok  # 3e-5 off on 0.002
    share = Tolerance(1e-3, 1e-5, rtol_of_max=1e-5)
    assert compare_arrays(got, want, share).ok  # 1e-5 * 10.5 added to every bound
    assert not compare_arrays(np.array([10.5, 0.0025, -3.0], F32), want, share).ok  # 5e-4 is too much
    assert "plus 1e-05 of the largest |value|" in share.describe()
    assert share.as_dict()["rtol_of_max"] == 1e-5
    assert tolerance_for("", E.FLOAT32, "model").rtol_of_max > 0


def test_array_stats() -> None:
    s = array_stats(np.array([1.0, 3.0, np.nan, np.inf], F32))
    assert (s.min, s.max, s.mean, s.nans, s.infs) == (1.0, 3.0, 2.0, 1, 1)
    assert s.format().startswith("float32[4]  min 1  max 3  mean 2") and "NaN 1" in s.format()
    assert "(empty)" in array_stats(np.zeros((0,), F32)).format()


def test_pad_operands() -> None:
    assert pad_operands("Conv", [np.zeros(1), np.zeros(1)]) == [pytest.approx(np.zeros(1))] * 2 + [None]
    assert len(pad_operands("Concat", [np.zeros(1)] * 3)) == 3  # variadic: unchanged


def test_check_node_runs_through_the_real_pipeline() -> None:
    x = np.random.default_rng(0).standard_normal((2, 5)).astype(F32)
    r = check_node("interpreter-primitives", "Softmax", [x], {"axes": (1,)})
    assert r.ok, r.message
    assert "Softmax" not in r.nodes and "Exp" in r.nodes  # lowered onto the primitives
    assert r.max_error < 1e-5


class _Wrong(TemplateBackend):
    name = "sdk-wrong"
    kernels = MappingProxyType({**KERNELS, "Exp": lambda attrs, out, x: (np.exp(x) * F32(1.01)).astype(out[0].dtype)})


def test_assert_matches_reference_names_the_difference() -> None:
    x = np.linspace(-1, 1, 7, dtype=F32)
    with pytest.raises(AssertionError, match=r"Exp on backend sdk-wrong: result 0: 7 of 7 elements differ"):
        assert_matches_reference(_Wrong(), "Exp", [x])
    assert check_node(_Wrong(), "Add", [x, x]).ok


class _Plugin:
    @hookimpl
    def glow_backends(self) -> list[BackendSpec]:
        return [BackendSpec("sdk-wrong", _Wrong, 1)]


@pytest.fixture
def wrong_backend_registered() -> Iterator[str]:
    reset_registry()
    registry().register_plugin(_Plugin(), "sdk-wrong")
    yield "sdk-wrong"
    reset_registry()


def test_first_divergence_names_the_node(wrong_backend_registered: str) -> None:
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu0"), helper.make_node("Exp", ["r"], ["e"], name="exp0"),
             helper.make_node("Neg", ["e"], ["y"], name="neg0")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    rep = first_divergence(model, wrong_backend_registered, "interpreter")
    assert rep.diverges and rep.first is not None
    assert (rep.first.kind, rep.first.origin) == ("Exp", "exp0") and rep.first.position == 1
    assert [v.comparison.ok for v in rep.values] == [True, False, False]
    text = "\n".join(rep.lines())
    assert "first divergence: node #1" in text and "(1 later value(s) diverge too" in text
    same = first_divergence(add_relu_model(), "interpreter-primitives", "interpreter")
    assert not same.diverges and "no divergence" in "\n".join(same.lines())
