"""Lowering of the indexing kinds: GatherElements, GatherND, ScatterElements, TensorScatter, OneHot, ReverseSequence.

Native (interpreter) and lowered (interpreter-primitives) results must be
bit-exact, the lowered function primitive-only, and an index the kernel
rejects (outside [-dim, dim), a bad sequence length or write position) must
make the lowered function fail at run time too, never give an answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from glow_core.errors import ExecutionError, UnsupportedError
from glow_core.ir.types import TensorType
from tests.lowering.test_movement import BOOL, check_lowering_typed, data, lowered_kinds, quantized, run_typed
from tests.lowering.test_reduce import BF16, F16, F32, F64, I8, I32, I64, U8, U64, check_lowering, rand, run

DTYPES = [F32, F16, BF16, I8, U8, I64, BOOL]
INDEX_DTYPES = [I32, I64]


def indices(shape: Sequence[int], dim: int, dtype: np.dtype, seed: int = 0) -> np.ndarray:
    """Indices in [-dim, dim): negative ones count from the end."""
    return rand(shape, dtype, -dim, dim - 1, seed) if dim else np.zeros(shape, dtype)


def both_fail(kind: str, operands: Sequence[np.ndarray | None], attrs: dict[str, Any]) -> None:
    for backend in ("interpreter", "interpreter-primitives"):
        with pytest.raises(ExecutionError):
            run(kind, operands, attrs, backend)


# -- GatherElements ------------------------------------------------------------------------------------

@pytest.mark.parametrize("itype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gather_elements(dtype: np.dtype, itype: np.dtype) -> None:
    x = data((3, 4, 5), dtype)
    for axis in range(3):
        # the data's shape; smaller elsewhere and longer along axis; one element
        for ishape in (x.shape, tuple(d - 1 if a != axis else d + 2 for a, d in enumerate(x.shape)), (1, 1, 1)):
            check_lowering("GatherElements", [x, indices(ishape, x.shape[axis], itype, axis)], {"axis": axis})


def test_gather_elements_edge_shapes() -> None:
    check_lowering("GatherElements", [data((5,), F32), np.array([-5, 4, 0, -1], np.int64)], {"axis": 0})
    check_lowering("GatherElements", [data((2, 3), F32), np.zeros((2, 0), np.int64)], {"axis": 1})
    check_lowering("GatherElements", [data((2, 3), F32), np.zeros((0, 3), np.int64)], {"axis": 0})


def test_gather_elements_quantized() -> None:
    idx = np.array([[0, -1], [2, 1]], np.int64)
    check_lowering_typed("GatherElements", [quantized((2, 3)), (idx, TensorType.of(idx))], {"axis": 1})


@pytest.mark.parametrize("bad", [3, -4, 100, -100])
def test_gather_elements_out_of_range_fails(bad: int) -> None:
    # index 3 of an axis of 3 would be a valid flat position: it must still fail
    both_fail("GatherElements", [data((2, 3), F32), np.array([[0, bad], [1, 1]], np.int64)], {"axis": 1})
    both_fail("GatherElements", [data((3, 2), F32), np.array([[0, 1], [bad, 1]], np.int32)], {"axis": 0})


def test_gather_elements_lowered_kinds() -> None:
    kinds = lowered_kinds("GatherElements", [data((2, 3), F32), np.array([[0, 2], [1, 1]], np.int32)], {"axis": 1})
    assert "Gather" in kinds and kinds <= {"Gather", "Reshape", "Cast", "Add", "Mul", "Less", "LessOrEqual", "Or",
                                           "Where"}


# -- GatherND ------------------------------------------------------------------------------------------

def _nd_indices(x_shape: Sequence[int], lead: Sequence[int], bd: int, k: int, itype: np.dtype,
                seed: int = 0) -> np.ndarray:
    comps = [indices(tuple(lead), x_shape[bd + j], itype, seed + j) for j in range(k)]
    return np.stack(comps, axis=-1).astype(itype)


@pytest.mark.parametrize("itype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gather_nd(dtype: np.dtype, itype: np.dtype) -> None:
    x = data((2, 3, 4, 5), dtype)
    for bd in (0, 1, 2):
        for k in range(1, 4 - bd + 1):
            for extra in ((), (3,), (2, 2)):
                lead = x.shape[:bd] + extra
                idx = _nd_indices(x.shape, lead, bd, k, itype, seed=bd + k)
                check_lowering("GatherND", [x, idx], {"batch_dims": bd})


def test_gather_nd_edge_shapes() -> None:
    check_lowering("GatherND", [data((3,), F32), np.array([[2], [-3], [0]], np.int64)], {"batch_dims": 0})
    check_lowering("GatherND", [data((2, 3), F32), np.zeros((0, 2), np.int64)], {"batch_dims": 0})


def test_gather_nd_quantized() -> None:
    idx = np.array([[1, 0], [0, -1]], np.int64)
    check_lowering_typed("GatherND", [quantized((2, 3, 2)), (idx, TensorType.of(idx))], {"batch_dims": 0})


def test_gather_nd_out_of_range_fails() -> None:
    x = data((2, 3, 4), F32)
    for idx in ([[0, 4]], [[0, -5]], [[2, 0]], [[-3, 0]], [[1, 3], [0, 9]]):
        both_fail("GatherND", [x, np.array(idx, np.int64)], {"batch_dims": 0})
    both_fail("GatherND", [x, np.array([[3], [0]], np.int64)], {"batch_dims": 1})
    both_fail("GatherND", [data((2, 0, 3), F32), np.zeros((2, 4, 1), np.int64)], {"batch_dims": 1})


# -- ScatterElements -----------------------------------------------------------------------------------

REDUCTIONS = ["none", "add", "mul", "max", "min"]


def _unique_indices(ishape: Sequence[int], axis: int, dim: int, itype: np.dtype, seed: int) -> np.ndarray:
    """Indices without duplicates along axis (for 'none', where duplicates make the order matter)."""
    rng = np.random.default_rng(seed)
    out = np.empty(ishape, np.int64)
    moved = np.moveaxis(out, axis, -1)
    for pos in np.ndindex(moved.shape[:-1]):
        moved[pos] = rng.permutation(dim)[: moved.shape[-1]] - rng.integers(0, 2) * dim
    return out.astype(itype)


#: (reduction, data dtype): the reductions are defined for numeric data only
SCATTER_CASES = [pytest.param(r, d, id=f"{r}-{d}") for r in REDUCTIONS for d in (F32, F16, I8, U8, I64, BOOL)
                 if r == "none" or d != BOOL]


@pytest.mark.parametrize("itype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("reduction,dtype", SCATTER_CASES)
def test_scatter_elements(reduction: str, dtype: np.dtype, itype: np.dtype) -> None:
    x = data((3, 4, 5), dtype)
    for axis in range(3):
        ishape = tuple(2 if a != axis else 3 for a in range(3))
        if reduction == "none":
            idx = _unique_indices(ishape, axis, x.shape[axis], itype, seed=axis)
        else:
            idx = indices(ishape, x.shape[axis], itype, seed=axis)  # duplicates accumulate
        upd = data(ishape, dtype, seed=7)
        check_lowering("ScatterElements", [x, idx, upd], {"axis": axis, "reduction": reduction})


def test_scatter_elements_duplicates_last_write_wins() -> None:
    x = np.zeros((2, 3), np.float32)
    idx = np.array([[1, 1, -2]], np.int64)  # three writes to [0, 1]
    upd = np.array([[1, 2, 3]], np.float32)
    got = check_lowering("ScatterElements", [x, idx, upd], {"axis": 1, "reduction": "none"})[0]
    assert got[0, 1] == 3


def test_scatter_elements_out_of_range_fails() -> None:
    x = data((2, 3), F32)
    for bad in (3, -4):
        both_fail("ScatterElements", [x, np.array([[0, bad]], np.int64), data((1, 2), F32)],
                  {"axis": 1, "reduction": "none"})


def test_scatter_elements_is_scatter_nd() -> None:
    kinds = lowered_kinds("ScatterElements", [data((3, 4), F32), np.array([[1], [2]], np.int32), data((2, 1), F32)],
                          {"axis": 1, "reduction": "add"})
    assert "ScatterND" in kinds and kinds <= {"ScatterND", "Concat", "Reshape", "Cast"}


# -- TensorScatter -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16, I8, I64, BOOL], ids=str)
@pytest.mark.parametrize("circular", [False, True])
def test_tensor_scatter(circular: bool, dtype: np.dtype) -> None:
    for pshape, axis, seq in (((2, 6, 3), 1, 2), ((3, 2, 5, 4), 2, 3), ((2, 3, 4, 5), 3, 1), ((1, 4), 1, 4)):
        past = data(pshape, dtype)
        ushape = list(pshape)
        ushape[axis] = seq
        upd = data(ushape, dtype, seed=3)
        cap = pshape[axis]
        starts = [np.zeros(pshape[0], np.int64), np.arange(pshape[0], dtype=np.int64) % (cap - seq + 1)]
        if circular:
            starts.append(np.full(pshape[0], cap - 1, np.int64))  # wraps around
        attrs = {"axis": axis, "circular": circular}
        check_lowering("TensorScatter", [past, upd, None], attrs)
        for write in starts:
            check_lowering("TensorScatter", [past, upd, write], attrs)


def test_tensor_scatter_past_the_end_fails() -> None:
    past, upd = data((2, 4, 3), F32), data((2, 2, 3), F32)
    for write in ([3, 0], [0, -1], [5, 1]):
        both_fail("TensorScatter", [past, upd, np.array(write, np.int64)], {"axis": 1, "circular": False})


def test_tensor_scatter_quantized_is_declined() -> None:
    past, ptype = quantized((2, 4, 3))
    upd, utype = quantized((2, 1, 3), seed=1)
    write = np.array([1, 3], np.int64)
    operands = [(past, ptype), (upd, utype), (write, TensorType.of(write))]
    attrs = {"axis": 1, "circular": False}
    run_typed("TensorScatter", operands, attrs, "interpreter")
    with pytest.raises(UnsupportedError, match="TensorScatter"):
        run_typed("TensorScatter", operands, attrs, "interpreter-primitives")


# -- OneHot --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("vtype", [F32, I64, I8, BOOL, BF16], ids=str)
@pytest.mark.parametrize("itype", [I64, I32, I8, U8, U64, F32, F16, F64, BF16], ids=str)
def test_one_hot(itype: np.dtype, vtype: np.dtype) -> None:
    depth = 5
    raw = [[0, 4, -1, -5], [5, -6, 2, 3]]  # 5 and -6 are out of range: a row of off values
    if itype.kind == "u":
        raw = [[0, 4, 1, 200], [5, 6, 2, 3]]
    idx = np.array(raw, itype)
    values = np.array([False, True], vtype) if vtype == BOOL else np.array([2, 7], vtype)
    for axis in (0, 1, 2):
        check_lowering("OneHot", [idx, values], {"depth": depth, "axis": axis})
    check_lowering("OneHot", [idx, values], {"depth": 0, "axis": 1})
    check_lowering("OneHot", [np.array(3, itype), values], {"depth": depth, "axis": 0})


def test_one_hot_fractional_and_nan_indices() -> None:
    values = np.array([0, 1], np.float32)
    idx = np.array([1.5, np.nan, -0.5, 2.0, -3.0], np.float32)
    got = check_lowering("OneHot", [idx, values], {"depth": 4, "axis": 1})[0]
    np.testing.assert_array_equal(got.sum(axis=1), [0, 0, 0, 1, 1])  # float indices match only when integral
    got = check_lowering("OneHot", [idx.astype(BF16), values], {"depth": 4, "axis": 1})[0]
    np.testing.assert_array_equal(got.argmax(axis=1)[[0, 2, 3, 4]], [1, 0, 2, 1])  # bfloat16 ones truncate


# -- ReverseSequence -----------------------------------------------------------------------------------

@pytest.mark.parametrize("ltype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("time_axis", [0, 1])
def test_reverse_sequence(time_axis: int, dtype: np.dtype, ltype: np.dtype) -> None:
    steps, batch = 5, 4
    for rest in ((), (3,), (2, 2)):
        shape = ((steps, batch) if time_axis == 0 else (batch, steps)) + rest
        lens = np.array([0, 1, 5, 3], ltype)
        check_lowering("ReverseSequence", [data(shape, dtype), lens], {"time_axis": time_axis,
                                                                         "batch_axis": 1 - time_axis})


def test_reverse_sequence_bad_lengths_fail() -> None:
    x = data((4, 2, 3), F32)
    for lens in ([5, 1], [-1, 2]):
        both_fail("ReverseSequence", [x, np.array(lens, np.int64)], {"time_axis": 0, "batch_axis": 1})


def test_reverse_sequence_quantized() -> None:
    lens = np.array([2, 3], np.int32)
    check_lowering_typed("ReverseSequence", [quantized((2, 3, 2)), (lens, TensorType.of(lens))],
                         {"time_axis": 1, "batch_axis": 0})
