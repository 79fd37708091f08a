"""simplify-arith: identities removed, constant chains merged; refused where inexact or broadcasting. Float
chains are merged only under the option ``fast_math`` (each ONNX node rounds its result)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from glow_core.ir.graph import Function, Value
from glow_core.ir.types import ElemKind, TensorType
from glow_core.passinfra import FixedPoint
from tests.passes.passutil import apply, check, f, kinds, run

SIMPLIFY = FixedPoint("simplify-arith", "dce")
FAST = {"fast_math": True}


def new(shape: tuple[int, ...] = (3, 4), elem: ElemKind = ElemKind.FLOAT32) -> tuple[Function, Value]:
    fn = Function()
    return fn, fn.add_input("x", TensorType(elem, shape))


def const(fn: Function, value: Any, shape: tuple[int, ...], elem: ElemKind) -> Value:
    return fn.add_constant(np.full(shape, value, dtype=elem.dtype), "c")


# (x + -0.0 and x - 0.0 keep every zero's sign; for integers -0.0 is 0)
IDENTITY_CASES = [("Mul", 1, False), ("Mul", 1, True), ("Add", -0.0, False), ("Add", -0.0, True),
                  ("Sub", 0, False), ("Div", 1, False), ("Pow", 1, False)]


@pytest.mark.parametrize("elem", [ElemKind.FLOAT32, ElemKind.FLOAT16, ElemKind.INT32, ElemKind.UINT8])
@pytest.mark.parametrize("kind,value,const_left", IDENTITY_CASES)
@pytest.mark.parametrize("const_shape", [(), (1, 4), (3, 4)])
def test_identity_removed(kind: str, value: int, const_left: bool, elem: ElemKind,
                          const_shape: tuple[int, ...]) -> None:
    fn, x = new(elem=elem)
    c = const(fn, value, const_shape, elem)
    y = fn.create(kind, [c, x] if const_left else [x, c]).result
    fn.set_output("y", fn.create("Abs", [y]).result)
    assert check(fn, SIMPLIFY, exact=True)
    assert kinds(fn) == {"Abs": 1}


@pytest.mark.parametrize("elem", [ElemKind.FLOAT32, ElemKind.FLOAT16])
@pytest.mark.parametrize("kind,value,const_left", [("Add", 0.0, False), ("Add", 0.0, True), ("Sub", -0.0, False)])
def test_float_zero_that_changes_a_signed_zero_kept_unless_fast_math(kind: str, value: float, const_left: bool,
                                                                    elem: ElemKind) -> None:
    """-0.0 + 0.0 is +0.0 and -0.0 - -0.0 is +0.0: removing those would keep a -0.0 the graph turns into +0.0."""
    for options, removed in ((None, False), (FAST, True)):
        fn, x = new(elem=elem)
        c = const(fn, value, (), elem)
        y = fn.create(kind, [c, x] if const_left else [x, c]).result
        fn.set_output("y", fn.create("Abs", [y]).result)
        assert check(fn, SIMPLIFY, exact=True, options=options) is removed
        assert kinds(fn) == ({"Abs": 1} if removed else {"Abs": 1, kind: 1})


def test_identity_kept_when_broadcasting_grows_the_shape() -> None:
    fn, x = new((1, 4))
    fn.set_output("y", fn.create("Mul", [x, const(fn, 1, (3, 4), ElemKind.FLOAT32)]).result)
    assert not check(fn, SIMPLIFY, exact=True)
    assert kinds(fn) == {"Mul": 1}


@pytest.mark.parametrize("kind,value,const_left", [("Mul", 2, False), ("Add", 1, False), ("Sub", 0, True),
                                                    ("Div", 1, True), ("Mul", 0, False)])
def test_non_identities_kept(kind: str, value: int, const_left: bool) -> None:
    fn, x = new()
    c = const(fn, value, (), ElemKind.FLOAT32)
    fn.set_output("y", fn.create(kind, [c, x] if const_left else [x, c]).result)
    assert not check(fn, SIMPLIFY, exact=True)
    assert kinds(fn) == {kind: 1}


def test_mixed_constant_is_not_an_identity() -> None:
    fn, x = new()
    c = fn.add_constant(np.array([1, 1, 1, 2], np.float32), "c")
    fn.set_output("y", fn.create("Mul", [x, c]).result)
    assert not check(fn, SIMPLIFY, exact=True)


def test_where_with_constant_condition() -> None:
    fn, x = new()
    z = fn.add_input("z", TensorType(ElemKind.FLOAT32, (3, 4)))
    t = fn.create("Where", [fn.add_constant(np.ones((1, 4), bool), "t"), x, z]).result
    e = fn.create("Where", [fn.add_constant(np.zeros((), bool), "f"), x, z]).result
    fn.set_output("y", fn.create("Sub", [t, e]).result)
    assert check(fn, SIMPLIFY, exact=True)
    assert kinds(fn) == {"Sub": 1}


def test_pow_int_base_float_exponent_kept() -> None:
    fn, x = new(elem=ElemKind.INT64)
    fn.set_output("y", fn.create("Pow", [x, const(fn, 1.0, (), ElemKind.FLOAT32)]).result)
    assert not check(fn, SIMPLIFY, exact=True)


# -- chains -----------------------------------------------------------------------------------------------

CHAINS = [("Mul", "Mul", "Mul"), ("Add", "Add", "Add"), ("Sub", "Sub", "Sub"), ("Add", "Sub", "Add"),
          ("Sub", "Add", "Add"), ("Mul", "Div", "Mul"), ("Div", "Mul", "Mul"), ("Div", "Div", "Div")]


def _float_chain(inner: str, outer: str) -> Function:
    fn, x = new()
    a = fn.create(inner, [x, fn.add_constant(np.abs(f((1, 4))) + np.float32(0.5), "c1")]).result
    fn.set_output("y", fn.create(outer, [a, fn.add_constant(np.abs(f((1, 1), seed=2)) + np.float32(0.5), "c2")]).result)
    return fn


@pytest.mark.parametrize("inner,outer,merged", CHAINS)
def test_float_chain_merged_under_fast_math(inner: str, outer: str, merged: str) -> None:
    fn = _float_chain(inner, outer)
    assert check(fn, SIMPLIFY, rtol=1e-6, atol=1e-6, options=FAST)
    assert kinds(fn) == {merged: 1}


@pytest.mark.parametrize("inner,outer,merged", CHAINS)
def test_float_chain_kept_by_default(inner: str, outer: str, merged: str) -> None:
    """Each node rounds its result: (x + 1e8) - 1e8 is 0 for x = 0.3 (tests/robustness/test_float_order.py)."""
    fn = _float_chain(inner, outer)
    assert not check(fn, SIMPLIFY, exact=True)
    assert sum(kinds(fn).values()) == 2


@pytest.mark.parametrize("c1,c2,x", [(1e8, -1e8, 0.3), (1.5 * 2.0 ** 23, -1.5 * 2.0 ** 23, 0.3)])
def test_fast_math_changes_the_answer(c1: float, c2: float, x: float) -> None:
    """What the option costs: the merged chain gives x where the node-by-node evaluation gives 0."""
    answers = []
    for options in (None, FAST):
        fn, xv = new((1,))
        a = fn.create("Add", [xv, fn.add_constant(np.array(c1, np.float32), "c1")]).result
        fn.set_output("y", fn.create("Add", [a, fn.add_constant(np.array(c2, np.float32), "c2")]).result)
        apply(fn, SIMPLIFY, options=options)
        answers.append(run(fn, {"x": np.array([x], np.float32)})["y"][0])
    assert answers == [np.float32(0.0), np.float32(x)]


@pytest.mark.parametrize("elem", [ElemKind.INT32, ElemKind.UINT8, ElemKind.INT64])
@pytest.mark.parametrize("inner,outer,merged", [c for c in CHAINS if "Div" not in c[:2]])
def test_int_chain_merged_exactly_with_wrapping(inner: str, outer: str, merged: str, elem: ElemKind) -> None:
    fn, x = new(elem=elem)
    big = np.iinfo(elem.dtype).max // 3
    a = fn.create(inner, [x, fn.add_constant(np.array([big, 7, 1, 250 % big], elem.dtype), "c1")]).result
    fn.set_output("y", fn.create(outer, [a, fn.add_constant(np.array(big - 1, elem.dtype), "c2")]).result)
    assert check(fn, SIMPLIFY, exact=True)
    assert kinds(fn) == {merged: 1}


def test_long_chain_becomes_one_node() -> None:
    fn, x = new()
    y: Value = x
    for i in range(5):
        y = fn.create("Mul", [fn.add_constant(np.float32(1.5 + i), "c"), y]).result
    fn.set_output("y", y)
    assert check(fn, SIMPLIFY, rtol=1e-6, options=FAST)
    assert kinds(fn) == {"Mul": 1}


def test_int_division_chain_kept() -> None:
    fn, x = new(elem=ElemKind.INT32)
    a = fn.create("Div", [x, const(fn, 2, (), ElemKind.INT32)]).result
    fn.set_output("y", fn.create("Div", [a, const(fn, 3, (), ElemKind.INT32)]).result)
    assert not check(fn, SIMPLIFY, exact=True)
    assert kinds(fn) == {"Div": 2}


def test_chain_kept_when_the_middle_has_another_reader() -> None:
    fn, x = new()
    a = fn.create("Mul", [x, const(fn, 2, (), ElemKind.FLOAT32)]).result
    fn.set_output("a", a)
    fn.set_output("y", fn.create("Mul", [a, const(fn, 3, (), ElemKind.FLOAT32)]).result)
    assert not check(fn, SIMPLIFY, exact=True, options=FAST)
    assert kinds(fn) == {"Mul": 2}


def test_chain_kept_when_the_merged_constant_overflows() -> None:
    fn, x = new(elem=ElemKind.FLOAT16)
    a = fn.create("Mul", [x, const(fn, 300, (), ElemKind.FLOAT16)]).result
    fn.set_output("y", fn.create("Mul", [a, const(fn, 300, (), ElemKind.FLOAT16)]).result)
    assert not check(fn, SIMPLIFY, exact=True, options=FAST)
    assert kinds(fn) == {"Mul": 2}


def test_chain_kept_when_the_merged_constant_would_be_larger() -> None:
    fn, x = new()
    a = fn.create("Add", [x, fn.add_constant(f((3, 1)), "c1")]).result
    fn.set_output("y", fn.create("Add", [a, fn.add_constant(f((1, 4)), "c2")]).result)
    assert not check(fn, SIMPLIFY, exact=True, options=FAST)
    assert kinds(fn) == {"Add": 2}


def test_mixed_families_kept() -> None:
    fn, x = new()
    a = fn.create("Add", [x, const(fn, 2, (), ElemKind.FLOAT32)]).result
    fn.set_output("y", fn.create("Mul", [a, const(fn, 3, (), ElemKind.FLOAT32)]).result)
    assert not check(fn, SIMPLIFY, exact=True, options=FAST)
