"""The quantized primitive set: integer products with int32 accumulation and a requantize.

The ONNX-style kinds of ``nn_quant`` (QLinearConv, QLinearMatMul, ConvInteger,
MatMulInteger) lower onto these, and so do models imported from QDQ form
(the ``fold-qdq`` pass):

- ``IntConv``: Conv of ``(Input - InputZero)`` and ``(Filter - FilterZero)``
  plus an int32 ``Bias``, accumulated exactly and wrapped to int32. 8-bit
  operands (uint8 or int8 each), a scalar input zero point, a per-tensor or
  per-output-channel filter zero point; padding contributes 0.
- ``IntMatMul``: ``numpy.matmul(A - AZero, B - BZero)`` in int32 (MatMulInteger's
  semantics: 1-D ``AZero`` per row of A, 1-D ``BZero`` per column of B).
- ``Requantize``: int32 -> int8 / uint8,
  ``clip(round_half_even(float32(Input) * Multiplier) + ZeroPoint, lo, hi)`` in float32
  (the order onnxruntime's and the reference kernels' requantization uses), where
  ``Multiplier`` (float32) broadcasts to Input (per tensor, per channel, per row / column)
  and ``[lo, hi]`` is the result kind's range narrowed by ``clamp_lo`` / ``clamp_hi``
  (a fused ReLU is ``clamp_lo = ZeroPoint``).

The fused kinds ``FusedIntConv`` / ``FusedIntMatMul`` are a IntConv / IntMatMul with
its requantize (and bias): backends with a fused int8 kernel declare them,
every other backend sees them lowered back onto the three primitives.
"""

from __future__ import annotations

from glow_core.errors import GlowTypeError
from glow_core.ir.defs.common import Attrs, Types, check_elems, req
from glow_core.ir.defs.nn import conv_rule
from glow_core.ir.defs.nn_quant import Q8_KINDS, matmul_integer_rule
from glow_core.ir.kinds import AttrType as A
from glow_core.ir.kinds import Category as C
from glow_core.ir.kinds import attr, define_kind
from glow_core.ir.types import ElemKind, TensorType, broadcast_shapes

E = ElemKind
#: no narrowing of the requantized range (the result kind's range applies)
NO_CLAMP_LO, NO_CLAMP_HI = -(2 ** 31), 2 ** 31 - 1


def _check_scalar(t: TensorType | None, what: str) -> None:
    if t is not None and t.size != 1:
        raise GlowTypeError(f"{what} must be a scalar (one element), got {t}")


def _check_channels(t: TensorType | None, m: int, what: str) -> None:
    if t is not None and t.size != 1 and t.shape != (m,):
        raise GlowTypeError(f"{what} must be a scalar or 1-D of length {m}, got {t}")


def _qconv_core(types: Types, attrs: Attrs, bias_at: int) -> TensorType:
    """Checks shared by IntConv and FusedIntConv; the int32 accumulator's type."""
    x, w, xz, wz = req(types, 0), req(types, 1), req(types, 2), req(types, 3)
    check_elems(x, Q8_KINDS, "IntConv input")
    check_elems(w, Q8_KINDS, "IntConv filter")
    if xz.elem != x.elem or wz.elem != w.elem:
        raise GlowTypeError(f"zero points {xz}, {wz} must have the element kinds of their operands {x}, {w}")
    (y,) = conv_rule([x.with_elem(E.FLOAT32), w.with_elem(E.FLOAT32)], attrs)
    m = w.shape[0]
    _check_scalar(xz, "the input zero point")
    _check_channels(wz, m, "the filter zero point")
    bias = types[bias_at] if len(types) > bias_at else None
    if bias is not None and (bias.elem != E.INT32 or bias.shape != (m,)):
        raise GlowTypeError(f"bias must be int32[{m}], got {bias}")
    return y.with_elem(E.INT32)


def _qconv_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    return [_qconv_core(types, attrs, 4)]


def _clamp(attrs: Attrs) -> None:
    if attrs["clamp_lo"] > attrs["clamp_hi"]:
        raise GlowTypeError(f"clamp_lo {attrs['clamp_lo']} exceeds clamp_hi {attrs['clamp_hi']}")


def _requantize_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x, mult, zp = req(types, 0), req(types, 1), req(types, 2)
    check_elems(x, frozenset({E.INT32}), "Requantize input")
    check_elems(mult, frozenset({E.FLOAT32}), "Requantize multiplier")
    check_elems(zp, Q8_KINDS, "Requantize zero point")
    _check_scalar(zp, "the zero point")
    if broadcast_shapes(x.shape, mult.shape) != x.shape:
        raise GlowTypeError(f"multiplier {mult} does not broadcast to the input {x}")
    _clamp(attrs)
    return [TensorType(zp.elem, x.shape)]


_CONV_ATTRS = (attr("strides", A.INTS), attr("pads", A.INTS), attr("dilations", A.INTS), attr("group", A.INT, 1))
_CLAMP_ATTRS = (attr("clamp_lo", A.INT, NO_CLAMP_LO, doc="lower bound of the result (a fused ReLU: the zero point)"),
                attr("clamp_hi", A.INT, NO_CLAMP_HI, doc="upper bound of the result"))

define_kind("IntConv", inputs=("Input", "Filter", "InputZero", "FilterZero", "Bias?"), attrs=_CONV_ATTRS,
            infer=_qconv_rule, categories=(C.CONVOLUTION, C.QUANTIZATION, C.PRIMITIVE),
            elems=Q8_KINDS | {E.INT32},
            doc="Conv of (Input - InputZero) and (Filter - FilterZero) plus int32 Bias, exact, wrapped to int32; "
                "8-bit operands, scalar InputZero, FilterZero per tensor or per output channel.")
define_kind("IntMatMul", inputs=("A", "B", "AZero?", "BZero?"), infer=matmul_integer_rule,
            categories=(C.LINEAR_ALGEBRA, C.QUANTIZATION, C.PRIMITIVE), elems=Q8_KINDS | {E.INT32},
            doc="numpy.matmul(A - AZero, B - BZero) in int32 (8-bit operands; 1-D AZero per row, 1-D BZero per "
                "column).")
define_kind("Requantize", inputs=("Input", "Multiplier", "ZeroPoint"), attrs=_CLAMP_ATTRS, infer=_requantize_rule,
            categories=(C.QUANTIZATION, C.PRIMITIVE), elems=Q8_KINDS | {E.INT32, E.FLOAT32},
            doc="clip(round_half_even(float32(Input) * Multiplier) + ZeroPoint, lo, hi) -> ZeroPoint's kind, in "
                "float32; Multiplier broadcasts to Input; [lo, hi] is the kind's range narrowed by clamp_lo/hi.")


# -- fused forms (lowered back onto the primitives for backends without a fused kernel) -----------------------

def _fused_qconv_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    acc = _qconv_core(types, attrs, 6)
    m = req(types, 1).shape[0]
    mult, yz = req(types, 4), req(types, 5)
    check_elems(mult, frozenset({E.FLOAT32}), "FusedIntConv multiplier")
    _check_channels(mult, m, "the multiplier")
    check_elems(yz, Q8_KINDS, "the result zero point")
    _check_scalar(yz, "the result zero point")
    _clamp(attrs)
    return [acc.with_elem(yz.elem)]


def _fused_qmatmul_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    a, b, az, bz = req(types, 0), req(types, 1), req(types, 2), req(types, 3)
    if b.rank != 2 or a.rank < 1:
        raise GlowTypeError(f"FusedIntMatMul needs a 2-D B and A of rank >= 1, got {a}, {b}")
    (acc,) = matmul_integer_rule([a, b, az, bz], attrs)
    n = b.shape[1]
    _check_scalar(az, "A's zero point")
    _check_channels(bz, n, "B's zero point")
    mult, yz = req(types, 4), req(types, 5)
    check_elems(mult, frozenset({E.FLOAT32}), "FusedIntMatMul multiplier")
    _check_channels(mult, n, "the multiplier")
    check_elems(yz, Q8_KINDS, "the result zero point")
    _check_scalar(yz, "the result zero point")
    bias = types[6] if len(types) > 6 else None
    if bias is not None and (bias.elem != E.INT32 or bias.shape != (n,)):
        raise GlowTypeError(f"bias must be int32[{n}], got {bias}")
    _clamp(attrs)
    return [acc.with_elem(yz.elem)]


define_kind("FusedIntConv", inputs=("Input", "Filter", "InputZero", "FilterZero", "Multiplier", "YZero", "Bias?"),
            attrs=_CONV_ATTRS + _CLAMP_ATTRS, infer=_fused_qconv_rule,
            categories=(C.CONVOLUTION, C.QUANTIZATION), elems=Q8_KINDS | {E.INT32, E.FLOAT32},
            doc="Requantize(IntConv(Input, Filter, InputZero, FilterZero, Bias), Multiplier per tensor or per "
                "output channel, YZero) with clamp_lo / clamp_hi.")
define_kind("FusedIntMatMul", inputs=("A", "B", "AZero", "BZero", "Multiplier", "YZero", "Bias?"),
            attrs=_CLAMP_ATTRS, infer=_fused_qmatmul_rule, categories=(C.LINEAR_ALGEBRA, C.QUANTIZATION),
            elems=Q8_KINDS | {E.INT32, E.FLOAT32},
            doc="Requantize(IntMatMul(A, B, AZero, BZero) + Bias, Multiplier per tensor or per column, YZero) with "
                "clamp_lo / clamp_hi; B 2-D, scalar AZero.")
