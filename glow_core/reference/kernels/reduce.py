"""Reduction, arg-reduction, scan, TopK and softmax kernels.

float16 and bfloat16 are computed in float32 and rounded once at the end;
integers are computed in their own type (wrapping like onnxruntime).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from glow_core.ir.types import TensorType
from glow_core.reference.kernels import KERNELS

Attrs = Mapping[str, Any]
Types = Sequence[TensorType]
Axes = tuple[int, ...]


def acc_dtype(dtype: np.dtype) -> np.dtype:
    """The type a kernel computes in: float32 for the 16-bit floats, else the type itself."""
    if dtype == np.float16 or dtype.name == "bfloat16":
        return np.dtype(np.float32)
    return dtype


def widen(x: np.ndarray) -> np.ndarray:
    return x.astype(acc_dtype(x.dtype), copy=False)


def _is_float(x: np.ndarray) -> bool:
    return x.dtype.kind == "f"


def lowest(dtype: np.dtype) -> Any:
    if dtype == np.bool_:
        return False
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def highest(dtype: np.dtype) -> Any:
    if dtype == np.bool_:
        return True
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max


def _count(shape: tuple[int, ...], axes: Axes) -> int:
    n = 1
    for a in axes:
        n *= shape[a]
    return n


def _sum(x: np.ndarray, axes: Axes, kd: bool) -> np.ndarray:
    return np.sum(x, axis=axes, keepdims=kd, dtype=x.dtype)


def _mean(x: np.ndarray, axes: Axes, kd: bool) -> np.ndarray:
    s = _sum(x, axes, kd)
    n = _count(x.shape, axes)
    if _is_float(x):
        return s / x.dtype.type(n) if n else np.full_like(s, np.nan)
    if n == 0:
        return np.zeros_like(s)
    # the (wrapped) sum divided in 64 bits, so a count beyond the element type's range is fine
    if x.dtype.kind == "u":
        return (s.astype(np.uint64) // np.uint64(n)).astype(x.dtype)
    s64 = s.astype(np.int64)
    q = np.abs(s64) // np.int64(n)  # integer mean truncates toward zero (onnxruntime)
    return np.where(s64 < 0, -q, q).astype(x.dtype)


def _max(x: np.ndarray, axes: Axes, kd: bool) -> np.ndarray:
    return np.max(x, axis=axes, keepdims=kd, initial=lowest(x.dtype))


def _min(x: np.ndarray, axes: Axes, kd: bool) -> np.ndarray:
    return np.min(x, axis=axes, keepdims=kd, initial=highest(x.dtype))


def _prod(x: np.ndarray, axes: Axes, kd: bool) -> np.ndarray:
    return np.prod(x, axis=axes, keepdims=kd, dtype=x.dtype)


def _l1(x: np.ndarray, axes: Axes, kd: bool) -> np.ndarray:
    return _sum(np.abs(x), axes, kd)


def _sum_square(x: np.ndarray, axes: Axes, kd: bool) -> np.ndarray:
    return _sum(x * x, axes, kd)


def _l2(x: np.ndarray, axes: Axes, kd: bool) -> np.ndarray:
    s = _sum_square(x, axes, kd)
    if _is_float(x):
        return np.sqrt(s)
    return np.trunc(np.sqrt(s.astype(np.float64)))


def _log_sum(x: np.ndarray, axes: Axes, kd: bool) -> np.ndarray:
    return np.log(_sum(x, axes, kd))


def _log_sum_exp(x: np.ndarray, axes: Axes, kd: bool) -> np.ndarray:
    m = np.max(x, axis=axes, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0).astype(x.dtype)
    r = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return r if kd else np.squeeze(r, axis=axes)


#: kind -> reduction over (input widened to its compute type, axes, keepdims)
REDUCERS: dict[str, Callable[[np.ndarray, Axes, bool], np.ndarray]] = {
    "ReduceSum": _sum,
    "ReduceMean": _mean,
    "ReduceMax": _max,
    "ReduceMin": _min,
    "ReduceProd": _prod,
    "ReduceL1": _l1,
    "ReduceL2": _l2,
    "ReduceLogSum": _log_sum,
    "ReduceLogSumExp": _log_sum_exp,
    "ReduceSumSquare": _sum_square,
}


def _reduction_kernel(fn: Callable[[np.ndarray, Axes, bool], np.ndarray]):  # type: ignore[no-untyped-def]
    def kernel(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
        r = fn(widen(x), tuple(attrs["axes"]), bool(attrs["keepdims"]))
        return np.asarray(r).astype(out[0].dtype, copy=False).reshape(out[0].shape)

    return kernel


for _kind, _fn in REDUCERS.items():
    KERNELS.add(_kind, _reduction_kernel(_fn))


# -- ArgMax / ArgMin ----------------------------------------------------------------------

def _arg_kernel(pick: Callable[..., np.ndarray]):  # type: ignore[no-untyped-def]
    def kernel(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
        axis = attrs["axis"]
        x = widen(x)
        if attrs["select_last_index"]:
            idx = x.shape[axis] - 1 - pick(np.flip(x, axis), axis=axis, keepdims=True)
        else:
            idx = pick(x, axis=axis, keepdims=True)
        if not attrs["keepdims"]:
            idx = np.squeeze(idx, axis=axis)
        return idx.astype(np.int64)

    return kernel


KERNELS.add("ArgMax", _arg_kernel(np.argmax))
KERNELS.add("ArgMin", _arg_kernel(np.argmin))


# -- CumSum / CumProd ------------------------------------------------------------------------

def _scan_kernel(op: np.ufunc, identity: int):  # type: ignore[no-untyped-def]
    def kernel(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
        axis = attrs["axis"]
        a = widen(x)
        if attrs["reverse"]:
            a = np.flip(a, axis)
        r = op.accumulate(a, axis=axis, dtype=a.dtype)
        if attrs["exclusive"] and r.shape[axis]:
            first = np.full_like(np.take(r, [0], axis=axis), identity)
            r = np.concatenate([first, np.take(r, np.arange(r.shape[axis] - 1), axis=axis)], axis=axis)
        if attrs["reverse"]:
            r = np.flip(r, axis)
        return np.asarray(r, order="C").astype(out[0].dtype, copy=False)

    return kernel


KERNELS.add("CumSum", _scan_kernel(np.add, 0))
KERNELS.add("CumProd", _scan_kernel(np.multiply, 1))


# -- TopK ----------------------------------------------------------------------------------------

@KERNELS.register("TopK")
def _topk(attrs: Attrs, out: Types, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    axis, k = attrs["axis"], attrs["k"]
    keys = np.moveaxis(widen(x), axis, -1)
    n = keys.shape[-1]
    if attrs["largest"]:
        # a stable ascending sort of the reversed row, read backwards: descending values,
        # equal values in increasing index order
        order = (n - 1 - np.argsort(keys[..., ::-1], axis=-1, kind="stable"))[..., ::-1]
    else:
        order = np.argsort(keys, axis=-1, kind="stable")
    idx = order[..., :k]
    vals = np.take_along_axis(np.moveaxis(x, axis, -1), idx, axis=-1)
    return (np.asarray(np.moveaxis(vals, -1, axis), order="C"),
            np.asarray(np.moveaxis(idx, -1, axis), order="C").astype(np.int64))


# -- Softmax family -------------------------------------------------------------------------------

def _shifted(x: np.ndarray, axes: Axes) -> np.ndarray:
    a = widen(x)
    return a - np.max(a, axis=axes, keepdims=True, initial=-np.inf)


@KERNELS.register("Softmax")
def _softmax(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    axes = tuple(attrs["axes"])
    e = np.exp(_shifted(x, axes))
    return (e / np.sum(e, axis=axes, keepdims=True)).astype(out[0].dtype)


@KERNELS.register("LogSoftmax")
def _log_softmax(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    axes = tuple(attrs["axes"])
    s = _shifted(x, axes)
    return (s - np.log(np.sum(np.exp(s), axis=axes, keepdims=True))).astype(out[0].dtype)


@KERNELS.register("Hardmax")
def _hardmax(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    axes = tuple(attrs["axes"])
    result = np.zeros(x.shape, out[0].dtype)
    if x.size == 0:
        return result
    dest = tuple(range(x.ndim - len(axes), x.ndim))
    moved = np.moveaxis(widen(x), axes, dest)
    flat = moved.reshape(moved.shape[: x.ndim - len(axes)] + (-1,))
    first = np.argmax(flat, axis=-1)[..., None]
    hot = np.zeros(flat.shape, out[0].dtype)
    np.put_along_axis(hot, first, 1, axis=-1)
    return np.asarray(np.moveaxis(hot.reshape(moved.shape), dest, axes), order="C")
