"""Normalization and loss kernels.

Statistics are computed in float32 for the 16-bit floats (or in the node's
``stash`` kind), results are rounded to the output kind once; the scale and
shift after a ``stash`` computation happen in the input's kind, as the ONNX
function definitions do.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from glow_core.ir.types import TensorType
from glow_core.reference.kernels import KERNELS
from glow_core.reference.kernels.reduce import acc_dtype, widen

Attrs = Mapping[str, Any]
Types = Sequence[TensorType]


def _per_channel(p: np.ndarray, rank: int, dtype: np.dtype) -> np.ndarray:
    """A [C] parameter shaped [C, 1, ...] to broadcast against [N, C, spatial...]."""
    return p.astype(dtype, copy=False).reshape((-1,) + (1,) * (rank - 2))


def _moments(x: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and biased variance over axes (two-pass), kept dims."""
    mean = np.mean(x, axis=axes, keepdims=True)
    d = x - mean
    return mean, np.mean(d * d, axis=axes, keepdims=True)


#: deviations up to this magnitude are squared as they are (``lowering/rules/norm.py``)
BIG_DEVIATION = 2.0 ** 50


def _normalized(a: np.ndarray, axes: tuple[int, ...], epsilon: float) -> np.ndarray:
    """``(a - mean) / sqrt(var + epsilon)``, the deviations of a set whose largest exceeds
    :data:`BIG_DEVIATION` scaled by its inverse (and epsilon by its square) so the variance cannot overflow."""
    mean = np.mean(a, axis=axes, keepdims=True)
    d = a - mean
    top = np.max(np.abs(d), axis=axes, keepdims=True, initial=0.0)  # (an empty set: scale 1)
    one = a.dtype.type(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(top > BIG_DEVIATION, one / top, one).astype(a.dtype)
    ds = d * r
    eps = a.dtype.type(epsilon) * r * r
    return ds / np.sqrt(np.mean(ds * ds, axis=axes, keepdims=True) + eps)


@KERNELS.register("BatchNormalization")
def _batchnorm(attrs: Attrs, out: Types, x: np.ndarray, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray,
               var: np.ndarray) -> np.ndarray:
    dt = np.result_type(*(acc_dtype(a.dtype) for a in (x, scale, bias, mean, var)))
    r = x.ndim
    inv = 1.0 / np.sqrt(_per_channel(var, r, dt) + dt.type(attrs["epsilon"]))
    y = (x.astype(dt) - _per_channel(mean, r, dt)) * (_per_channel(scale, r, dt) * inv) + _per_channel(bias, r, dt)
    return y.astype(out[0].dtype)


def _scale_shift(norm: np.ndarray, dtype: np.dtype, scale: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """Round the normalized tensor to ``dtype``, then * scale + bias in ``dtype`` (16-bit: rounded per op)."""
    y = norm.astype(dtype) * scale
    if bias is not None:
        y = y + bias
    return y.astype(dtype, copy=False)


@KERNELS.register("InstanceNormalization")
def _instancenorm(attrs: Attrs, out: Types, x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
    a = widen(x)
    norm = _normalized(a, tuple(range(2, x.ndim)), attrs["epsilon"])
    r = x.ndim
    y = norm * _per_channel(scale, r, a.dtype) + _per_channel(bias, r, a.dtype)
    return y.astype(out[0].dtype)


@KERNELS.register("GroupNormalization")
def _groupnorm(attrs: Attrs, out: Types, x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
    n, c = x.shape[:2]
    g = attrs["num_groups"]
    per_group = (c // g) * int(np.prod(x.shape[2:], dtype=np.int64))
    a = x.astype(attrs["stash"].dtype).reshape(n, g, per_group)
    norm = _normalized(a, (2,), attrs["epsilon"]).reshape(x.shape)
    r = x.ndim
    return _scale_shift(norm, x.dtype, _per_channel(scale, r, x.dtype), _per_channel(bias, r, x.dtype))


@KERNELS.register("LayerNormalization")
def _layernorm(attrs: Attrs, out: Types, x: np.ndarray, scale: np.ndarray,
               bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    axes = tuple(range(attrs["axis"], x.ndim))
    a = x.astype(attrs["stash"].dtype)
    mean, var = _moments(a, axes)
    inv = 1.0 / np.sqrt(var + a.dtype.type(attrs["epsilon"]))
    y = _scale_shift((a - mean) * inv, x.dtype, scale, bias)
    return y, mean.astype(out[1].dtype, copy=False), inv.astype(out[2].dtype, copy=False)


@KERNELS.register("RMSNormalization")
def _rmsnorm(attrs: Attrs, out: Types, x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    axes = tuple(range(attrs["axis"], x.ndim))
    a = x.astype(attrs["stash"].dtype)
    rms = np.sqrt(np.mean(a * a, axis=axes, keepdims=True) + a.dtype.type(attrs["epsilon"]))
    return _scale_shift(a / rms, x.dtype, scale, None)


@KERNELS.register("LpNormalization")
def _lpnorm(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    a = widen(x)
    axis = attrs["axis"]
    if attrs["p"] == 1:
        norm = np.sum(np.abs(a), axis=axis, keepdims=True)
    else:
        norm = np.sqrt(np.sum(a * a, axis=axis, keepdims=True))
    safe = np.where(norm == 0, 1, norm).astype(a.dtype)
    return np.where(norm == 0, 0, a / safe).astype(out[0].dtype)


@KERNELS.register("MeanVarianceNormalization")
def _mvn(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    a = widen(x)
    mean, var = _moments(a, tuple(attrs["axes"]))
    return ((a - mean) / (np.sqrt(var) + a.dtype.type(attrs["epsilon"]))).astype(out[0].dtype)


@KERNELS.register("LRN")
def _lrn(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    a = widen(x)
    size = attrs["size"]
    c = x.shape[1]
    # a tap more than c-1 channels away only reads padding: each pad is cut to c-1 (size 10**12 asked for
    # 10**12 slice additions of a terabyte-padded tensor); the taps left out add zeros
    before, after = min((size - 1) // 2, c - 1), min(size // 2, c - 1)
    sq = a * a
    pad = [(0, 0)] * x.ndim
    pad[1] = (before, after)
    padded = np.pad(sq, pad)
    window = np.zeros_like(sq)
    for off in range(before + after + 1):  # one vectorized slice add per offset
        window += padded[:, off:off + c]
    dt = a.dtype.type
    denom = (dt(attrs["bias"]) + dt(attrs["alpha"] / size) * window) ** dt(attrs["beta"])
    return (a / denom).astype(out[0].dtype)


@KERNELS.register("NegativeLogLikelihoodLoss")
def _nll(attrs: Attrs, out: Types, x: np.ndarray, target: np.ndarray, weight: np.ndarray | None) -> np.ndarray:
    a = widen(x)
    c = x.shape[1]
    t = target.astype(np.int64)
    counted = t != attrs["ignore_index"] if attrs["has_ignore_index"] else np.ones(t.shape, bool)
    safe = np.where(counted, t, 0)
    bad = counted & ((safe < 0) | (safe >= c))
    if bad.any():
        raise ValueError(f"target value {int(t[bad][0])} is outside the class range [0, {c})")
    picked = np.take_along_axis(a, safe[:, None], axis=1)[:, 0]
    w = weight.astype(a.dtype)[safe] if weight is not None else np.ones(safe.shape, a.dtype)
    w = np.where(counted, w, 0).astype(a.dtype)
    loss = np.where(counted, -picked * w, 0).astype(a.dtype)
    reduction = attrs["reduction"]
    if reduction == "sum":
        loss = np.sum(loss)
    elif reduction == "mean":
        loss = np.sum(loss) / np.sum(w)
    return np.asarray(loss).astype(out[0].dtype)
