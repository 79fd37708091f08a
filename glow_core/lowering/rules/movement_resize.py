"""Lowering of Resize (``glow_core.ir.defs.movement_resize``): one Gather (+ weights) per resized axis.

In: a Resize node of any mode (nearest, linear, cubic; exclude_outside,
antialias, every coordinate transform including tf_crop_and_resize with its
extrapolation value). Out: Gather, Mul, ReduceSum, Where and Cast primitives
with compile-time constants.

The interpolation is separable, so the rule resizes one axis at a time as the
interpreter kernel does. For each axis it computes at compile time, in the
kernel's float64 arithmetic (the coordinate transform of the kind's module and
the same tap / weight formulas), the table of source indices of every output
position:

- nearest: one index per position -> ``Gather(x, table, axis)``, bit-exact;
- linear / cubic (antialias widens the window): T clamped tap indices and T
  weights per position -> ``ReduceSum(Gather(x, taps, axis) * weights, axis + 1)``.
  A tap of weight 0 adds nothing to the weighted average (the spec: "a weighted
  average of neighborhood"), so an infinity or a NaN there does not reach the
  output (``0 * inf`` would give NaN); the kernel does the same.

tf_crop_and_resize positions whose source lies outside the input take the
extrapolation value: ``Where(constant mask, value, resized)`` after that axis,
as in the kernel. Linear and cubic compute in float32 (float64 for float64
input; the kernel uses float64 throughout) and cast back once at the end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from glow_core.ir.defs.movement_resize import (
    interpolation_table,
    is_identity,
    nearest_indices,
    outside,
    source_coordinates,
)
from glow_core.ir.graph import Node, Value
from glow_core.ir.types import ElemKind
from glow_core.lowering.builder import Builder
from glow_core.lowering.table import lowering

Attrs = Mapping[str, Any]


# -- compile-time tables (the kernel's arithmetic) ---------------------------------------------------------

def _compute_kind(elem: ElemKind) -> ElemKind:
    return ElemKind.FLOAT64 if elem == ElemKind.FLOAT64 else ElemKind.FLOAT32


# -- the rule -----------------------------------------------------------------------------------------

def _resize_axis(b: Builder, x: Value, axis: int, n_out: int, scale: float, roi: tuple[float, float],
                 attrs: Attrs) -> Value | None:
    n_in = x.type.shape[axis]
    rank = x.type.rank
    coord = attrs["coordinate_transformation_mode"]
    src = source_coordinates(coord, n_in, n_out, scale, roi)
    if attrs["mode"] == "nearest":
        res = b.emit1("Gather", [x, b.const(nearest_indices(src, attrs["nearest_mode"], n_in))], axis=axis)
    else:
        taps, weights = interpolation_table(src, n_in, scale, attrs)
        gathered = b.emit1("Gather", [x, b.const(taps)], axis=axis)  # pre + [n_out, T] + post
        w = weights.astype(x.type.dtype).reshape((1,) * axis + weights.shape + (1,) * (rank - axis - 1))
        prod = b.mul(gathered, b.const(w))
        if not w.all():  # a tap of weight 0 adds nothing (not 0 * inf = NaN)
            prod = b.where(b.const(w == 0), b.const(np.zeros((), w.dtype)), prod)
        res = b.reduce("ReduceSum", prod, (axis + 1,), keepdims=False)
    if coord == "tf_crop_and_resize":
        value = _extrapolation_value(attrs, x.type.dtype)
        if value is None:
            return None
        mask = outside(src, n_in).reshape((1,) * axis + (n_out,) + (1,) * (rank - axis - 1))
        if mask.any():
            res = b.where(b.const(mask), b.const(value), res)
    return res


def _extrapolation_value(attrs: Attrs, dtype: np.dtype) -> np.ndarray | None:
    """The extrapolation value converted as the kernel converts it, or None where that conversion fails."""
    try:
        return np.asarray(attrs["extrapolation_value"], dtype)
    except (OverflowError, ValueError):
        return None


@lowering("Resize")
def _resize(b: Builder, node: Node) -> list[Value] | None:
    attrs = node.attrs
    x = b.input(0)
    sizes, scales, roi = attrs["sizes"], attrs["scales"], attrs["roi"]
    rank = x.type.rank
    out_elem = b.out_type().elem
    if attrs["mode"] == "nearest":
        res = x  # a pure gather (the kernel's float64 detour for tf_crop_and_resize changes no value)
    else:
        res = b.cast(x, _compute_kind(x.type.elem))
    for axis in range(rank):
        box = (roi[axis], roi[axis + rank]) if roi else (0.0, 1.0)
        if is_identity(res.type.shape[axis], sizes[axis], scales[axis], box, attrs):
            continue
        resized = _resize_axis(b, res, axis, int(sizes[axis]), float(scales[axis]), box, attrs)
        if resized is None:
            # an extrapolation value the data's kind cannot hold (say -1 for uint8): the kernel
            # fails at run time on it, there is no result to reproduce
            return None
        res = resized
    return [b.cast(res, out_elem)]
