"""Data-movement and shape kernels: Reshape, Transpose, Slice, Concat, Split, Pad, Tile, Broadcast, ..."""

from __future__ import annotations

import sys
from typing import Any, Mapping, Sequence

import numpy as np

from glow_core.errors import UnsupportedError
from glow_core.ir.types import TensorType
from glow_core.reference.kernels import KERNELS

Attrs = Mapping[str, Any]
Types = Sequence[TensorType]


@KERNELS.register("Reshape")
def _reshape(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    return np.reshape(x, out[0].shape)


@KERNELS.register("Transpose")
def _transpose(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    return np.asarray(np.transpose(x, attrs["perm"]), order="C")


def slices_of(starts: Sequence[int], sizes: Sequence[int], steps: Sequence[int]) -> tuple[slice, ...]:
    """Python slices selecting ``start + i * step`` for ``i < size`` on each axis."""
    out = []
    for start, size, step in zip(starts, sizes, steps):
        if size == 0:
            out.append(slice(0, 0))
            continue
        stop = start + size * step
        out.append(slice(start, None if stop < 0 else stop, step))
    return tuple(out)


@KERNELS.register("Slice")
def _slice(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    return np.asarray(x[slices_of(attrs["starts"], attrs["sizes"], attrs["steps"])], order="C")


@KERNELS.register("Concat")
def _concat(attrs: Attrs, out: Types, *xs: np.ndarray) -> np.ndarray:
    return np.concatenate(xs, axis=attrs["axis"])


@KERNELS.register("Split")
def _split(attrs: Attrs, out: Types, x: np.ndarray) -> tuple[np.ndarray, ...]:
    bounds = np.cumsum(attrs["splits"])[:-1]
    return tuple(np.asarray(p, order="C") for p in np.split(x, bounds, axis=attrs["axis"]))


#: ONNX pad mode -> numpy.pad mode
_NP_PAD_MODES: dict[str, Any] = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


@KERNELS.register("Pad")
def _pad(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    pads = attrs["pads"]
    r = x.ndim
    width = [(pads[i], pads[i + r]) for i in range(r)]
    mode = _NP_PAD_MODES[attrs["mode"]]
    if mode == "constant":
        value = np.asarray(attrs["value"]).reshape(()).astype(x.dtype)
        return np.pad(x, width, mode="constant", constant_values=value)
    if x.size == 0:  # nothing to pad from; the type rule allows this only with zero pads on empty axes
        return np.zeros(out[0].shape, x.dtype)
    return np.pad(x, width, mode=mode)


@KERNELS.register("Tile")
def _tile(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    return np.tile(x, attrs["repeats"]) if x.ndim else x.copy()


@KERNELS.register("Broadcast")
def _broadcast(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    if x.size == 1 and x.dtype != object:  # a fill (ConstantOfShape): np.full is several times faster
        return np.full(attrs["shape"], x.reshape(()), dtype=x.dtype)
    return np.asarray(np.broadcast_to(x, attrs["shape"]), order="C")


@KERNELS.register("DepthToSpace")
def _depth_to_space(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    b = attrs["blocksize"]
    n, c, h, w = x.shape
    if attrs["mode"] == "DCR":
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return np.asarray(t, order="C").reshape(out[0].shape)


@KERNELS.register("SpaceToDepth")
def _space_to_depth(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    b = attrs["blocksize"]
    n, c, h, w = x.shape
    t = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return np.asarray(t, order="C").reshape(out[0].shape)


@KERNELS.register("Trilu")
def _trilu(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    n, m = x.shape[-2:]
    k = attrs["k"]
    cols = np.arange(m)[None, :] - np.arange(n)[:, None]
    keep = cols >= k if attrs["upper"] else cols <= k
    return np.where(keep, x, np.zeros((), x.dtype))


@KERNELS.register("BitCast")
def _bitcast(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    if sys.byteorder != "little":  # pragma: no cover  (ONNX defines the bytes as little endian)
        raise UnsupportedError("BitCast is implemented for little-endian hosts only")
    return np.asarray(x, order="C").view(out[0].dtype).reshape(out[0].shape)
