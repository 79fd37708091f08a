"""The Resize kernel: separable resampling, one axis at a time.

For each resized axis, every output position gets a source coordinate from the
coordinate transform, then a small set of taps (input indices, clamped to the
axis as edge padding) with weights: 1 tap for nearest, 2 for linear, 4 for
cubic, more with antialias. The result along the axis is the weighted sum of
the gathered taps (nearest is a pure gather). Arithmetic is float64; the result
is cast back to the input's element kind.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from glow_backend_interpreter.kernels import KERNELS
from glow_core.ir.defs.movement_resize import nearest_indices, outside, source_coordinates
from glow_core.ir.types import TensorType

Attrs = Mapping[str, Any]
Types = Sequence[TensorType]
def _cubic(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel at distances d."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _filter_taps(ratio: np.ndarray, scale: float, attrs: Attrs) -> tuple[np.ndarray, np.ndarray]:
    """Tap offsets (from the left neighbour) and weights for linear/cubic, per output position.

    ``ratio`` in (0, 1] is the distance of the source coordinate from its left
    neighbour. Antialias stretches the filter by 1/scale when downscaling and
    normalizes the weights.
    """
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


def _resize_axis(x: np.ndarray, axis: int, n_out: int, scale: float, roi: tuple[float, float],
                 attrs: Attrs) -> np.ndarray:
    n_in = x.shape[axis]
    coord = attrs["coordinate_transformation_mode"]
    src = source_coordinates(coord, n_in, n_out, scale, roi)
    if attrs["mode"] == "nearest":
        res = np.take(x, nearest_indices(src, attrs["nearest_mode"], n_in).astype(np.intp), axis=axis)
    else:
        left = np.ceil(src) - 1  # the ratio src - left lies in (0, 1]
        offsets, weights = _filter_taps(src - left, scale, attrs)
        taps = left.astype(np.int64)[:, None] + offsets[None, :]
        if attrs["exclude_outside"]:
            weights = np.where((taps < 0) | (taps >= n_in), 0.0, weights)
            total = weights.sum(axis=1, keepdims=True)
            weights = weights / np.where(total == 0, 1.0, total)
        gathered = np.take(x, np.clip(taps, 0, n_in - 1).astype(np.intp), axis=axis)
        shape = (1,) * axis + weights.shape + (1,) * (x.ndim - axis - 1)
        res = (gathered * weights.reshape(shape)).sum(axis=axis + 1)
    if coord == "tf_crop_and_resize":
        mask = outside(src, n_in).reshape((1,) * axis + (n_out,) + (1,) * (x.ndim - axis - 1))
        res = np.where(mask, np.asarray(attrs["extrapolation_value"], res.dtype), res)
    return res


def _is_identity(n_in: int, n_out: int, scale: float, roi: tuple[float, float], attrs: Attrs) -> bool:
    coord = attrs["coordinate_transformation_mode"]
    return (n_in == n_out and scale == 1.0 and coord != "tf_half_pixel_for_nn"
            and (coord != "tf_crop_and_resize" or roi == (0.0, 1.0)))


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
        if _is_identity(res.shape[axis], sizes[axis], scales[axis], box, attrs):
            continue
        res = _resize_axis(res, axis, sizes[axis], scales[axis], box, attrs)
    return np.asarray(res).astype(out[0].dtype)
