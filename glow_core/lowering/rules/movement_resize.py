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
  Every tap the kernel reads is read (zero weights included), so infinities and
  NaNs propagate alike.

tf_crop_and_resize positions whose source lies outside the input take the
extrapolation value: ``Where(constant mask, value, resized)`` after that axis,
as in the kernel. Linear and cubic compute in float32 (float64 for float64
input; the kernel uses float64 throughout) and cast back once at the end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from glow_core.ir.defs.movement_resize import nearest_indices, outside, source_coordinates
from glow_core.ir.graph import Node, Value
from glow_core.ir.types import ElemKind
from glow_core.lowering.builder import Builder
from glow_core.lowering.table import lowering

Attrs = Mapping[str, Any]


# -- compile-time tables (the kernel's arithmetic) ---------------------------------------------------------

def _cubic(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel at distances d."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _filter_taps(ratio: np.ndarray, scale: float, attrs: Attrs) -> tuple[np.ndarray, np.ndarray]:
    """Tap offsets (from the left neighbour) and weights for linear/cubic, per output position."""
    cubic = attrs["mode"] == "cubic"
    support = 2.0 if cubic else 1.0
    s = min(scale, 1.0) if attrs["antialias"] else 1.0
    start = int(np.floor(-support / s)) + 1
    offsets = np.arange(start, 2 - start)  # symmetric window around the source coordinate
    dist = (offsets[None, :] - ratio[:, None]) * s
    if cubic:
        weights = _cubic(dist, float(attrs["cubic_coeff_a"]))
    else:
        weights = np.clip(1 - np.abs(dist), 0.0, 1.0)
    if attrs["antialias"]:
        weights = weights / weights.sum(axis=1, keepdims=True)
    return offsets, weights


def interpolation_table(src: np.ndarray, n_in: int, scale: float, attrs: Attrs) -> tuple[np.ndarray, np.ndarray]:
    """Clamped tap indices [n_out, T] (int64) and their float64 weights [n_out, T] along one axis."""
    left = np.ceil(src) - 1  # the ratio src - left lies in (0, 1]
    offsets, weights = _filter_taps(src - left, scale, attrs)
    taps = left.astype(np.int64)[:, None] + offsets[None, :]
    if attrs["exclude_outside"]:
        weights = np.where((taps < 0) | (taps >= n_in), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(taps, 0, n_in - 1).astype(np.int64), weights


def _is_identity(n_in: int, n_out: int, scale: float, roi: tuple[float, float], attrs: Attrs) -> bool:
    coord = attrs["coordinate_transformation_mode"]
    return (n_in == n_out and scale == 1.0 and coord != "tf_half_pixel_for_nn"
            and (coord != "tf_crop_and_resize" or roi == (0.0, 1.0)))


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
        res = b.reduce("ReduceSum", b.mul(gathered, b.const(w)), (axis + 1,), keepdims=False)
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
        if _is_identity(res.type.shape[axis], sizes[axis], scales[axis], box, attrs):
            continue
        resized = _resize_axis(b, res, axis, int(sizes[axis]), float(scales[axis]), box, attrs)
        if resized is None:
            # an extrapolation value the data's kind cannot hold (say -1 for uint8): the kernel
            # fails at run time on it, there is no result to reproduce
            return None
        res = resized
    return [b.cast(res, out_elem)]
