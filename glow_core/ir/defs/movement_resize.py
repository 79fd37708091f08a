"""Resize: separable nearest / linear / cubic resampling (ONNX Resize and Upsample).

The importer resolves everything that decides shapes: ``sizes`` is the full
output shape, ``scales`` the per-axis scale used by the coordinate transform
(sizes / input when the model gave sizes), ``roi`` the per-axis crop box
``[start_0..start_r-1, end_0..end_r-1]`` (tf_crop_and_resize only, else empty).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from glow_core.errors import GlowTypeError
from glow_core.ir.defs.common import Attrs, Types, check_elems, req
from glow_core.ir.defs.movement import PLAIN_KINDS
from glow_core.ir.kinds import AttrType as A
from glow_core.ir.kinds import Category as C
from glow_core.ir.kinds import attr, define_kind
from glow_core.ir.types import FLOAT_KINDS, TensorType

RESIZE_MODES = ("nearest", "linear", "cubic")
COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_crop_and_resize", "tf_half_pixel_for_nn")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


# -- the coordinate transform: output position -> source coordinate ----------------
# Shared by the reference kernel (float64) and the importer, which repeats the
# computation in float32 to find configurations where rounding decides the result.

Coords = Callable[[np.ndarray, int, int, Any, tuple[Any, Any]], np.ndarray]


def _half_pixel(y: np.ndarray, n_in: int, n_out: int, scale: Any, roi: tuple[Any, Any]) -> np.ndarray:
    return (y + 0.5) / scale - 0.5


def _half_pixel_symmetric(y: np.ndarray, n_in: int, n_out: int, scale: Any, roi: tuple[Any, Any]) -> np.ndarray:
    adjustment = n_out / (scale * n_in)
    offset = n_in / 2 * (1 - adjustment)
    return offset + (y + 0.5) / scale - 0.5


def _pytorch_half_pixel(y: np.ndarray, n_in: int, n_out: int, scale: Any, roi: tuple[Any, Any]) -> np.ndarray:
    return (y + 0.5) / scale - 0.5 if n_out > 1 else np.zeros_like(y)


def _align_corners(y: np.ndarray, n_in: int, n_out: int, scale: Any, roi: tuple[Any, Any]) -> np.ndarray:
    return np.zeros_like(y) if n_out == 1 else y * (n_in - 1) / (n_out - 1)


def _asymmetric(y: np.ndarray, n_in: int, n_out: int, scale: Any, roi: tuple[Any, Any]) -> np.ndarray:
    return y / scale


def _tf_half_pixel_for_nn(y: np.ndarray, n_in: int, n_out: int, scale: Any, roi: tuple[Any, Any]) -> np.ndarray:
    return (y + 0.5) / scale


def _tf_crop_and_resize(y: np.ndarray, n_in: int, n_out: int, scale: Any, roi: tuple[Any, Any]) -> np.ndarray:
    lo, hi = roi
    if n_out == 1:
        return np.full_like(y, 0.5 * (lo + hi) * (n_in - 1))
    return lo * (n_in - 1) + y * (hi - lo) * (n_in - 1) / (n_out - 1)


COORDINATE_TRANSFORMS: dict[str, Coords] = {
    "half_pixel": _half_pixel,
    "half_pixel_symmetric": _half_pixel_symmetric,
    "pytorch_half_pixel": _pytorch_half_pixel,
    "align_corners": _align_corners,
    "asymmetric": _asymmetric,
    "tf_half_pixel_for_nn": _tf_half_pixel_for_nn,
    "tf_crop_and_resize": _tf_crop_and_resize,
}

#: nearest_mode -> (x, floor(x), x - floor(x)) -> source index (before clamping)
NEAREST_ROUNDING: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]] = {
    "round_prefer_floor": lambda x, x0, f: np.where(f <= 0.5, x0, x0 + 1),
    "round_prefer_ceil": lambda x, x0, f: np.where(f < 0.5, x0, x0 + 1),
    "floor": lambda x, x0, f: x0,
    "ceil": lambda x, x0, f: np.ceil(x),
}


def source_coordinates(coord: str, n_in: int, n_out: int, scale: float, roi: tuple[float, float],
                       dtype: Any = np.float64) -> np.ndarray:
    """Source coordinate of every output position along one axis, computed in ``dtype``."""
    dt = np.dtype(dtype).type
    y = np.arange(n_out, dtype=dtype)
    return COORDINATE_TRANSFORMS[coord](y, n_in, n_out, dt(scale), (dt(roi[0]), dt(roi[1]))).astype(dtype)


def nearest_indices(src: np.ndarray, nearest_mode: str, n_in: int) -> np.ndarray:
    """The source index nearest mode picks for each coordinate, clamped into the axis."""
    x0 = np.floor(src)
    idx = NEAREST_ROUNDING[nearest_mode](src, x0, src - x0)
    return np.clip(idx, 0, max(n_in - 1, 0)).astype(np.int64)


def outside(src: np.ndarray, n_in: int) -> np.ndarray:
    """tf_crop_and_resize: positions whose source lies outside the input (they take extrapolation_value)."""
    return (src < 0) | (src > n_in - 1)


# -- interpolation tables: the arithmetic shared by the kernel and the lowering ------------------------

def cubic_weights(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel at distances d."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def filter_taps(ratio: np.ndarray, scale: float, attrs: Attrs) -> tuple[np.ndarray, np.ndarray]:
    """Tap offsets (from the left neighbour) and weights for linear/cubic, per output position."""
    cubic = attrs["mode"] == "cubic"
    support = 2.0 if cubic else 1.0
    s = min(scale, 1.0) if attrs["antialias"] else 1.0
    start = int(np.floor(-support / s)) + 1
    offsets = np.arange(start, 2 - start)  # symmetric window around the source coordinate
    dist = (offsets[None, :] - ratio[:, None]) * s
    if cubic:
        weights = cubic_weights(dist, float(attrs["cubic_coeff_a"]))
    else:
        weights = np.clip(1 - np.abs(dist), 0.0, 1.0)
    if attrs["antialias"]:
        weights = weights / weights.sum(axis=1, keepdims=True)
    return offsets, weights


def interpolation_table(src: np.ndarray, n_in: int, scale: float, attrs: Attrs) -> tuple[np.ndarray, np.ndarray]:
    """Clamped tap indices [n_out, T] (int64) and their float64 weights [n_out, T] along one axis."""
    left = np.ceil(src) - 1  # the ratio src - left lies in (0, 1]
    offsets, weights = filter_taps(src - left, scale, attrs)
    taps = left.astype(np.int64)[:, None] + offsets[None, :]
    if attrs["exclude_outside"]:
        weights = np.where((taps < 0) | (taps >= n_in), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(taps, 0, n_in - 1).astype(np.int64), weights


def is_identity(n_in: int, n_out: int, scale: float, roi: tuple[float, float], attrs: Attrs) -> bool:
    coord = attrs["coordinate_transformation_mode"]
    return (n_in == n_out and scale == 1.0 and coord != "tf_half_pixel_for_nn"
            and (coord != "tf_crop_and_resize" or roi == (0.0, 1.0)))


def _resize(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    sizes, scales, roi = tuple(attrs["sizes"]), tuple(attrs["scales"]), tuple(attrs["roi"])
    mode, coord, nearest = str(attrs["mode"]), str(attrs["coordinate_transformation_mode"]), str(attrs["nearest_mode"])
    if len(sizes) != x.rank or len(scales) != x.rank or any(s < 0 for s in sizes) or any(s <= 0 for s in scales):
        raise GlowTypeError(f"sizes {list(sizes)} and scales {list(scales)} must give one positive entry per axis")
    if mode not in RESIZE_MODES or coord not in COORD_MODES or nearest not in NEAREST_MODES:
        raise GlowTypeError(f"unknown mode '{mode}', coordinate_transformation_mode '{coord}' or nearest_mode '{nearest}'")
    if len(roi) != (2 * x.rank if coord == "tf_crop_and_resize" else 0):
        raise GlowTypeError(f"roi has {len(roi)} entries; it takes 2 * rank for tf_crop_and_resize, none otherwise")
    if mode != "nearest":
        check_elems(x, FLOAT_KINDS, f"the input of {mode} resize")
    if attrs["antialias"] and mode == "nearest":
        raise GlowTypeError("antialias applies to linear and cubic modes only")
    if any(d == 0 for d, s in zip(x.shape, sizes) if s > 0):
        raise GlowTypeError(f"cannot resize empty axes of {x} to {list(sizes)}")
    return [x.with_shape(sizes)]


define_kind(
    "Resize", inputs=("Input",),
    attrs=(
        attr("sizes", A.INTS, doc="the full output shape"),
        attr("scales", A.FLOATS, doc="per-axis scale of the coordinate transform"),
        attr("roi", A.FLOATS, (), doc="tf_crop_and_resize box: starts then ends, normalized coordinates"),
        attr("mode", A.STRING, "nearest", doc=" / ".join(RESIZE_MODES)),
        attr("coordinate_transformation_mode", A.STRING, "half_pixel", doc=" / ".join(COORD_MODES)),
        attr("nearest_mode", A.STRING, "round_prefer_floor", doc=" / ".join(NEAREST_MODES)),
        attr("cubic_coeff_a", A.FLOAT, -0.75),
        attr("exclude_outside", A.BOOL, False, doc="zero (and renormalize) the weights of taps outside the input"),
        attr("extrapolation_value", A.FLOAT, 0.0, doc="tf_crop_and_resize: value where the source is outside"),
        attr("antialias", A.BOOL, False, doc="widen linear/cubic filters by 1/scale when downscaling"),
    ),
    infer=_resize, categories=(C.DATA_MOVEMENT,), elems=PLAIN_KINDS,
    doc="ONNX Resize, one axis at a time (the interpolation is separable).",
)
