"""Quantization kinds in the ONNX (QDQ / integer-op) style.

These work on plain integer tensors with explicit scale and zero-point
operands, as ONNX models carry them: QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.
Rounding is half-to-even; results saturate to the integer range.

Scale / zero-point granularity (Quantize/DequantizeLinear): a scalar is per
tensor; a 1-D operand is per ``axis`` (its length is the axis' size); with
``block_size`` > 0 the scale has the input's rank and each entry covers
``block_size`` consecutive elements along ``axis``.
"""

from __future__ import annotations

from glow_core.errors import GlowTypeError
from glow_core.ir.defs.common import Attrs, Types, check_elems, req
from glow_core.ir.defs.nn import conv_rule, matmul_shape
from glow_core.ir.kinds import AttrType as A
from glow_core.ir.kinds import Category as C
from glow_core.ir.kinds import attr, define_kind
from glow_core.ir.types import ElemKind, TensorType, broadcast_shapes

E = ElemKind
#: integer element kinds a quantized tensor may have
QINT_KINDS = frozenset({E.INT8, E.UINT8, E.INT16, E.UINT16, E.INT32, E.INT4, E.UINT4, E.INT2, E.UINT2})
#: the 8-bit kinds of the integer compute ops
Q8_KINDS = frozenset({E.INT8, E.UINT8})
#: element kinds of real values (scales, float inputs and outputs)
REAL_KINDS = frozenset({E.FLOAT32, E.FLOAT16, E.BFLOAT16})


def check_granularity(x: TensorType, s: TensorType, attrs: Attrs, what: str) -> None:
    """The scale ``s`` is per tensor, per axis or blocked for ``x`` (see the module doc)."""
    axis, block = attrs["axis"], attrs["block_size"]
    if block < 0:
        raise GlowTypeError(f"block_size must be >= 0, got {block}")
    if s.rank == 0 or (s.rank == 1 and s.shape[0] == 1 and block == 0):
        return
    if x.rank == 0 or not 0 <= axis < x.rank:
        raise GlowTypeError(f"{what}: axis {axis} is out of range for {x}")
    if block == 0:
        if s.rank != 1 or s.shape[0] != x.shape[axis]:
            raise GlowTypeError(f"{what}: per-axis {s} must be 1-D of length {x.shape[axis]} (axis {axis} of {x})")
        return
    want = tuple(-(-d // block) if i == axis else d for i, d in enumerate(x.shape))
    if s.shape != want:
        raise GlowTypeError(f"{what}: blocked scale {s} must have shape {list(want)} for {x}, axis {axis}, "
                            f"block_size {block}")


def _same_granularity(zp: TensorType, s: TensorType) -> bool:
    """The zero point has the scale's shape (a scalar and a one-element 1-D tensor both per tensor)."""
    return zp.shape == s.shape or (zp.size == 1 and s.size == 1 and zp.rank <= 1 and s.rank <= 1)


def _quantize_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x, s = req(types, 0), req(types, 1)
    zp = types[2] if len(types) > 2 else None
    check_elems(x, REAL_KINDS | {E.INT32}, "QuantizeLinear input")
    check_elems(s, REAL_KINDS | {E.INT32}, "QuantizeLinear scale")
    out = attrs["elem"]
    if out not in QINT_KINDS - {E.INT32}:
        raise GlowTypeError(f"QuantizeLinear to {out.value} is not an integer quantized kind")
    if attrs["precision"] not in REAL_KINDS:
        raise GlowTypeError(f"precision {attrs['precision'].value} is not a real kind")
    check_granularity(x, s, attrs, "scale")
    if zp is not None and (zp.elem != out or not _same_granularity(zp, s)):
        raise GlowTypeError(f"zero point {zp} must be {out.value} with the scale's shape {list(s.shape)}")
    return [TensorType(out, x.shape)]


def _dequantize_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x, s = req(types, 0), req(types, 1)
    zp = types[2] if len(types) > 2 else None
    check_elems(x, QINT_KINDS, "DequantizeLinear input")
    check_elems(s, REAL_KINDS, "DequantizeLinear scale")
    out = attrs["elem"]
    if out not in REAL_KINDS:
        raise GlowTypeError(f"DequantizeLinear to {out.value} is not a real kind")
    check_granularity(x, s, attrs, "scale")
    if zp is not None and (zp.elem != x.elem or not _same_granularity(zp, s)):
        raise GlowTypeError(f"zero point {zp} must be {x.elem.value} with the scale's shape {list(s.shape)}")
    return [TensorType(out, x.shape)]


_GRANULARITY = (attr("axis", A.INT, 0, doc="non-negative; used when the scale is not a scalar"),
                attr("block_size", A.INT, 0, doc="0: per tensor / per axis"))

define_kind("QuantizeLinear", inputs=("Input", "Scale", "ZeroPoint?"),
            attrs=_GRANULARITY + (attr("elem", A.ELEM, doc="the integer result kind"),
                                  attr("precision", A.ELEM, E.FLOAT32, doc="the kind the division runs in")),
            infer=_quantize_rule, categories=(C.QUANTIZATION,),
            elems=REAL_KINDS | QINT_KINDS,
            doc="saturate(round_half_even(Input / Scale) + ZeroPoint), the division in ``precision``.")
define_kind("DequantizeLinear", inputs=("Input", "Scale", "ZeroPoint?"),
            attrs=_GRANULARITY + (attr("elem", A.ELEM, doc="the real result kind"),),
            infer=_dequantize_rule, categories=(C.QUANTIZATION,),
            elems=REAL_KINDS | QINT_KINDS,
            doc="(Input - ZeroPoint) * Scale: the difference exact, the product in float32 rounded once to the "
                "result kind.")


def _dynamic_quantize_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    check_elems(x, frozenset({E.FLOAT32}), "DynamicQuantizeLinear input")
    return [TensorType(E.UINT8, x.shape), TensorType(E.FLOAT32, ()), TensorType(E.UINT8, ())]


define_kind("DynamicQuantizeLinear", inputs=("Input",), outputs=("Result", "Scale", "ZeroPoint"),
            infer=_dynamic_quantize_rule, categories=(C.QUANTIZATION,),
            elems=frozenset({E.FLOAT32, E.UINT8}),
            doc="uint8 quantization with the scale and zero point of Input's range (widened to include 0).")


# -- integer matrix products ---------------------------------------------------------------

def _zero_point_fits(zp: TensorType | None, x: TensorType, per: str, what: str) -> None:
    """A zero point is a scalar (or one element), or 1-D per row of A / per column of B, or of A's/B's rank."""
    if zp is None:
        return
    if zp.elem != x.elem:
        raise GlowTypeError(f"{what} {zp} must have the element kind of its operand {x}")
    if zp.size == 1 and zp.rank <= 1:
        return
    if zp.rank == 1:
        n = x.shape[-2] if per == "row" else x.shape[-1]
        if x.rank < 2 or zp.shape[0] != n:
            raise GlowTypeError(f"{what} {zp} must hold one value per {per} ({n}) of {x}")
        return
    if zp.rank != x.rank:
        raise GlowTypeError(f"{what} {zp} must be a scalar, 1-D, or of rank {x.rank}")
    broadcast_shapes(zp.shape, x.shape)


def matmul_integer_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    a, b = req(types, 0), req(types, 1)
    check_elems(a, Q8_KINDS, "MatMulInteger A")
    check_elems(b, Q8_KINDS, "MatMulInteger B")
    _zero_point_fits(types[2] if len(types) > 2 else None, a, "row", "A's zero point")
    _zero_point_fits(types[3] if len(types) > 3 else None, b, "column", "B's zero point")
    return [TensorType(E.INT32, matmul_shape(a.shape, b.shape))]


define_kind("MatMulInteger", inputs=("A", "B", "AZero?", "BZero?"), infer=matmul_integer_rule,
            categories=(C.LINEAR_ALGEBRA, C.QUANTIZATION), elems=Q8_KINDS | {E.INT32},
            doc="numpy.matmul(A - AZero, B - BZero) in int32 (1-D AZero per row, 1-D BZero per column).")


def _scalar(t: TensorType | None, what: str) -> None:
    if t is not None and t.size != 1:
        raise GlowTypeError(f"{what} must be a scalar, got {t}")


def _per_channel(t: TensorType | None, m: int, what: str) -> None:
    if t is not None and t.size != 1 and t.shape != (m,):
        raise GlowTypeError(f"{what} must be a scalar or 1-D of length {m}, got {t}")


def _conv_integer_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x, w = req(types, 0), req(types, 1)
    check_elems(x, Q8_KINDS, "ConvInteger input")
    check_elems(w, Q8_KINDS, "ConvInteger filter")
    (y,) = conv_rule([x.with_elem(E.FLOAT32), w.with_elem(E.FLOAT32)], attrs)
    xz = types[2] if len(types) > 2 else None
    wz = types[3] if len(types) > 3 else None
    _scalar(xz, "the input zero point")
    _per_channel(wz, w.shape[0], "the filter zero point")
    if (xz is not None and xz.elem != x.elem) or (wz is not None and wz.elem != w.elem):
        raise GlowTypeError("zero points must have the element kinds of their operands")
    return [y.with_elem(E.INT32)]


_CONV_ATTRS = (attr("strides", A.INTS), attr("pads", A.INTS), attr("dilations", A.INTS), attr("group", A.INT, 1))

define_kind("ConvInteger", inputs=("Input", "Filter", "InputZero?", "FilterZero?"), attrs=_CONV_ATTRS,
            infer=_conv_integer_rule, categories=(C.CONVOLUTION, C.QUANTIZATION), elems=Q8_KINDS | {E.INT32},
            doc="Conv of (Input - InputZero) and (Filter - FilterZero) in int32; padding contributes 0.")


def _qscale(types: Types, i: int, what: str) -> TensorType:
    t = req(types, i)
    check_elems(t, REAL_KINDS, what)
    return t


def _qlinear_matmul_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    a, b = req(types, 0), req(types, 3)
    check_elems(a, Q8_KINDS, "QLinearMatMul A")
    check_elems(b, Q8_KINDS, "QLinearMatMul B")
    for i, per, x, what in ((1, "row", a, "A's scale"), (4, "column", b, "B's scale")):
        s = _qscale(types, i, what)
        _zero_point_fits(s.with_elem(x.elem), x, per, what)
        zp = req(types, i + 1)
        if zp.elem != x.elem or zp.shape != s.shape:
            raise GlowTypeError(f"{what.replace('scale', 'zero point')} {zp} must be {x.elem.value} shaped like {s}")
    ys, yz = _qscale(types, 6, "the result scale"), req(types, 7)
    _scalar(ys, "the result scale")
    _scalar(yz, "the result zero point")
    check_elems(yz, Q8_KINDS, "the result zero point")
    return [TensorType(yz.elem, matmul_shape(a.shape, b.shape))]


define_kind("QLinearMatMul", inputs=("A", "AScale", "AZero", "B", "BScale", "BZero", "YScale", "YZero"),
            infer=_qlinear_matmul_rule, categories=(C.LINEAR_ALGEBRA, C.QUANTIZATION),
            elems=Q8_KINDS | REAL_KINDS,
            doc="saturate(round((A - AZero) @ (B - BZero) * (AScale * BScale / YScale)) + YZero).")


def _qlinear_conv_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x, w = req(types, 0), req(types, 3)
    check_elems(x, Q8_KINDS, "QLinearConv input")
    check_elems(w, Q8_KINDS, "QLinearConv filter")
    (y,) = conv_rule([x.with_elem(E.FLOAT32), w.with_elem(E.FLOAT32)], attrs)
    m = w.shape[0]
    _scalar(_qscale(types, 1, "the input scale"), "the input scale")
    _scalar(req(types, 2), "the input zero point")
    _per_channel(_qscale(types, 4, "the filter scale"), m, "the filter scale")
    _per_channel(req(types, 5), m, "the filter zero point")
    _scalar(_qscale(types, 6, "the result scale"), "the result scale")
    yz = req(types, 7)
    _scalar(yz, "the result zero point")
    if req(types, 2).elem != x.elem or req(types, 5).elem != w.elem:
        raise GlowTypeError("zero points must have the element kinds of their operands")
    check_elems(yz, Q8_KINDS, "the result zero point")
    bias = types[8] if len(types) > 8 else None
    if bias is not None and (bias.elem != E.INT32 or bias.shape != (m,)):
        raise GlowTypeError(f"bias must be int32[{m}], got {bias}")
    return [y.with_elem(yz.elem)]


define_kind("QLinearConv",
            inputs=("Input", "InputScale", "InputZero", "Filter", "FilterScale", "FilterZero", "YScale", "YZero",
                    "Bias?"),
            attrs=_CONV_ATTRS, infer=_qlinear_conv_rule, categories=(C.CONVOLUTION, C.QUANTIZATION),
            elems=Q8_KINDS | REAL_KINDS | {E.INT32},
            doc="saturate(round((ConvInteger + Bias) * (InputScale * FilterScale / YScale)) + YZero); "
                "FilterScale / FilterZero per tensor or per output channel.")
