"""Kernels of the typed quantized kinds (``glow_core.ir.defs.quant``): exact integer arithmetic.

Products are exact (integers in float64, far below 2**53) and wrap to int32;
requantization is ``saturate(rint(float32(acc) * m) + offset)`` with the float32
multiplier of the kind's documentation; ``rint`` rounds half to even.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from glow_core.ir.types import ElemKind, TensorType
from glow_core.reference.kernels import KERNELS
from glow_core.reference.kernels.nn import conv_nd

Attrs = Mapping[str, Any]
Types = Sequence[TensorType]
F32 = np.float32


def _sat(v: np.ndarray, t: TensorType) -> np.ndarray:
    info = np.iinfo(t.dtype)
    return np.clip(v, info.min, info.max).astype(t.dtype)


def multiplier(s_in: float, s_out: float, s_w: np.ndarray | float | None = None) -> np.ndarray:
    """float32 ``s_in * s_w / s_out`` (``s_in / s_out`` without ``s_w``), evaluated in float32 in that order."""
    m = F32(s_in)
    if s_w is not None:
        m = m * np.asarray(s_w, F32)
    return np.asarray(m / F32(s_out), F32)


def requantize(acc: np.ndarray, m: np.ndarray, t: TensorType) -> np.ndarray:
    """saturate(rint(float32(acc) * m) + offset) into the typed result ``t``."""
    return _sat(np.rint(acc.astype(F32) * m) + F32(t.offset), t)


def _centered(q: np.ndarray, offset: float) -> np.ndarray:
    return q.astype(np.int32) - np.int32(offset)


@KERNELS.register("Quantize")
def _quantize(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    q = np.rint(x.astype(F32) / F32(attrs["scale"])) + F32(attrs["offset"])
    return _sat(np.nan_to_num(q, nan=float(attrs["offset"])), out[0])


@KERNELS.register("Dequantize")
def _dequantize(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    s, o = attrs["in_params"]
    return (_centered(x, o).astype(F32) * F32(s)).astype(F32)


@KERNELS.register("Rescale")
def _rescale(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    s, o = attrs["in_params"]
    return requantize(_centered(x, o), multiplier(s, attrs["scale"]), out[0])


@KERNELS.register("QClip")
def _qclip(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    return np.clip(x.astype(np.int32), attrs["lo"], attrs["hi"]).astype(x.dtype)


def _wrap32(v: np.ndarray) -> np.ndarray:
    return v.astype(np.int64).astype(np.int32)


@KERNELS.register("QConv")
def _qconv(attrs: Attrs, out: Types, x: np.ndarray, w: np.ndarray, ws: np.ndarray,
           bias: np.ndarray | None) -> np.ndarray:
    s, o = attrs["in_params"]
    acc = conv_nd(_centered(x, o).astype(np.float64), w.astype(np.float64), attrs["strides"], attrs["pads"],
                  attrs["dilations"], attrs["group"], tuple(out[0].shape[2:]))
    shape = (1, -1) + (1,) * (acc.ndim - 2)
    if bias is not None:
        acc = acc + bias.astype(np.float64).reshape(shape)
    m = multiplier(s, attrs["scale"], ws.reshape(-1) if ws.size > 1 else ws.reshape(()))
    return requantize(_wrap32(acc), m.reshape(shape) if m.ndim else m, out[0])


@KERNELS.register("QMatMul")
def _qmatmul(attrs: Attrs, out: Types, a: np.ndarray, w: np.ndarray, ws: np.ndarray,
             bias: np.ndarray | None) -> np.ndarray:
    s, o = attrs["in_params"]
    acc = np.matmul(_centered(a, o).astype(np.float64), w.astype(np.float64))
    if bias is not None:
        acc = acc + bias.astype(np.float64)
    m = multiplier(s, attrs["scale"], ws.reshape(-1) if ws.size > 1 else ws.reshape(()))
    return requantize(_wrap32(acc), m, out[0])


@KERNELS.register("QAdd")
def _qadd(attrs: Attrs, out: Types, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    sa, oa, sb, ob = attrs["in_params"]
    so = attrs["scale"]
    v = _centered(a, oa).astype(F32) * multiplier(sa, so) + _centered(b, ob).astype(F32) * multiplier(sb, so)
    return _sat(np.rint(v) + F32(attrs["offset"]), out[0])


@KERNELS.register("QMul")
def _qmul(attrs: Attrs, out: Types, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    sa, oa, sb, ob = attrs["in_params"]
    prod = (_centered(a, oa) * _centered(b, ob)).astype(F32)  # |product| <= 65025: exact in float32
    m = np.asarray(F32(sa) * F32(sb) / F32(attrs["scale"]), F32)
    return _sat(np.rint(prod * m) + F32(attrs["offset"]), out[0])


@KERNELS.register("QMaxPool")
def _qmaxpool(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    return KERNELS.get("MaxPool")(attrs, out, x)


@KERNELS.register("QAvgPool")
def _qavgpool(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    s, o = attrs["in_params"]
    mean = KERNELS.get("AvgPool")(attrs, [TensorType(ElemKind.FLOAT32, out[0].shape)], _centered(x, o).astype(F32))
    return _sat(np.rint(mean.astype(F32) * multiplier(s, attrs["scale"])) + F32(attrs["offset"]), out[0])


@KERNELS.register("QLookup")
def _qlookup(attrs: Attrs, out: Types, x: np.ndarray, table: np.ndarray) -> np.ndarray:
    lo = 0 if x.dtype == np.uint8 else -128
    return np.asarray(table)[x.astype(np.int64) - lo].astype(out[0].dtype)
