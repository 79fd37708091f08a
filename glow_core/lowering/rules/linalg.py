"""Lowering of Det (``glow_core.ir.defs.linalg``) onto primitives: Gaussian elimination with partial pivoting.

The M elimination steps are unrolled (M is static), in float64, on a batch of
trailing submatrices: each step picks the largest remaining |entry| of the
pivot column (ArgMax; first index on ties, as LAPACK), swaps it into place with
Where (exact), multiplies the pivot into the determinant and flips the sign on
a swap, then eliminates below it. A zero pivot (a singular matrix) gives 0; the
division uses 1 in its place so no NaN reaches later steps.
"""

from __future__ import annotations

import numpy as np

from glow_core.ir.graph import Node, Value
from glow_core.ir.types import ElemKind
from glow_core.lowering.builder import Builder
from glow_core.lowering.rules.nn import slice_nd
from glow_core.lowering.table import lowering

F64 = ElemKind.FLOAT64
#: largest M unrolled (each step is ~20 nodes); larger matrices are left to a backend that runs Det natively
MAX_UNROLLED = 64


def _block(b: Builder, a: Value, row: int, rows: int, col: int, cols: int) -> Value:
    r = a.type.rank
    starts = [0] * (r - 2) + [row, col]
    sizes = list(a.type.shape[:-2]) + [rows, cols]
    return slice_nd(b, a, starts, sizes)


def _step(b: Builder, a: Value, det: Value) -> tuple[Value, Value]:
    """One elimination step on the [..., m, m] trailing matrix; returns (next [..., m-1, m-1], det)."""
    m = a.type.shape[-1]
    batch = a.type.shape[:-2]
    r = a.type.rank
    col = _block(b, a, 0, m, 0, 1)                                          # [..., m, 1]
    p = b.emit1("ArgMax", [b.unary("Abs", col)], axis=r - 2, keepdims=True)  # [..., 1, 1]
    rows = b.const(np.arange(m, dtype=np.int64).reshape((1,) * (r - 2) + (m, 1)))
    is_p = b.binary("Equal", rows, p)                                        # [..., m, 1]
    first = b.const(np.arange(m).reshape((1,) * (r - 2) + (m, 1)) == 0)
    row0 = _block(b, a, 0, 1, 0, m)
    pivot_row = b.reduce("ReduceSum", b.where(is_p, a, b.scalar(0, F64, r)), [r - 2])  # exact: one term
    swapped = b.where(is_p, b.broadcast(row0, a.type.shape), b.where(first, b.broadcast(pivot_row, a.type.shape), a))
    pivot = _block(b, swapped, 0, 1, 0, 1)                                   # [..., 1, 1]
    moved = b.binary("Equal", p, b.scalar(0, ElemKind.INT64, r))
    signed = b.where(moved, pivot, b.unary("Neg", pivot))
    det = b.mul(det, b.reshape(signed, batch))
    if m == 1:
        return swapped, det
    zero = b.binary("Equal", pivot, b.scalar(0, F64, r))
    safe = b.where(zero, b.scalar(1, F64, r), pivot)
    factor = b.div(_block(b, swapped, 1, m - 1, 0, 1), safe)                 # [..., m-1, 1]
    rest = b.sub(_block(b, swapped, 1, m - 1, 1, m - 1), b.mul(factor, _block(b, swapped, 0, 1, 1, m - 1)))
    return rest, det


@lowering("Det")
def _det(b: Builder, node: Node) -> list[Value] | None:
    x = b.input(0)
    out = b.out_type()
    m = x.type.shape[-1]
    if m > MAX_UNROLLED:
        return None
    det: Value = b.broadcast(b.scalar(1, F64, len(out.shape)), out.shape)
    a = b.cast(x, F64)
    for _ in range(m):
        a, det = _step(b, a, det)
    return [b.cast(det, out.elem)]
