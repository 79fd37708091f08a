"""The Resize kernel: separable resampling, one axis at a time.

For each resized axis, every output position gets a source coordinate from the
coordinate transform, then a small set of taps (input indices, clamped to the
axis as edge padding) with weights: 1 tap for nearest, 2 for linear, 4 for
cubic, more with antialias. The result along the axis is the weighted sum of
the gathered taps (nearest is a pure gather). Arithmetic is float64; the result
is cast back to the input's element kind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from glow_core.ir.defs.movement_resize import (
    interpolation_table,
    is_identity,
    nearest_indices,
    outside,
    source_coordinates,
)
from glow_core.ir.types import TensorType
from glow_core.reference.kernels import KERNELS

Attrs = Mapping[str, Any]
Types = Sequence[TensorType]
def _resize_axis(x: np.ndarray, axis: int, n_out: int, scale: float, roi: tuple[float, float],
                 attrs: Attrs) -> np.ndarray:
    n_in = x.shape[axis]
    coord = attrs["coordinate_transformation_mode"]
    src = source_coordinates(coord, n_in, n_out, scale, roi)
    if attrs["mode"] == "nearest":
        res = np.take(x, nearest_indices(src, attrs["nearest_mode"], n_in).astype(np.intp), axis=axis)
    else:
        taps, weights = interpolation_table(src, n_in, scale, attrs)
        gathered = np.take(x, taps.astype(np.intp), axis=axis)
        shape = (1,) * axis + weights.shape + (1,) * (x.ndim - axis - 1)
        w = weights.reshape(shape)
        res = np.where(w == 0, 0.0, gathered * w).sum(axis=axis + 1)  # a tap of weight 0 adds nothing
    if coord == "tf_crop_and_resize":
        mask = outside(src, n_in).reshape((1,) * axis + (n_out,) + (1,) * (x.ndim - axis - 1))
        res = np.where(mask, np.asarray(attrs["extrapolation_value"], res.dtype), res)
    return res


@KERNELS.register("Resize")
def _resize(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    sizes, scales, roi = attrs["sizes"], attrs["scales"], attrs["roi"]
    r = x.ndim
    nearest = attrs["mode"] == "nearest"
    res = x if nearest else x.astype(np.float64)
    if nearest and attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        res = x.astype(np.float64) if x.dtype.kind == "f" else x
    for axis in range(r):
        box = (roi[axis], roi[axis + r]) if roi else (0.0, 1.0)
        if is_identity(res.shape[axis], sizes[axis], scales[axis], box, attrs):
            continue
        res = _resize_axis(res, axis, sizes[axis], scales[axis], box, attrs)
    return np.asarray(res).astype(out[0].dtype)
