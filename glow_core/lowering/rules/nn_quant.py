"""Lowerings of the ONNX-style quantization kinds onto primitives (``glow_core.ir.defs.nn_quant``).

In: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger,
ConvInteger, QLinearMatMul, QLinearConv, and the fused quantized kinds
FusedIntConv / FusedIntMatMul. Out: Cast, element-wise arithmetic, Round (half to
even), Where / IsNaN, ReduceMin / ReduceMax, data movement, and the quantized
primitives IntConv, IntMatMul and Requantize (``glow_core.ir.defs.nn_qprim``).

Integer products become IntConv / IntMatMul (exact int32 accumulation), their
requantization a Requantize whose multiplier (``InputScale * FilterScale /
YScale``) is computed in float32 in the kernels' order, so the result is
bit-identical to the ONNX-style kernels (``kernels/nn_quant.py``).
QLinearConv (and a QLinearMatMul with a per-tensor A and a 2-D B) go through
the fused kinds, which a backend with a fused int8 kernel keeps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ml_dtypes
import numpy as np

from glow_core.ir.graph import Constant, Node, Value
from glow_core.ir.types import ElemKind, TensorType
from glow_core.lowering.builder import Builder
from glow_core.lowering.rules.nn import per_channel
from glow_core.lowering.table import lowering

E = ElemKind
F32 = E.FLOAT32


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
    # 8- and 16-bit differences are exact in float32 (one fused float loop); int32 ones go through int64
    wide = E.INT64 if x.type.elem is E.INT32 else F32
    diff = b.cast(x, wide)
    if zp is not None:
        diff = b.sub(diff, b.cast(granular(b, zp, x.type, node.attrs), wide))
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
    # minimum(0, min(x)) and maximum(0, max(x)) as the spec's Min / Max: a NaN stays NaN (so does the scale)
    lo = b.where(b.emit1("Or", [b.binary("Less", mn, zero), b.unary("IsNaN", mn)]), mn, zero)
    hi = b.where(b.emit1("Or", [b.binary("Less", zero, mx), b.unary("IsNaN", mx)]), mx, zero)
    scale = b.where(b.binary("Equal", hi, lo), b.scalar(1.0, F32), b.div(b.sub(hi, lo), b.scalar(255.0, F32)))
    finite = b.unary("Not", b.emit1("Or", [b.unary("IsNaN", scale), b.unary("IsInf", scale)]))
    zp = b.unary("Round", b.sub(zero, b.div(lo, scale)))
    zp = b.minimum(b.maximum(zp, zero), b.scalar(255.0, F32))
    zp = b.where(finite, zp, zero)
    y = b.add(b.unary("Round", b.div(x, b.reshape(scale, (1,) * rank))), b.reshape(zp, (1,) * rank))
    y = saturate(b, y, E.UINT8)
    y = b.where(b.reshape(finite, (1,) * rank), y, b.scalar(0, E.UINT8, rank))
    return [y, scale, b.cast(zp, E.UINT8)]


# -- integer products: onto the quantized primitives (IntConv, IntMatMul, Requantize) ---------------------------

def _reshaped(b: Builder, v: Value, shape: tuple[int, ...]) -> Value:
    """``v`` reshaped; a constant stays a constant (the fused kernels pack constant operands)."""
    if isinstance(v, Constant):
        return b.const(np.asarray(v.payload).reshape(shape))
    return b.reshape(v, shape)


def _f32_multiplier(b: Builder, in_s: Value, w_s: Value, y_s: Value, shape: tuple[int, ...]) -> Value:
    """``in_s * w_s / y_s`` in float32 (a constant when the scales are), ``w_s`` shaped ``shape``."""
    if all(isinstance(v, Constant) for v in (in_s, w_s, y_s)):
        def f(v: Value) -> np.ndarray:
            return np.asarray(v.payload).astype(np.float32)  # type: ignore[attr-defined]
        m = f(in_s).reshape(()) * f(w_s).reshape(shape) / f(y_s).reshape(())
        return b.const(np.asarray(m, np.float32))
    return b.div(b.mul(b.reshape(b.cast(in_s, F32), ()), b.reshape(b.cast(w_s, F32), shape)),
                 b.reshape(b.cast(y_s, F32), ()))


def _zero_of(b: Builder, zp: Value | None, like: Value) -> Value:
    """A zero point as a scalar (or kept 1-D when it has several values); 0 of ``like``'s kind when absent."""
    if zp is None:
        return b.const(np.zeros((), like.type.dtype))
    return _reshaped(b, zp, ()) if zp.type.size == 1 else zp


def _per_channel_1d(b: Builder, v: Value) -> Value:
    """A scalar-or-vector operand as a scalar, or 1-D when it has several values."""
    return _reshaped(b, v, () if v.type.size == 1 else (v.type.size,))


@lowering("MatMulInteger")
def _matmul_integer(b: Builder, node: Node) -> list[Value]:
    return [b.emit1("IntMatMul", [b.input(0), b.input(1), b.opt_input(2), b.opt_input(3)])]


@lowering("ConvInteger")
def _conv_integer(b: Builder, node: Node) -> list[Value]:
    x, w = b.input(0), b.input(1)
    return [b.emit1("IntConv", [x, w, _zero_of(b, b.opt_input(2), x), _zero_of(b, b.opt_input(3), w), None],
                    **_conv_attrs(node))]


def _conv_attrs(node: Node) -> dict[str, Any]:
    return {k: node.attrs[k] for k in ("strides", "pads", "dilations", "group")}


def _scale_for(b: Builder, s: Value, per: str) -> Value:
    s = b.cast(s, F32)
    if s.type.rank == 1 and s.type.size > 1 and per == "row":
        return b.reshape(s, (s.type.size, 1))
    return b.reshape(s, ()) if s.type.size == 1 else s


@lowering("QLinearMatMul")
def _qlinear_matmul(b: Builder, node: Node) -> list[Value]:
    a, a_s, az, w, w_s, wz, y_s, yz = (b.input(i) for i in range(8))
    yz = _reshaped(b, yz, ())
    n = w.type.shape[-1] if w.type.rank else 0
    per_column = w_s.type.size in (1, n) and w_s.type.rank <= 1 and wz.type.size in (1, n) and wz.type.rank <= 1
    if w.type.rank == 2 and a_s.type.size == 1 and az.type.size == 1 and per_column:
        mult = _f32_multiplier(b, a_s, w_s, y_s, () if w_s.type.size == 1 else (n,))
        return [b.emit1("FusedIntMatMul", [a, w, _reshaped(b, az, ()), _per_channel_1d(b, wz), mult, yz, None])]
    mult = b.div(b.mul(_scale_for(b, a_s, "row"), _scale_for(b, w_s, "column")), b.reshape(b.cast(y_s, F32), ()))
    acc = b.emit1("IntMatMul", [a, w, az, wz])
    return [b.emit1("Requantize", [acc, mult, yz])]


@lowering("QLinearConv")
def _qlinear_conv(b: Builder, node: Node) -> list[Value]:
    x, x_s, xz, w, w_s, wz, y_s, yz = (b.input(i) for i in range(8))
    mult = _f32_multiplier(b, x_s, w_s, y_s, () if w_s.type.size == 1 else (w_s.type.size,))
    return [b.emit1("FusedIntConv", [x, w, _reshaped(b, xz, ()), _per_channel_1d(b, wz), mult, _reshaped(b, yz, ()),
                                   b.opt_input(8)], **_conv_attrs(node))]


def _clamp_attrs(node: Node) -> dict[str, Any]:
    return {"clamp_lo": node.attrs["clamp_lo"], "clamp_hi": node.attrs["clamp_hi"]}


@lowering("FusedIntConv")
def _fused_qconv(b: Builder, node: Node) -> list[Value]:
    x, w, xz, wz, mult, yz = (b.input(i) for i in range(6))
    acc = b.emit1("IntConv", [x, w, xz, wz, b.opt_input(6)], **_conv_attrs(node))
    if mult.type.size > 1:
        mult = per_channel(b, mult, acc.type.rank)
    return [b.emit1("Requantize", [acc, mult, yz], **_clamp_attrs(node))]


@lowering("FusedIntMatMul")
def _fused_qmatmul(b: Builder, node: Node) -> list[Value]:
    a, w, az, wz, mult, yz = (b.input(i) for i in range(6))
    acc = b.emit1("IntMatMul", [a, w, az, wz])
    bias = b.opt_input(6)
    if bias is not None:
        acc = b.add(acc, bias)
    return [b.emit1("Requantize", [acc, mult, yz], **_clamp_attrs(node))]
