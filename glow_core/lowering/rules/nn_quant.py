"""Lowerings of the ONNX-style quantization kinds onto primitives (``glow_core.ir.defs.nn_quant``).

In: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger,
ConvInteger, QLinearMatMul, QLinearConv. Out: Cast, element-wise arithmetic,
Round (half to even), Where / IsNaN, MatMul and Conv in float64, ReduceMin /
ReduceMax and data movement.

Integer products follow the kernels (``kernels/nn_quant.py``) exactly: the
operands minus their zero points are small integers, so a float64 MatMul or
Conv is exact; the result is truncated to int64 and wrapped to int32 by two
Casts. Requantization runs in float32 in the kernels' order, so it is
bit-exact too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ml_dtypes
import numpy as np

from glow_core.ir.graph import Node, Value
from glow_core.ir.types import ElemKind, TensorType
from glow_core.lowering.builder import Builder
from glow_core.lowering.rules.nn import matmul, per_channel
from glow_core.lowering.table import lowering

E = ElemKind
F32, F64 = E.FLOAT32, E.FLOAT64


# -- scale / zero-point granularity ------------------------------------------------------------------------

def granular(b: Builder, s: Value, x: TensorType, attrs: Mapping[str, Any]) -> Value:
    """A scale / zero point shaped (and, when blocked, repeated) to broadcast against ``x``."""
    axis, block = attrs["axis"], attrs["block_size"]
    if s.type.rank == 0 or (s.type.rank == 1 and s.type.size == 1 and block == 0):
        return b.reshape(s, (1,) * x.rank)
    if block == 0:
        return b.reshape(s, [s.type.size if i == axis else 1 for i in range(x.rank)])
    shape = s.type.shape
    nb = shape[axis]
    s = b.reshape(s, shape[:axis + 1] + (1,) + shape[axis + 1:])
    s = b.broadcast(s, shape[:axis + 1] + (block,) + shape[axis + 1:])
    s = b.reshape(s, shape[:axis] + (nb * block,) + shape[axis + 1:])
    return b.slice(s, axis, 0, x.shape[axis])


def saturate(b: Builder, v: Value, elem: ElemKind) -> Value:
    """np.clip(v, min, max) of ``elem``'s range, then the Cast to ``elem``."""
    info = ml_dtypes.iinfo(elem.dtype)  # (int4 / int2 too)
    lo, hi = b.scalar(int(info.min), v, v.type.rank), b.scalar(int(info.max), v, v.type.rank)
    return b.cast(b.minimum(b.maximum(v, lo), hi), elem)


@lowering("QuantizeLinear")
def _quantize(b: Builder, node: Node) -> list[Value]:
    x, s, zp = b.input(0), b.input(1), b.opt_input(2)
    prec = node.attrs["precision"]
    scale = b.cast(granular(b, s, x.type, node.attrs), prec)
    q = b.cast(b.unary("Round", b.div(b.cast(x, prec), scale)), F32)
    if zp is not None:
        q = b.add(q, b.cast(granular(b, zp, x.type, node.attrs), F32))
    q = b.where(b.unary("IsNaN", q), b.scalar(0.0, F32, q.type.rank), q)  # nan_to_num; +-inf saturate below
    return [saturate(b, q, node.attrs["elem"])]


@lowering("DequantizeLinear")
def _dequantize(b: Builder, node: Node) -> list[Value]:
    x, s, zp = b.input(0), b.input(1), b.opt_input(2)
    diff = b.cast(x, E.INT64)
    if zp is not None:
        diff = b.sub(diff, b.cast(granular(b, zp, x.type, node.attrs), E.INT64))
    y = b.mul(b.cast(diff, F32), b.cast(granular(b, s, x.type, node.attrs), F32))
    return [b.cast(y, node.attrs["elem"])]


@lowering("DynamicQuantizeLinear")
def _dynamic_quantize(b: Builder, node: Node) -> list[Value]:
    x = b.input(0)
    rank = x.type.rank
    if x.type.size == 0:  # an empty range: scale 1, zero point 0
        return [b.const(np.zeros(x.type.shape, np.uint8)), b.const(np.array(1.0, np.float32)),
                b.const(np.array(0, np.uint8))]
    axes = tuple(range(rank))
    zero = b.scalar(0.0, F32)
    mn = b.reduce("ReduceMin", x, axes, keepdims=False)
    mx = b.reduce("ReduceMax", x, axes, keepdims=False)
    lo = b.where(b.binary("Less", mn, zero), mn, zero)  # min(0, x.min()) as Python's min (a NaN gives 0)
    hi = b.where(b.binary("Less", zero, mx), mx, zero)
    scale = b.where(b.binary("Equal", hi, lo), b.scalar(1.0, F32), b.div(b.sub(hi, lo), b.scalar(255.0, F32)))
    finite = b.unary("Not", b.emit1("Or", [b.unary("IsNaN", scale), b.unary("IsInf", scale)]))
    zp = b.unary("Round", b.sub(zero, b.div(lo, scale)))
    zp = b.minimum(b.maximum(zp, zero), b.scalar(255.0, F32))
    zp = b.where(finite, zp, zero)
    y = b.add(b.unary("Round", b.div(x, b.reshape(scale, (1,) * rank))), b.reshape(zp, (1,) * rank))
    y = saturate(b, y, E.UINT8)
    y = b.where(b.reshape(finite, (1,) * rank), y, b.scalar(0, E.UINT8, rank))
    return [y, scale, b.cast(zp, E.UINT8)]


# -- integer products: exact in float64 ----------------------------------------------------------------------

def _minus_zero(b: Builder, x: Value, zp: Value | None, per: str) -> Value:
    """``x - zp`` in float64 (exact), a 1-D zero point applied per row (A) or per column (B)."""
    v = b.cast(x, F64)
    if zp is None:
        return v
    z = b.cast(zp, F64)
    if z.type.rank == 1 and z.type.size > 1:
        z = b.reshape(z, (z.type.size, 1)) if per == "row" else z
    elif z.type.size == 1:
        z = b.reshape(z, ())
    return b.sub(v, z)


def _wrap_int32(b: Builder, v: Value) -> Value:
    """float64 integers -> int32 with wrapping (through int64, as the kernels)."""
    return b.cast(b.cast(v, E.INT64), E.INT32)


def _exact_matmul(b: Builder, a: Value, az: Value | None, w: Value, wz: Value | None) -> Value:
    return matmul(b, _minus_zero(b, a, az, "row"), _minus_zero(b, w, wz, "column"))


def _exact_conv(b: Builder, node: Node, x: Value, xz: Value | None, w: Value, wz: Value | None,
                bias: Value | None = None) -> Value:
    """Conv of ``x - xz`` and ``w - wz`` (+ bias) as exact integers in float64 (padding contributes 0)."""
    xv = b.cast(x, F64)
    if xz is not None:
        xv = b.sub(xv, b.reshape(b.cast(xz, F64), ()))
    wv = b.cast(w, F64)
    if wz is not None:
        z = b.cast(wz, F64)
        per_m = (z.type.size,) + (1,) * (w.type.rank - 1)
        wv = b.sub(wv, b.reshape(z, per_m if z.type.size > 1 else ()))
    acc = b.emit1("Conv", [xv, wv, None], strides=node.attrs["strides"], pads=node.attrs["pads"],
                  dilations=node.attrs["dilations"], group=node.attrs["group"])
    if bias is not None:
        acc = b.add(acc, per_channel(b, b.cast(bias, F64), acc.type.rank))
    return acc


@lowering("MatMulInteger")
def _matmul_integer(b: Builder, node: Node) -> list[Value]:
    return [_wrap_int32(b, _exact_matmul(b, b.input(0), b.opt_input(2), b.input(1), b.opt_input(3)))]


@lowering("ConvInteger")
def _conv_integer(b: Builder, node: Node) -> list[Value]:
    return [_wrap_int32(b, _exact_conv(b, node, b.input(0), b.opt_input(2), b.input(1), b.opt_input(3)))]


def _requantize(b: Builder, acc: Value, mult: Value, zp: Value, elem: ElemKind) -> Value:
    """saturate(round_half_even(acc * multiplier) + zp), in float32 like the kernels."""
    v = b.unary("Round", b.mul(b.cast(acc, F32), mult))
    return saturate(b, b.add(v, b.reshape(b.cast(zp, F32), ())), elem)


def _scale_for(b: Builder, s: Value, per: str) -> Value:
    s = b.cast(s, F32)
    if s.type.rank == 1 and s.type.size > 1 and per == "row":
        return b.reshape(s, (s.type.size, 1))
    return b.reshape(s, ()) if s.type.size == 1 else s


@lowering("QLinearMatMul")
def _qlinear_matmul(b: Builder, node: Node) -> list[Value]:
    a, a_s, az, w, w_s, wz, y_s, yz = (b.input(i) for i in range(8))
    acc = _wrap_int32(b, _exact_matmul(b, a, az, w, wz))
    mult = b.div(b.mul(_scale_for(b, a_s, "row"), _scale_for(b, w_s, "column")), b.reshape(b.cast(y_s, F32), ()))
    return [_requantize(b, acc, mult, yz, b.out_type().elem)]


@lowering("QLinearConv")
def _qlinear_conv(b: Builder, node: Node) -> list[Value]:
    x, x_s, xz, w, w_s, wz, y_s, yz = (b.input(i) for i in range(8))
    acc = _wrap_int32(b, _exact_conv(b, node, x, xz, w, wz, b.opt_input(8)))
    ws = b.cast(w_s, F32)
    ws = b.reshape(ws, (ws.type.size,) if ws.type.size > 1 else ())
    mult = b.div(b.mul(b.reshape(b.cast(x_s, F32), ()), ws), b.reshape(b.cast(y_s, F32), ()))
    if mult.type.rank:
        mult = per_channel(b, mult, acc.type.rank)
    return [_requantize(b, acc, mult, yz, b.out_type().elem)]
