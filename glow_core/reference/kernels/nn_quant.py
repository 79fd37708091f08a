"""Quantization kernels: (de)quantization and integer matrix products.

Integer products are computed exactly: operands minus zero points are small
integers, so a float64 BLAS product is exact (every partial sum stays far
below 2**53); the result then wraps to int32 as the ONNX spec allows.
Rounding is half-to-even (``np.rint``) and results saturate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from glow_core.ir.types import TensorType
from glow_core.reference.kernels import KERNELS
from glow_core.reference.kernels.nn import conv_nd

Attrs = Mapping[str, Any]
Types = Sequence[TensorType]
F32 = np.float32


def int_range(dtype: np.dtype) -> tuple[int, int]:
    info = ml_dtypes.iinfo(dtype)  # (int4 / int2 too)
    return int(info.min), int(info.max)


def granular(s: np.ndarray, ndim: int, attrs: Attrs, shape: Sequence[int]) -> np.ndarray:
    """A scale / zero point reshaped (and, when blocked, repeated) to broadcast against the input."""
    if s.ndim == 0 or (s.ndim == 1 and s.size == 1 and attrs["block_size"] == 0):
        return s.reshape(())
    axis, block = attrs["axis"], attrs["block_size"]
    if block == 0:
        return s.reshape([-1 if i == axis else 1 for i in range(ndim)])
    return np.repeat(s, block, axis=axis)[tuple(slice(0, d) for d in shape)]


def saturate(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    lo, hi = int_range(dtype)
    return np.clip(values, lo, hi).astype(dtype)


@KERNELS.register("QuantizeLinear")
def _quantize(attrs: Attrs, out: Types, x: np.ndarray, s: np.ndarray, zp: np.ndarray | None) -> np.ndarray:
    prec = attrs["precision"].dtype
    scale = granular(s, x.ndim, attrs, x.shape).astype(prec)
    q = np.rint(x.astype(prec) / scale).astype(F32)
    if zp is not None:
        q = q + granular(zp, x.ndim, attrs, x.shape).astype(F32)
    q = np.nan_to_num(q, nan=0.0)
    return saturate(q, out[0].dtype)


@KERNELS.register("DequantizeLinear")
def _dequantize(attrs: Attrs, out: Types, x: np.ndarray, s: np.ndarray, zp: np.ndarray | None) -> np.ndarray:
    diff = x.astype(np.int64)
    if zp is not None:
        diff = diff - granular(zp, x.ndim, attrs, x.shape).astype(np.int64)
    # float32 product rounded once: for the operands the importer admits, the same as a product in the result kind
    scale = granular(s, x.ndim, attrs, x.shape).astype(F32)
    return (diff.astype(F32) * scale).astype(out[0].dtype)


@KERNELS.register("DynamicQuantizeLinear")
def _dynamic_quantize(attrs: Attrs, out: Types, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # the spec's minimum(0, min(x)) and maximum(0, max(x)): a NaN in x makes the scale NaN (onnx.reference; the
    # zero point and the result are then NaN converted to uint8, which the spec leaves undefined: 0 here)
    lo = F32(np.minimum(F32(0), x.min())) if x.size else F32(0)
    hi = F32(np.maximum(F32(0), x.max())) if x.size else F32(0)
    # an all-zero range has no defined scale (the formula divides 0 by 0); onnxruntime uses 1
    scale = F32(1) if hi == lo else F32(hi - lo) / F32(255)
    if not np.isfinite(scale):
        zp = F32(0)
        y = np.zeros(x.shape, np.uint8)
    else:
        zp = F32(np.clip(np.rint(F32(0) - lo / scale), 0, 255))
        y = saturate(np.rint(x / scale) + zp, np.dtype(np.uint8))
    return y, np.array(scale, F32), np.array(zp).astype(np.uint8)


# -- integer products ---------------------------------------------------------------------

def _minus_zero(x: np.ndarray, zp: np.ndarray | None, per: str) -> np.ndarray:
    """``x - zp`` in float64 (exact), a 1-D zero point applied per row (A) or per column (B)."""
    v = x.astype(np.float64)
    if zp is None:
        return v
    z = zp.astype(np.float64)
    if z.ndim == 1 and z.size > 1:
        z = z.reshape(-1, 1) if per == "row" else z
    elif z.size == 1:
        z = z.reshape(())
    return v - z


def _wrap_int32(v: np.ndarray) -> np.ndarray:
    return v.astype(np.int64).astype(np.int32)


def exact_matmul(a: np.ndarray, az: np.ndarray | None, b: np.ndarray, bz: np.ndarray | None) -> np.ndarray:
    """``(a - az) @ (b - bz)`` as exact integers in float64."""
    return np.matmul(_minus_zero(a, az, "row"), _minus_zero(b, bz, "column"))


@KERNELS.register("MatMulInteger")
def _matmul_integer(attrs: Attrs, out: Types, a: np.ndarray, b: np.ndarray, az: np.ndarray | None,
                    bz: np.ndarray | None) -> np.ndarray:
    return _wrap_int32(exact_matmul(a, az, b, bz))


def _filter_minus_zero(w: np.ndarray, wz: np.ndarray | None) -> np.ndarray:
    v = w.astype(np.float64)
    if wz is None:
        return v
    return v - wz.astype(np.float64).reshape((-1,) + (1,) * (w.ndim - 1) if wz.size > 1 else ())


def exact_conv(attrs: Attrs, out: Types, x: np.ndarray, xz: np.ndarray | None, w: np.ndarray,
               wz: np.ndarray | None) -> np.ndarray:
    """Conv of ``x - xz`` and ``w - wz`` as exact integers in float64 (padding contributes 0)."""
    xv = x.astype(np.float64)
    if xz is not None:
        xv = xv - xz.astype(np.float64).reshape(())
    return conv_nd(xv, _filter_minus_zero(w, wz), attrs["strides"], attrs["pads"], attrs["dilations"],
                   attrs["group"], tuple(out[0].shape[2:]))


@KERNELS.register("ConvInteger")
def _conv_integer(attrs: Attrs, out: Types, x: np.ndarray, w: np.ndarray, xz: np.ndarray | None,
                  wz: np.ndarray | None) -> np.ndarray:
    return _wrap_int32(exact_conv(attrs, out, x, xz, w, wz))


def requantize(acc: np.ndarray, multiplier: np.ndarray, zp: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """saturate(round_half_even(acc * multiplier) + zp), in float32 like onnxruntime."""
    v = np.rint(acc.astype(F32) * multiplier.astype(F32)) + zp.astype(F32).reshape(())
    return saturate(v, dtype)


def _scale_for(s: np.ndarray, per: str) -> np.ndarray:
    s = s.astype(F32)
    if s.ndim == 1 and s.size > 1 and per == "row":
        return s.reshape(-1, 1)
    return s.reshape(()) if s.size == 1 else s


@KERNELS.register("QLinearMatMul")
def _qlinear_matmul(attrs: Attrs, out: Types, a: np.ndarray, a_s: np.ndarray, az: np.ndarray, b: np.ndarray,
                    b_s: np.ndarray, bz: np.ndarray, y_s: np.ndarray, yz: np.ndarray) -> np.ndarray:
    acc = _wrap_int32(exact_matmul(a, az, b, bz))
    mult = _scale_for(a_s, "row") * _scale_for(b_s, "column") / y_s.astype(F32).reshape(())
    return requantize(acc, mult, yz, out[0].dtype)


@KERNELS.register("QLinearConv")
def _qlinear_conv(attrs: Attrs, out: Types, x: np.ndarray, x_s: np.ndarray, xz: np.ndarray, w: np.ndarray,
                  w_s: np.ndarray, wz: np.ndarray, y_s: np.ndarray, yz: np.ndarray,
                  bias: np.ndarray | None) -> np.ndarray:
    acc = exact_conv(attrs, out, x, xz, w, wz)
    if bias is not None:
        acc = acc + bias.astype(np.float64).reshape((1, -1) + (1,) * (acc.ndim - 2))
    acc = _wrap_int32(acc)
    ws = w_s.astype(F32).reshape(-1) if w_s.size > 1 else w_s.astype(F32).reshape(())
    mult = x_s.astype(F32).reshape(()) * ws / y_s.astype(F32).reshape(())
    if mult.ndim:
        mult = mult.reshape((1, -1) + (1,) * (acc.ndim - 2))
    return requantize(acc, mult, yz, out[0].dtype)
