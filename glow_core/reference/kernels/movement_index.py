"""Indexing kernels: Gather family, Scatter family, OneHot, ReverseSequence, TensorScatter.

Negative indices count from the end of their axis; an index outside
``[-dim, dim)`` raises :class:`~glow_core.errors.IndexRangeError` (``CompiledNetwork.run`` names the
ONNX node and the model input behind it).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from glow_core.errors import IndexRangeError
from glow_core.ir.types import TensorType
from glow_core.reference.kernels import KERNELS

Attrs = Mapping[str, Any]
Types = Sequence[TensorType]

#: scatter reduction -> numpy unbuffered in-place ufunc (duplicates accumulate)
_SCATTER_UFUNCS: dict[str, Callable[..., None]] = {
    "add": np.add.at,
    "mul": np.multiply.at,
    "max": np.maximum.at,
    "min": np.minimum.at,
}


def normalize_indices(idx: np.ndarray, dim: int | np.ndarray, what: str = "index") -> np.ndarray:
    """int64 indices with negatives resolved; raises IndexRangeError for any outside [-dim, dim)."""
    i = np.asarray(idx).astype(np.int64)
    i = np.where(i < 0, i + dim, i)
    bad = (i < 0) | (i >= dim)
    if bad.any():
        raise IndexRangeError(f"{what} {np.asarray(idx)[bad].ravel()[:4].tolist()} out of range for dimension(s) "
                         f"{np.broadcast_to(dim, bad.shape)[bad].ravel()[:4].tolist()}")
    return i


def _scatter(out: np.ndarray, where: tuple[np.ndarray, ...], updates: np.ndarray, reduction: str) -> np.ndarray:
    if reduction == "none":
        out[where] = updates
    else:
        _SCATTER_UFUNCS[reduction](out, where, updates)
    return out


@KERNELS.register("Gather")
def _gather(attrs: Attrs, out: Types, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    axis = attrs["axis"]
    return np.take(x, normalize_indices(idx, x.shape[axis]), axis=axis)


def _element_coords(idx: np.ndarray, axis: int, dim: int) -> tuple[np.ndarray, ...]:
    """Full index tuples of an element-wise gather/scatter: position of each element, idx along axis."""
    coords: list[np.ndarray] = list(np.indices(idx.shape, sparse=True))
    coords[axis] = normalize_indices(idx, dim)
    return tuple(coords)


@KERNELS.register("GatherElements")
def _gather_elements(attrs: Attrs, out: Types, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    axis = attrs["axis"]
    return np.asarray(x[_element_coords(idx, axis, x.shape[axis])], order="C")


@KERNELS.register("GatherND")
def _gather_nd(attrs: Attrs, out: Types, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    b = attrs["batch_dims"]
    k = idx.shape[-1]
    batch = math.prod(x.shape[:b])
    m = math.prod(idx.shape[b:-1])
    data = x.reshape((batch,) + x.shape[b:])
    tuples = normalize_indices(idx.reshape(batch, m, k), np.array(x.shape[b:b + k], np.int64))
    where = (np.arange(batch)[:, None],) + tuple(tuples[..., j] for j in range(k))
    return np.asarray(data[where], order="C").reshape(out[0].shape)


@KERNELS.register("ScatterElements")
def _scatter_elements(attrs: Attrs, out: Types, x: np.ndarray, idx: np.ndarray, upd: np.ndarray) -> np.ndarray:
    axis = attrs["axis"]
    return _scatter(x.copy(), _element_coords(idx, axis, x.shape[axis]), upd, attrs["reduction"])


@KERNELS.register("ScatterND")
def _scatter_nd(attrs: Attrs, out: Types, x: np.ndarray, idx: np.ndarray, upd: np.ndarray) -> np.ndarray:
    k = idx.shape[-1]
    m = math.prod(idx.shape[:-1])
    tuples = normalize_indices(idx.reshape(m, k), np.array(x.shape[:k], np.int64))
    where = tuple(tuples[:, j] for j in range(k))
    return _scatter(x.copy(), where, upd.reshape((m,) + x.shape[k:]), attrs["reduction"])


@KERNELS.register("OneHot")
def _one_hot(attrs: Attrs, out: Types, idx: np.ndarray, values: np.ndarray) -> np.ndarray:
    depth, axis = attrs["depth"], attrs["axis"]
    # float indices match only when integral; out-of-range ones (after adding depth to negatives) match nothing
    wide = {"f": np.float64, "u": np.uint64}.get(idx.dtype.kind, np.int64)
    i = idx.astype(wide)
    if idx.dtype.kind != "u":
        i = np.where(i < 0, i + depth, i)
    hot = np.moveaxis(i[..., None] == np.arange(depth, dtype=i.dtype), -1, axis)
    return np.where(hot, values[1], values[0]).astype(out[0].dtype)


@KERNELS.register("ReverseSequence")
def _reverse_sequence(attrs: Attrs, out: Types, x: np.ndarray, lens: np.ndarray) -> np.ndarray:
    b_axis, t_axis = attrs["batch_axis"], attrs["time_axis"]
    steps = x.shape[t_axis]
    n = lens.astype(np.int64)
    if ((n < 0) | (n > steps)).any():
        raise IndexError(f"sequence_lens {n.tolist()} must be within [0, {steps}]")
    t = np.arange(steps)[None, :]
    src = np.where(t < n[:, None], n[:, None] - 1 - t, t)  # [batch, time]
    if t_axis < b_axis:
        src = src.T
    src = src.reshape(src.shape + (1,) * (x.ndim - 2))
    return np.take_along_axis(x, np.broadcast_to(src, x.shape), axis=t_axis)


@KERNELS.register("TensorScatter")
def _tensor_scatter(attrs: Attrs, out: Types, past: np.ndarray, upd: np.ndarray,
                    write: np.ndarray | None) -> np.ndarray:
    axis = attrs["axis"]
    cap, seq, batch = past.shape[axis], upd.shape[axis], past.shape[0]
    start = np.zeros(batch, np.int64) if write is None else write.astype(np.int64)
    pos = start[:, None] + np.arange(seq, dtype=np.int64)[None, :]  # [batch, seq]
    if attrs["circular"]:
        pos = np.mod(pos, cap) if cap else pos
    if ((pos < 0) | (pos >= cap)).any():
        raise IndexError(f"write_indices {start.tolist()} + sequence length {seq} exceed the cache length {cap}")
    shape = [1] * past.ndim
    shape[0], shape[axis] = batch, seq
    result = past.copy()
    np.put_along_axis(result, np.broadcast_to(pos.reshape(shape), upd.shape), upd, axis)
    return result
