"""eliminate-concat-slice: slices of concats, concats of slices, nested concats."""

from __future__ import annotations

import pytest

from glow_core.ir.graph import Function, Value
from glow_core.ir.types import ElemKind, TensorType
from glow_core.passinfra import FixedPoint
from tests.passes.passutil import check, kinds

PASS = FixedPoint("eliminate-concat-slice", "dce")


def inputs(*shapes: tuple[int, ...]) -> tuple[Function, list[Value]]:
    fn = Function()
    return fn, [fn.add_input(f"x{i}", TensorType(ElemKind.FLOAT32, s)) for i, s in enumerate(shapes)]


def sl(fn: Function, v: Value, axis: int, start: int, size: int, step: int = 1) -> Value:
    shape = v.type.shape
    starts, sizes, steps = [0] * len(shape), list(shape), [1] * len(shape)
    starts[axis], sizes[axis], steps[axis] = start, size, step
    return fn.create("Slice", [v], {"starts": tuple(starts), "sizes": tuple(sizes), "steps": tuple(steps)}).result


def cat(fn: Function, vs: list[Value], axis: int) -> Value:
    return fn.create("Concat", vs, {"axis": axis}).result


def test_slice_selecting_one_operand_is_that_operand() -> None:
    fn, (a, b, c) = inputs((2, 3), (2, 4), (2, 1))
    fn.set_output("y", fn.create("Neg", [sl(fn, cat(fn, [a, b, c], 1), 1, 3, 4)]).result)
    assert check(fn, PASS, exact=True)
    assert kinds(fn) == {"Neg": 1}
    assert fn.nodes[0].inputs[0] is b


def test_slice_inside_one_operand_slices_it() -> None:
    fn, (a, b) = inputs((2, 3), (2, 6))
    fn.set_output("y", sl(fn, cat(fn, [a, b], 1), 1, 8, 2, step=-2))
    assert check(fn, PASS, exact=True)
    assert kinds(fn) == {"Slice": 1}
    assert fn.nodes[0].inputs[0] is b and fn.nodes[0].attrs["starts"] == (0, 5)


def test_slice_across_operands_kept() -> None:
    fn, (a, b) = inputs((2, 3), (2, 4))
    fn.set_output("y", sl(fn, cat(fn, [a, b], 1), 1, 2, 3))
    assert not check(fn, PASS, exact=True)
    assert kinds(fn) == {"Concat": 1, "Slice": 1}


def test_slice_of_concat_output_keeps_the_concat_for_its_reader() -> None:
    fn, (a, b) = inputs((2, 3), (2, 4))
    c = cat(fn, [a, b], 1)
    fn.set_output("c", c)
    fn.set_output("y", sl(fn, c, 1, 0, 3))
    assert check(fn, PASS, exact=True)
    assert kinds(fn) == {"Concat": 1}
    assert fn.outputs[1][1] is a


@pytest.mark.parametrize("step", [1, -1, 2])
def test_adjacent_slices_become_one(step: int) -> None:
    fn, (x,) = inputs((3, 12))
    first = 0 if step > 0 else 11
    parts = [sl(fn, x, 1, first, 2, step), sl(fn, x, 1, first + 2 * step, 3, step)]
    fn.set_output("y", fn.create("Neg", [cat(fn, parts, 1)]).result)
    assert check(fn, PASS, exact=True)
    assert kinds(fn) == {"Neg": 1, "Slice": 1}


def test_slices_covering_the_tensor_become_the_tensor() -> None:
    fn, (x,) = inputs((4, 6))
    parts = [sl(fn, x, 0, 0, 1), sl(fn, x, 0, 1, 2), sl(fn, x, 0, 3, 1)]
    fn.set_output("y", fn.create("Neg", [cat(fn, parts, 0)]).result)
    assert check(fn, PASS, exact=True)
    assert kinds(fn) == {"Neg": 1}
    assert fn.nodes[0].inputs[0] is x


def test_partial_run_of_slices_merged() -> None:
    fn, (x, z) = inputs((4, 6), (4, 2))
    parts = [z, sl(fn, x, 1, 1, 2), sl(fn, x, 1, 3, 2), z]
    fn.set_output("y", cat(fn, parts, 1))
    assert check(fn, PASS, exact=True)
    assert kinds(fn) == {"Concat": 1, "Slice": 1}
    assert len(fn.nodes_of("Concat")[0].inputs) == 3


def _two(fn: Function, x: Value, w: Value, case: str) -> list[Value]:
    if case == "gap":
        return [sl(fn, x, 1, 0, 2), sl(fn, x, 1, 3, 2)]
    if case == "other_tensor":
        return [sl(fn, x, 1, 0, 2), sl(fn, w, 1, 2, 2)]
    if case == "reversed_order":
        return [sl(fn, x, 1, 2, 2), sl(fn, x, 1, 0, 2)]
    # contiguous along axis 1 but different rows
    return [fn.create("Slice", [x], {"starts": (0, 0), "sizes": (3, 2), "steps": (1, 1)}).result,
            fn.create("Slice", [x], {"starts": (1, 2), "sizes": (3, 2), "steps": (1, 1)}).result]


@pytest.mark.parametrize("case", ["gap", "other_tensor", "other_axis_differs", "reversed_order"])
def test_non_adjacent_slices_kept(case: str) -> None:
    fn, (x, w) = inputs((4, 6), (4, 6))
    fn.set_output("y", cat(fn, _two(fn, x, w, case), 1))
    before = kinds(fn)
    assert not check(fn, PASS, exact=True)
    assert kinds(fn) == before


def test_nested_concats_flattened() -> None:
    fn, (a, b, c, d) = inputs((2, 1), (2, 2), (2, 3), (2, 4))
    inner = cat(fn, [b, cat(fn, [c, d], 1)], 1)
    fn.set_output("y", cat(fn, [a, inner], 1))
    assert check(fn, PASS, exact=True)
    assert kinds(fn) == {"Concat": 1}
    assert list(fn.nodes[0].inputs) == [a, b, c, d]


def test_nested_concat_on_another_axis_kept() -> None:
    fn, (a, b, c) = inputs((2, 2), (2, 2), (4, 3))
    fn.set_output("y", cat(fn, [cat(fn, [a, b], 0), c], 1))
    assert not check(fn, PASS, exact=True)
    assert kinds(fn) == {"Concat": 2}


def test_empty_operands_dropped() -> None:
    fn, (a, e) = inputs((2, 3), (2, 0))
    fn.set_output("y", fn.create("Neg", [cat(fn, [e, a, e], 1)]).result)
    assert check(fn, PASS, exact=True)
    assert kinds(fn) == {"Neg": 1}
