"""eliminate-noops: structural removal and equal results, and the cases it must leave alone."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import glow_core
from glow_core.ir.graph import Function
from glow_core.ir.types import ElemKind, TensorType
from tests.passes.passutil import apply, check, kinds, random_feeds, run

F32 = ElemKind.FLOAT32


def wrap(kind: str, attrs: dict[str, Any], shape: tuple[int, ...] = (2, 3, 4), n_operands: int = 1,
         elem: ElemKind = F32) -> Function:
    """x -> Neg -> KIND -> Abs -> y (the no-op candidate sits between two real nodes)."""
    fn = Function()
    x = fn.add_input("x", TensorType(elem, shape))
    a = fn.create("Neg" if elem.is_float else "Abs", [x]).result
    mid = fn.create(kind, [a] * n_operands, attrs).result
    fn.set_output("y", fn.create("Abs", [mid]).result)
    return fn


NOOPS = [
    ("Identity", {}, 1),
    ("Dropout", {}, 1),
    ("Cast", {"to": F32}, 1),
    ("Reshape", {"shape": (2, 3, 4)}, 1),
    ("Transpose", {"perm": (0, 1, 2)}, 1),
    ("Pad", {"pads": (0,) * 6}, 1),
    ("Pad", {"pads": (0,) * 6, "mode": "reflect"}, 1),
    ("Slice", {"starts": (0, 0, 0), "sizes": (2, 3, 4), "steps": (1, 1, 1)}, 1),
    ("Broadcast", {"shape": (2, 3, 4)}, 1),
    ("Concat", {"axis": 1}, 1),
    ("Tile", {"repeats": (1, 1, 1)}, 1),
    ("Split", {"axis": 2, "splits": (4,)}, 1),
]


@pytest.mark.parametrize("kind,attrs,n", NOOPS, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(NOOPS)])
def test_noop_removed(kind: str, attrs: dict[str, Any], n: int) -> None:
    fn = wrap(kind, attrs, n_operands=n)
    assert check(fn, "eliminate-noops", exact=True)
    assert kinds(fn) == {"Abs": 1, "Neg": 1}


def test_slice_of_length_one_axis_is_whole_whatever_the_step() -> None:
    fn = wrap("Slice", {"starts": (0, 0, 0), "sizes": (1, 3, 4), "steps": (-1, 1, 1)}, shape=(1, 3, 4))
    assert check(fn, "eliminate-noops", exact=True)
    assert "Slice" not in kinds(fn)


KEEP = [
    ("Cast", {"to": ElemKind.FLOAT64}, 1),
    ("Reshape", {"shape": (6, 4)}, 1),
    ("Transpose", {"perm": (0, 2, 1)}, 1),
    ("Pad", {"pads": (0, 0, 1, 0, 0, 0)}, 1),
    ("Slice", {"starts": (0, 0, 1), "sizes": (2, 3, 3), "steps": (1, 1, 1)}, 1),
    ("Slice", {"starts": (0, 0, 3), "sizes": (2, 3, 4), "steps": (1, 1, -1)}, 1),  # reversed: not a no-op
    ("Broadcast", {"shape": (5, 2, 3, 4)}, 1),
    ("Concat", {"axis": 1}, 2),
    ("Tile", {"repeats": (1, 2, 1)}, 1),
]


@pytest.mark.parametrize("kind,attrs,n", KEEP, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(KEEP)])
def test_not_a_noop_is_kept(kind: str, attrs: dict[str, Any], n: int) -> None:
    fn = wrap(kind, attrs, n_operands=n)
    before = kinds(fn)
    assert not check(fn, "eliminate-noops", exact=True)
    assert kinds(fn) == before


def test_noop_on_an_output_keeps_the_output_value() -> None:
    """Identity(x) read by two outputs and a node: every reader now reads x; the outputs stay."""
    fn = Function()
    x = fn.add_input("x", TensorType(F32, (3,)))
    n = fn.create("Neg", [x]).result
    ident = fn.create("Identity", [n]).result
    fn.set_output("a", ident)
    fn.set_output("b", ident)
    fn.set_output("c", fn.create("Abs", [ident]).result)
    assert check(fn, "eliminate-noops", exact=True)
    assert [name for name, _ in fn.outputs] == ["a", "b", "c"]
    assert fn.outputs[0][1] is n and fn.outputs[1][1] is n
    assert "Identity" not in kinds(fn)


def test_noop_of_an_input_as_output() -> None:
    fn = Function()
    x = fn.add_input("x", TensorType(F32, (3,)))
    fn.set_output("y", fn.create("Dropout", [x]).result)
    assert check(fn, "eliminate-noops", exact=True)
    assert fn.nodes == [] and fn.outputs[0][1] is x


def test_cast_to_the_same_int_type_removed_and_other_kept() -> None:
    fn = wrap("Cast", {"to": ElemKind.INT32}, elem=ElemKind.INT32)
    assert check(fn, "eliminate-noops", exact=True)
    assert "Cast" not in kinds(fn)


def _model_with_dropout_and_identity() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Dropout", ["r"], ["d"]),
        helper.make_node("Identity", ["d"], ["i"]),
        helper.make_node("Sigmoid", ["i"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("backend", ["interpreter", "interpreter-primitives"])
def test_compiled_model_has_no_dropout_or_identity(backend: str) -> None:
    net = glow_core.compile(_model_with_dropout_and_identity(), backend, debug=True)
    assert not {"Dropout", "Identity"} & set(net.function.count_by_kind())
    x = np.linspace(-2, 2, 10, dtype=np.float32).reshape(2, 5)
    np.testing.assert_allclose(net.run({"x": x})["y"], 1 / (1 + np.exp(-np.maximum(x, 0))), rtol=1e-6)


def test_pass_reports_no_change_on_a_clean_graph() -> None:
    fn = wrap("Relu", {})
    feeds = random_feeds(fn)
    before = run(fn, feeds)
    ctx = apply(fn, "eliminate-noops")
    assert ctx.changes == {}
    np.testing.assert_array_equal(run(fn, feeds)["y"], before["y"])
