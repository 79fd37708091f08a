"""Kernels of the quantized primitives (``glow_core.ir.defs.nn_qprim``): IntConv, IntMatMul, Requantize and
their fused forms.

Integer products are exact (operands minus zero points are small integers, so
float64 sums are exact) and wrap to int32; requantization runs in float32 and
rounds half to even, then saturates: bit for bit what the ONNX-style kernels
of ``nn_quant`` compute.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from glow_core.ir.types import TensorType
from glow_core.reference.kernels import KERNELS
from glow_core.reference.kernels.nn_quant import exact_conv, exact_matmul, int_range

Attrs = Mapping[str, Any]
Types = Sequence[TensorType]
F32 = np.float32


def _wrap_int32(v: np.ndarray) -> np.ndarray:
    return v.astype(np.int64).astype(np.int32)


def qconv(attrs: Attrs, out: Types, x: np.ndarray, w: np.ndarray, xz: np.ndarray, wz: np.ndarray,
          bias: np.ndarray | None) -> np.ndarray:
    """The int32 accumulator of IntConv (bias included, wrapped once)."""
    acc = exact_conv(attrs, out, x, xz, w, wz)
    if bias is not None:
        acc = acc + bias.astype(np.float64).reshape((1, -1) + (1,) * (acc.ndim - 2))
    return _wrap_int32(acc)


def requantize(acc: np.ndarray, mult: np.ndarray, zp: np.ndarray, dtype: np.dtype, attrs: Attrs) -> np.ndarray:
    """clip(round_half_even(float32(acc) * mult) + zp, lo, hi), all in float32."""
    v = np.rint(acc.astype(F32) * mult.astype(F32)) + zp.astype(F32).reshape(())
    lo, hi = int_range(dtype)
    return np.clip(v, max(lo, attrs["clamp_lo"]), min(hi, attrs["clamp_hi"])).astype(dtype)


@KERNELS.register("IntConv")
def _qconv(attrs: Attrs, out: Types, x: np.ndarray, w: np.ndarray, xz: np.ndarray, wz: np.ndarray,
           bias: np.ndarray | None) -> np.ndarray:
    return qconv(attrs, out, x, w, xz, wz, bias)


@KERNELS.register("IntMatMul")
def _qmatmul(attrs: Attrs, out: Types, a: np.ndarray, b: np.ndarray, az: np.ndarray | None,
             bz: np.ndarray | None) -> np.ndarray:
    return _wrap_int32(exact_matmul(a, az, b, bz))


@KERNELS.register("Requantize")
def _requantize(attrs: Attrs, out: Types, x: np.ndarray, mult: np.ndarray, zp: np.ndarray) -> np.ndarray:
    return requantize(x, mult, zp, out[0].dtype, attrs)


@KERNELS.register("FusedIntConv")
def _fused_qconv(attrs: Attrs, out: Types, x: np.ndarray, w: np.ndarray, xz: np.ndarray, wz: np.ndarray,
                 mult: np.ndarray, yz: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    acc = qconv(attrs, out, x, w, xz, wz, bias)
    m = mult.astype(F32).reshape((1, -1) + (1,) * (acc.ndim - 2)) if mult.size > 1 else mult.reshape(())
    return requantize(acc, m, yz, out[0].dtype, attrs)


@KERNELS.register("FusedIntMatMul")
def _fused_qmatmul(attrs: Attrs, out: Types, a: np.ndarray, b: np.ndarray, az: np.ndarray, bz: np.ndarray,
                   mult: np.ndarray, yz: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    acc = _wrap_int32(exact_matmul(a, az, b, bz))
    if bias is not None:
        acc = (acc.astype(np.int64) + bias.astype(np.int64)).astype(np.int32)
    m = mult.astype(F32) if mult.size > 1 else mult.reshape(())
    return requantize(acc, m, yz, out[0].dtype, attrs)
