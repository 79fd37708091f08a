"""sink-transposes: cancelling, composing, folding into constants, sinking; never touching outputs' values."""

from __future__ import annotations

import numpy as np
import pytest

from glow_core.ir.graph import Function, Value
from glow_core.ir.types import ElemKind, TensorType
from glow_core.passes.transpose import transposed
from glow_core.passinfra import FixedPoint
from tests.passes.passutil import check, f, kinds

F32 = ElemKind.FLOAT32
SINK = FixedPoint("sink-transposes", "dce")


def new(shape: tuple[int, ...] = (2, 3, 4), elem: ElemKind = F32) -> tuple[Function, Value]:
    fn = Function()
    return fn, fn.add_input("x", TensorType(elem, shape))


def t(fn: Function, v: Value, perm: tuple[int, ...]) -> Value:
    return fn.create("Transpose", [v], {"perm": perm}).result


def test_inverse_transposes_cancel() -> None:
    fn, x = new()
    fn.set_output("y", fn.create("Neg", [t(fn, t(fn, x, (1, 2, 0)), (2, 0, 1))]).result)
    assert check(fn, SINK, exact=True)
    assert kinds(fn) == {"Neg": 1}


def test_transposes_compose() -> None:
    fn, x = new()
    fn.set_output("y", t(fn, t(fn, x, (1, 2, 0)), (0, 2, 1)))
    assert check(fn, SINK, exact=True)
    assert kinds(fn) == {"Transpose": 1}
    assert fn.nodes[0].inputs[0] is x


def test_transpose_of_constant_folded() -> None:
    fn, x = new((4, 2))
    c = fn.add_constant(f((2, 4)), "c")
    fn.set_output("y", fn.create("Add", [x, t(fn, c, (1, 0))]).result)
    assert check(fn, SINK, exact=True)
    assert kinds(fn) == {"Add": 1}


@pytest.mark.parametrize("kind", ["Relu", "Neg", "Sigmoid", "Exp", "LeakyRelu"])
def test_sunk_below_unary_and_cancelled(kind: str) -> None:
    fn, x = new()
    y = fn.create(kind, [t(fn, x, (2, 0, 1))]).result
    fn.set_output("y", t(fn, y, (1, 2, 0)))
    assert check(fn, SINK, exact=True)
    assert kinds(fn) == {kind: 1}


def test_sunk_below_cast() -> None:
    fn, x = new()
    y = fn.create("Cast", [t(fn, x, (2, 0, 1))], {"to": ElemKind.FLOAT64}).result
    fn.set_output("y", t(fn, y, (1, 2, 0)))
    assert check(fn, SINK, exact=True)
    assert kinds(fn) == {"Cast": 1}


@pytest.mark.parametrize("const_shape", [(4, 2, 3), (2, 3), (3,), (1, 1, 3), ()])
@pytest.mark.parametrize("kind", ["Add", "Mul", "Sub", "Max"])
def test_sunk_below_binary_with_constant(kind: str, const_shape: tuple[int, ...]) -> None:
    fn, x = new()
    c = fn.add_constant(f(const_shape), "c")
    y = fn.create(kind, [t(fn, x, (2, 0, 1)), c]).result
    fn.set_output("y", t(fn, y, (1, 2, 0)))
    assert check(fn, SINK, exact=True)
    assert kinds(fn) == {kind: 1}


def test_sunk_below_binary_with_constant_on_the_left() -> None:
    fn, x = new()
    y = fn.create("Sub", [fn.add_constant(f((4, 2, 3)), "c"), t(fn, x, (2, 0, 1))]).result
    fn.set_output("y", t(fn, y, (1, 2, 0)))
    assert check(fn, SINK, exact=True)
    assert kinds(fn) == {"Sub": 1}


def test_sunk_below_binary_of_two_transposes() -> None:
    fn, x = new()
    z = fn.add_input("z", TensorType(F32, (2, 3, 4)))
    y = fn.create("Mul", [t(fn, x, (1, 0, 2)), t(fn, z, (1, 0, 2))]).result
    fn.set_output("y", y)
    assert check(fn, SINK, exact=True)
    assert kinds(fn) == {"Mul": 1, "Transpose": 1}
    assert fn.nodes[-1].kind.name == "Transpose"


def test_sunk_below_where_clip_and_prelu() -> None:
    fn, x = new()
    cond = fn.add_input("cond", TensorType(ElemKind.BOOL, (2, 3, 4)))
    lo = fn.add_input("lo", TensorType(F32, ()))  # one element: broadcasts the same in any layout
    a = fn.create("Clip", [t(fn, x, (2, 0, 1)), lo, None]).result
    b = fn.create("PRelu", [a, fn.add_constant(f((1, 2, 3)), "slope")]).result
    w = fn.create("Where", [t(fn, cond, (2, 0, 1)), b, fn.add_constant(f((3,)), "c")]).result
    fn.set_output("y", t(fn, w, (1, 2, 0)))
    assert check(fn, FixedPoint("sink-transposes", "dce"), exact=True)
    assert kinds(fn) == {"Clip": 1, "PRelu": 1, "Where": 1}


def test_int_elementwise_sinking_is_exact() -> None:
    fn, x = new(elem=ElemKind.INT32)
    y = fn.create("Add", [t(fn, x, (2, 1, 0)), fn.add_constant(np.arange(4, dtype=np.int32).reshape(4, 1, 1), "c")])
    fn.set_output("y", t(fn, fn.create("Abs", [y.result]).result, (2, 1, 0)))
    assert check(fn, SINK, exact=True)
    assert kinds(fn) == {"Abs": 1, "Add": 1}


def test_sunk_below_concat() -> None:
    fn, x = new()
    z = fn.add_input("z", TensorType(F32, (2, 5, 4)))
    cat = fn.create("Concat", [t(fn, x, (2, 0, 1)), t(fn, z, (2, 0, 1))], {"axis": 2}).result
    fn.set_output("y", t(fn, cat, (1, 2, 0)))
    assert check(fn, SINK, exact=True)
    assert kinds(fn) == {"Concat": 1}
    assert fn.nodes[0].attrs["axis"] == 1


# -- must not fire ---------------------------------------------------------------------------------------

def test_transpose_output_stays() -> None:
    """A transpose whose result is a function output keeps that output's value (and stays)."""
    fn, x = new()
    tx = t(fn, x, (2, 0, 1))
    fn.set_output("t", tx)
    fn.set_output("y", fn.create("Relu", [tx]).result)
    before = kinds(fn)
    assert not check(fn, SINK, exact=True)
    assert kinds(fn) == before
    assert fn.outputs[0][1] is tx


def test_transpose_output_alone_stays() -> None:
    fn, x = new()
    fn.set_output("t", t(fn, x, (2, 0, 1)))
    fn.set_output("t2", fn.outputs[0][1])
    assert not check(fn, SINK, exact=True)
    assert kinds(fn) == {"Transpose": 1}


def test_not_sunk_when_the_transpose_has_another_user() -> None:
    fn, x = new()
    tx = t(fn, x, (2, 0, 1))
    fn.set_output("a", fn.create("Relu", [tx]).result)
    fn.set_output("b", fn.create("Neg", [tx]).result)
    before = kinds(fn)
    assert not check(fn, SINK, exact=True)
    assert kinds(fn) == before


def test_not_sunk_when_the_other_operand_is_not_transposable() -> None:
    fn, x = new()
    z = fn.add_input("z", TensorType(F32, (4, 2, 3)))
    fn.set_output("y", fn.create("Add", [t(fn, x, (2, 0, 1)), z]).result)
    assert not check(fn, SINK, exact=True)
    assert kinds(fn) == {"Add": 1, "Transpose": 1}


def test_not_sunk_when_the_transposed_operand_is_broadcast() -> None:
    fn, x = new((3, 1))
    fn.set_output("y", fn.create("Add", [t(fn, x, (1, 0)), fn.add_constant(f((4, 3)), "c")]).result)
    assert not check(fn, SINK, exact=True)
    assert kinds(fn) == {"Add": 1, "Transpose": 1}


def test_not_sunk_below_concat_of_different_perms() -> None:
    fn, x = new((3, 3, 3))
    z = fn.add_input("z", TensorType(F32, (3, 3, 3)))
    cat = fn.create("Concat", [t(fn, x, (2, 0, 1)), t(fn, z, (1, 2, 0))], {"axis": 0}).result
    fn.set_output("y", cat)
    assert not check(fn, SINK, exact=True)
    assert kinds(fn) == {"Concat": 1, "Transpose": 2}


def test_sinking_stops_at_non_elementwise_ops() -> None:
    fn, x = new()
    r = fn.create("ReduceSum", [t(fn, x, (2, 0, 1))], {"axes": (0,), "keepdims": 1}).result
    fn.set_output("y", r)
    before = kinds(fn)
    assert not check(fn, SINK)
    assert kinds(fn) == before


@pytest.mark.parametrize(("shape", "perm"), [
    ((1200, 1000), (1, 0)),            # a large matrix: the tiled path, edges not multiples of the tile
    ((40, 50, 600), (1, 2, 0)),        # a rotation of a rank-3 tensor
    ((40, 50, 600), (2, 0, 1)),
    ((64, 70, 300), (2, 1, 0)),        # not a rotation: the plain copy
    ((5, 7), (1, 0)),                  # small: the plain copy
    ((1100, 1000), (0, 1)),            # identity
])
def test_transposed_copies_match_numpy(shape: tuple[int, ...], perm: tuple[int, ...]) -> None:
    a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = transposed(a, perm)
    assert got.flags.c_contiguous
    np.testing.assert_array_equal(got, np.transpose(a, perm))
