"""merge-reshapes: chains of Reshapes become one, Reshapes of constants fold."""

from __future__ import annotations

from glow_core.ir.graph import Function, Value
from glow_core.ir.types import ElemKind, TensorType
from glow_core.passinfra import FixedPoint
from tests.passes.passutil import check, f, kinds

MERGE = FixedPoint("merge-reshapes", "dce")


def r(fn: Function, v: Value, shape: tuple[int, ...]) -> Value:
    return fn.create("Reshape", [v], {"shape": shape}).result


def new(shape: tuple[int, ...] = (2, 3, 4)) -> tuple[Function, Value]:
    fn = Function()
    return fn, fn.add_input("x", TensorType(ElemKind.FLOAT32, shape))


def test_chain_merged_into_one() -> None:
    fn, x = new()
    fn.set_output("y", fn.create("Neg", [r(fn, r(fn, r(fn, x, (6, 4)), (24,)), (4, 6))]).result)
    assert check(fn, MERGE, exact=True)
    assert kinds(fn) == {"Neg": 1, "Reshape": 1}
    assert fn.nodes_of("Reshape")[0].inputs[0] is x


def test_chain_back_to_the_original_shape_disappears() -> None:
    fn, x = new()
    fn.set_output("y", fn.create("Neg", [r(fn, r(fn, x, (6, 4)), (2, 3, 4))]).result)
    assert check(fn, MERGE, exact=True)
    assert kinds(fn) == {"Neg": 1}


def test_inner_reshape_with_another_reader_is_kept() -> None:
    fn, x = new()
    inner = r(fn, x, (6, 4))
    fn.set_output("a", fn.create("Neg", [inner]).result)
    fn.set_output("b", r(fn, inner, (24,)))
    assert check(fn, MERGE, exact=True)
    assert kinds(fn) == {"Neg": 1, "Reshape": 2}
    assert all(n.inputs[0] is x for n in fn.nodes_of("Reshape"))  # both read x now


def test_reshape_of_constant_folded() -> None:
    fn, x = new((4, 6))
    c = fn.add_constant(f((2, 12)), "c")
    fn.set_output("y", fn.create("Add", [x, r(fn, c, (4, 6))]).result)
    assert check(fn, MERGE, exact=True)
    assert kinds(fn) == {"Add": 1}


def test_reshape_output_keeps_its_value() -> None:
    """The merged reshape becomes the output (same elements); the inner one stays for its other reader."""
    fn, x = new()
    inner = r(fn, x, (6, 4))
    outer = r(fn, inner, (4, 6))
    fn.set_output("inner", inner)
    fn.set_output("outer", outer)
    fn.set_output("outer2", outer)
    assert check(fn, MERGE, exact=True)
    assert [n for n, _ in fn.outputs] == ["inner", "outer", "outer2"]
    assert fn.outputs[1][1] is fn.outputs[2][1]


def test_single_reshape_of_an_input_untouched() -> None:
    fn, x = new()
    fn.set_output("y", r(fn, x, (4, 6)))
    assert not check(fn, MERGE, exact=True)
    assert kinds(fn) == {"Reshape": 1}
