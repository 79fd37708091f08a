"""Lowering of the data-movement kinds (Split, Tile, DepthToSpace, SpaceToDepth, Trilu).

Same harness as test_reduce: each node runs natively on ``interpreter`` and
lowered on ``interpreter-primitives``; results must be bit-exact (these rules
only move elements) and the lowered function must hold primitive kinds only.
Quantized operands go through :func:`check_lowering_typed`, which declares the
input types itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from glow_core.pipeline import check_support, compile_options, prepare_function
from glow_core.ir.graph import Function
from glow_core.ir.types import ElemKind, TensorType
from glow_core.plugin_host import get_backend
from tests.lowering.test_reduce import (
    BF16,
    F16,
    F32,
    F64,
    I8,
    I32,
    I64,
    U8,
    U64,
    assert_primitive_only,
    check_lowering,
    rand,
    run,
)

BOOL = np.dtype(np.bool_)
MOVE_DTYPES = [F32, F16, BF16, F64, I8, U8, I32, I64, U64, BOOL]


def data(shape: Sequence[int], dtype: np.dtype, seed: int = 0) -> np.ndarray:
    """Distinct-ish values of any dtype (bools alternate), so a misplaced element shows."""
    if dtype == BOOL:
        return rand(shape, I8, 0, 1, seed).astype(BOOL)
    return rand(shape, dtype, -100 if dtype.kind != "u" else 0, 100, seed)


def lowered_kinds(kind: str, operands: Sequence[np.ndarray | None], attrs: dict[str, Any]) -> set[str]:
    _, fn = run(kind, operands, attrs, "interpreter-primitives")
    return {n.kind.name for n in fn.nodes}


# -- quantized operands ----------------------------------------------------------------------------------

def run_typed(kind: str, operands: Sequence[tuple[np.ndarray, TensorType]], attrs: dict[str, Any],
              backend: str) -> tuple[list[np.ndarray], Function]:
    """Like ``run`` with explicit input types (for quantized kinds, which numpy dtypes cannot express)."""
    fn = Function("main")
    values = [fn.add_input(f"in{i}", t) for i, (_, t) in enumerate(operands)]
    node = fn.create(kind, values, attrs, name=kind.lower())
    for i, out in enumerate(node.outputs):
        fn.set_output(f"out{i}", out)
    be = get_backend(backend)
    prepare_function(fn, be, debug=True)
    check_support(fn, be)  # the element kinds too: quantized operands must reach primitives that take them
    out = be.compile(fn, compile_options()).execute({f"in{i}": a for i, (a, _) in enumerate(operands)})
    return [out[f"out{i}"] for i in range(len(node.outputs))], fn


def check_lowering_typed(kind: str, operands: Sequence[tuple[np.ndarray, TensorType]],
                         attrs: dict[str, Any]) -> list[np.ndarray]:
    want, native = run_typed(kind, operands, attrs, "interpreter")
    assert native.nodes_of(kind)
    got, lowered = run_typed(kind, operands, attrs, "interpreter-primitives")
    assert_primitive_only(lowered)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    return got


def quantized(shape: Sequence[int], seed: int = 0) -> tuple[np.ndarray, TensorType]:
    return rand(shape, I8, -128, 127, seed), TensorType(ElemKind.INT8Q, tuple(shape), 0.5, 3)


# -- Split ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", MOVE_DTYPES, ids=str)
def test_split(dtype: np.dtype) -> None:
    x = data((4, 6, 3), dtype)
    for axis, splits in ((0, (1, 3)), (1, (2, 2, 2)), (1, (0, 6, 0)), (2, (1, 1, 1)), (1, (5, 1))):
        check_lowering("Split", [x], {"axis": axis, "splits": splits})


def test_split_is_slices() -> None:
    assert lowered_kinds("Split", [data((4, 6), F32)], {"axis": 1, "splits": (2, 4)}) == {"Slice"}


def test_split_quantized() -> None:
    check_lowering_typed("Split", [quantized((3, 5))], {"axis": 1, "splits": (2, 3)})


# -- Tile ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", MOVE_DTYPES, ids=str)
def test_tile(dtype: np.dtype) -> None:
    for shape, repeats in (((3,), (4,)), ((2, 3), (2, 3)), ((2, 3), (1, 2)), ((2, 1, 3), (3, 4, 1)),
                           ((2, 3), (0, 2)), ((0, 3), (2, 2)), ((1, 2, 2, 3), (2, 1, 3, 2))):
        check_lowering("Tile", [data(shape, dtype)], {"repeats": repeats})


def test_tile_is_reshape_broadcast_reshape() -> None:
    assert lowered_kinds("Tile", [data((2, 3), F32)], {"repeats": (2, 3)}) == {"Reshape", "Broadcast"}


def test_tile_of_a_scalar_is_a_copy() -> None:
    x = np.array(7.5, np.float32)
    got, fn = run("Tile", [x], {"repeats": ()}, "interpreter-primitives")
    assert_primitive_only(fn)
    assert got[0].shape == () and got[0] == 7.5


def test_tile_quantized() -> None:
    check_lowering_typed("Tile", [quantized((2, 3))], {"repeats": (2, 2)})


# -- DepthToSpace / SpaceToDepth ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16, I64, U8, BOOL], ids=str)
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space(mode: str, dtype: np.dtype) -> None:
    for shape, blk in (((1, 8, 2, 3), 2), ((2, 18, 3, 2), 3), ((1, 3, 2, 2), 1), ((2, 4, 1, 1), 2)):
        check_lowering("DepthToSpace", [data(shape, dtype)], {"blocksize": blk, "mode": mode})


@pytest.mark.parametrize("dtype", [F32, F16, I64, U8, BOOL], ids=str)
def test_space_to_depth(dtype: np.dtype) -> None:
    for shape, blk in (((1, 2, 4, 6), 2), ((2, 3, 6, 3), 3), ((1, 3, 2, 2), 1), ((1, 1, 2, 2), 2)):
        check_lowering("SpaceToDepth", [data(shape, dtype)], {"blocksize": blk})


def test_space_to_depth_inverts_depth_to_space_dcr() -> None:
    x = data((1, 8, 3, 2), F32)
    d2s, _ = run("DepthToSpace", [x], {"blocksize": 2, "mode": "DCR"}, "interpreter-primitives")
    back, _ = run("SpaceToDepth", [d2s[0]], {"blocksize": 2}, "interpreter-primitives")
    np.testing.assert_array_equal(back[0], x)


def test_depth_space_lowered_kinds() -> None:
    kinds = lowered_kinds("DepthToSpace", [data((1, 8, 2, 3), F32)], {"blocksize": 2, "mode": "CRD"})
    assert kinds == {"Reshape", "Transpose"}
    assert lowered_kinds("SpaceToDepth", [data((1, 2, 4, 6), F32)], {"blocksize": 2}) == {"Reshape", "Transpose"}


def test_depth_to_space_quantized() -> None:
    check_lowering_typed("DepthToSpace", [quantized((1, 8, 2, 2))], {"blocksize": 2, "mode": "DCR"})
    check_lowering_typed("SpaceToDepth", [quantized((1, 2, 4, 4))], {"blocksize": 2})


# -- Trilu ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", MOVE_DTYPES, ids=str)
@pytest.mark.parametrize("upper", [True, False])
def test_trilu(upper: bool, dtype: np.dtype) -> None:
    for shape in ((4, 5), (5, 3), (2, 3, 4), (2, 1, 3, 3), (1, 1), (0, 3), (3, 0)):
        x = data(shape, dtype)
        for k in (-7, -2, -1, 0, 1, 3, 9):
            check_lowering("Trilu", [x], {"upper": upper, "k": k})


def test_trilu_keeps_nan_and_lowered_kinds() -> None:
    x = np.full((3, 3), np.nan, np.float32)
    got = check_lowering("Trilu", [x], {"upper": True, "k": 0})[0]
    assert np.isnan(got[np.triu_indices(3)]).all() and (got[np.tril_indices(3, -1)] == 0).all()
    assert lowered_kinds("Trilu", [x], {"upper": False, "k": 1}) == {"Where"}
