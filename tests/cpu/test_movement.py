"""Data movement, indexing, reductions and softmax on the cpu backend against the interpreter."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from glow_core.ir.types import ElemKind
from tests.cpu.util import check, rand

E = ElemKind
DTYPES = [np.float32, np.int64, np.int8, np.bool_, np.float16, ml_dtypes.bfloat16, np.float64]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,perm", [
    ((2, 3, 4), (2, 0, 1)), ((37, 53), (1, 0)), ((1, 64, 7, 7), (0, 2, 3, 1)), ((2, 4, 8, 3, 3), (0, 2, 1, 3, 4)),
    ((5,), (0,)), ((3, 1, 40, 17), (3, 2, 1, 0)),
])
def test_transpose(shape, perm, dtype) -> None:  # type: ignore[no-untyped-def]
    check("Transpose", [rand(shape, dtype, np.random.default_rng(0))], {"perm": perm})


def test_transpose_large_tiled_over_threads() -> None:
    x = rand((3, 200, 190), np.float32, np.random.default_rng(1))
    for threads in (1, 2):
        check("Transpose", [x], {"perm": (0, 2, 1)}, threads=threads, parallel_threshold=0)


@pytest.mark.parametrize("starts,sizes,steps", [
    ((0, 1, 0), (2, 2, 5), (1, 1, 1)), ((1, 0, 4), (1, 3, 2), (1, 1, -2)), ((0, 0, 1), (2, 3, 2), (1, 1, 2)),
    ((1, 2, 0), (1, 1, 5), (1, 1, 1)), ((0, 0, 0), (0, 3, 5), (1, 1, 1)),
])
def test_slice(starts, sizes, steps) -> None:  # type: ignore[no-untyped-def]
    check("Slice", [rand((2, 3, 5), np.float32, np.random.default_rng(2))],
          {"starts": starts, "sizes": sizes, "steps": steps})


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_concat(axis: int) -> None:
    rng = np.random.default_rng(3)
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for k, s in enumerate(shapes):
        s[axis] = k + 1
    check("Concat", [rand(s, np.float32, rng) for s in shapes], {"axis": axis})
    check("Concat", [rand(s, np.int8, rng) for s in shapes], {"axis": axis})


def test_broadcast_and_tile() -> None:
    rng = np.random.default_rng(4)
    check("Broadcast", [rand((3, 1, 5), np.float32, rng)], {"shape": (2, 3, 4, 5)})
    check("Broadcast", [rand((1,), np.bool_, rng)], {"shape": (7, 3)})
    check("Tile", [rand((2, 3), np.int32, rng)], {"repeats": (2, 3)})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad(mode: str) -> None:
    rng = np.random.default_rng(5)
    attrs = {"pads": (1, 0, 2, 2, 3, 1), "mode": mode, "value": np.array(1.5)}
    check("Pad", [rand((3, 4, 5), np.float32, rng)], attrs)
    check("Pad", [rand((3, 4, 5), np.int64, rng)], dict(attrs, value=np.array(7)))


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_gather(axis: int) -> None:
    rng = np.random.default_rng(6)
    x = rand((4, 5, 6), np.float32, rng)
    idx = np.array([[0, -1], [2, 3]], np.int64)
    check("Gather", [x, idx], {"axis": axis})
    check("Gather", [x.astype(np.int8), idx.astype(np.int32)], {"axis": axis})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(reduction: str) -> None:
    rng = np.random.default_rng(7)
    data = rand((4, 4, 4), np.float32, rng)
    idx = np.array([[0], [2], [0]], np.int64) if reduction != "none" else np.array([[0], [2]], np.int64)
    upd = rand((idx.shape[0], 4, 4), np.float32, rng)
    check("ScatterND", [data, idx, upd], {"reduction": reduction})
    check("ScatterND", [data, np.array([[1, 2], [3, -1]], np.int64), rand((2, 4), np.float32, rng)],
          {"reduction": reduction})


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64], ids=lambda d: np.dtype(d).name)
def test_topk(largest: bool, dtype) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(8)
    x = rand((3, 20, 4), dtype, rng, low=-3, high=3)  # many ties
    if np.dtype(dtype).kind == "f":
        x[0, 3, 1] = np.nan
    for axis in (0, 1, 2):
        k = min(5, x.shape[axis])
        check("TopK", [x], {"k": k, "axis": axis, "largest": largest})


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int64, np.uint8, np.float64],
                         ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("axes", [(0,), (1,), (2,), (0, 2), (1, 2), (0, 1, 2)])
@pytest.mark.parametrize("kind", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"])
def test_reductions(kind: str, axes, dtype) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(9)
    low, high = (0.5, 1.5) if kind == "ReduceProd" else (-3, 3)
    if np.dtype(dtype).kind in "iu":
        low, high = (1, 2) if kind == "ReduceProd" else (0, 9)
    x = rand((5, 19, 33), dtype, rng, low=low, high=high)
    for keep in (True, False):
        check(kind, [x], {"axes": axes, "keepdims": keep})


def test_reductions_large_and_threaded() -> None:
    x = rand((8, 129, 70), np.float32, np.random.default_rng(10))
    for axes in ((2,), (1,), (0, 2)):
        check("ReduceSum", [x], {"axes": axes, "keepdims": True}, threads=2, parallel_threshold=0)
        check("ReduceMax", [x], {"axes": axes, "keepdims": False}, threads=2, parallel_threshold=0)


def test_reduce_max_propagates_nan_and_bool() -> None:
    x = rand((3, 40), np.float32, np.random.default_rng(11))
    x[1, 17] = np.nan
    check("ReduceMax", [x], {"axes": (1,), "keepdims": True})
    check("ReduceMin", [x], {"axes": (1,), "keepdims": True})
    b = rand((4, 9), np.bool_, np.random.default_rng(12))
    check("ReduceMax", [b], {"axes": (1,), "keepdims": False})


@pytest.mark.parametrize("kind", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [False, True])
def test_arg_reductions(kind: str, last: bool) -> None:
    rng = np.random.default_rng(13)
    x = rand((4, 11, 6), np.int32, rng, low=0, high=3).astype(np.float32)  # ties
    x[2, 5, 1] = np.nan
    for axis in (0, 1, 2):
        check(kind, [x], {"axis": axis, "keepdims": True, "select_last_index": last})
    check(kind, [np.nan_to_num(x).astype(np.int64)], {"axis": 1, "keepdims": False, "select_last_index": last})


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,axes", [((2, 1000), (1,)), ((1, 1000, 1, 1), (1,)), ((3, 4, 37), (1, 2)),
                                        ((5, 17), (1,))])
def test_softmax_native(shape, axes, dtype) -> None:  # type: ignore[no-untyped-def]
    x = rand(shape, dtype, np.random.default_rng(14), low=-10, high=10)
    check("Softmax", [x], {"axes": axes})


def test_softmax_on_a_middle_axis_is_lowered_and_matches() -> None:
    check("Softmax", [rand((3, 7, 5), np.float32, np.random.default_rng(15))], {"axes": (1,)})
