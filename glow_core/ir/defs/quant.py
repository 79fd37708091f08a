"""Typed quantized kinds: the scale and offset live in the tensor type (``int8q`` / ``uint8q``).

These are what profile-guided quantization (``glow_core.quantization.convert``)
makes of a float graph: ``real = scale * (q - offset)``. Every result's
quantization parameters are attributes (``elem``, ``scale``, ``offset``) so the
type rule can give the typed result. Weights are plain ``int8`` constants,
symmetric (offset 0), with their per-output-channel scales as an explicit
float32 operand (a type carries one scale).

Arithmetic, shared by the reference kernels and the lowering onto the
ONNX-style kinds (``QLinearConv``, ``QuantizeLinear``, ...), so both agree
bit for bit:

- integer products (QConv, QMatMul) are exact, accumulated in int32 with the
  int32 bias;
- requantization is ``saturate(round_half_even(float32(acc) * m) + offset_out)``
  with the float32 multiplier ``m = (s_in * s_w) / s_out`` evaluated in float32
  in that order (``s_in / s_out`` for Rescale, QAdd and QAvgPool operands);
- results saturate to the element kind's range, then to ``[lo, hi]`` of QClip.
"""

from __future__ import annotations

from glow_core.errors import GlowTypeError
from glow_core.ir.defs.common import Attrs, Types, check_elems, req
from glow_core.ir.defs.nn import _POOL_ATTRS, _pool_shape, conv_rule, matmul_shape
from glow_core.ir.kinds import AttrType as A
from glow_core.ir.kinds import Category as C
from glow_core.ir.kinds import attr, define_kind
from glow_core.ir.types import FLOAT_KINDS, QUANTIZED_KINDS, ElemKind, TensorType, broadcast_shapes

E = ElemKind
#: element kinds an operand of a typed quantized kind may have
Q_ELEMS = QUANTIZED_KINDS | {E.INT8, E.INT32, E.FLOAT32}

_OUT = (attr("elem", A.ELEM, doc="int8q or uint8q"),
        attr("scale", A.FLOAT, doc="the result's scale (> 0)"),
        attr("offset", A.INT, doc="the result's offset (zero point)"))


def out_type(attrs: Attrs, shape: tuple[int, ...]) -> TensorType:
    """The typed result ``elem<scale, offset>[shape]`` the attributes describe, checked."""
    elem, scale, offset = attrs["elem"], float(attrs["scale"]), int(attrs["offset"])
    if elem not in QUANTIZED_KINDS:
        raise GlowTypeError(f"result element kind {elem.value} is not a quantized kind (int8q, uint8q)")
    if not scale > 0 or scale == float("inf"):
        raise GlowTypeError(f"result scale must be a positive finite number, got {scale}")
    lo, hi = qbounds(elem)
    if not lo <= offset <= hi:
        raise GlowTypeError(f"offset {offset} is outside the range [{lo}, {hi}] of {elem.value}")
    return TensorType(elem, shape, scale, offset)


def qbounds(elem: ElemKind) -> tuple[int, int]:
    """The integer range of a (quantized) 8-bit element kind."""
    return (0, 255) if elem in (E.UINT8Q, E.UINT8) else (-128, 127)


def _q(t: TensorType | None, what: str) -> TensorType:
    if t is None:
        raise GlowTypeError(f"{what} is required")
    if not t.elem.is_quantized:
        raise GlowTypeError(f"{what} must be quantized (int8q / uint8q), got {t}")
    return t


def params_of(*types: TensorType) -> tuple[float, ...]:
    """The ``in_params`` attribute for operands of these types: (scale, offset) of each."""
    out: list[float] = []
    for t in types:
        out += [float(t.scale), float(t.offset)]  # type: ignore[arg-type]
    return tuple(out)


def _check_in(attrs: Attrs, *types: TensorType) -> None:
    """The kernels read the operands' parameters from ``in_params``: it must match the types."""
    if tuple(attrs["in_params"]) != params_of(*types):
        raise GlowTypeError(f"in_params {list(attrs['in_params'])} do not match the operand types "
                            + ", ".join(str(t) for t in types))


_IN = (attr("in_params", A.FLOATS, doc="(scale, offset) of each quantized operand, as their types say"),)


# -- Quantize / Dequantize / Rescale -----------------------------------------------------------------------

def _quantize_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    check_elems(x, frozenset({E.FLOAT32}), "Quantize input")
    return [out_type(attrs, x.shape)]


def _dequantize_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = _q(types[0], "Dequantize input")
    _check_in(attrs, x)
    return [TensorType(E.FLOAT32, x.shape)]


def _rescale_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = _q(types[0], "Rescale input")
    _check_in(attrs, x)
    return [out_type(attrs, x.shape)]


_QK = (C.QUANTIZATION,)
define_kind("Quantize", inputs=("Input",), attrs=_OUT, infer=_quantize_rule, categories=_QK,
            elems=FLOAT_KINDS | QUANTIZED_KINDS,
            doc="saturate(round_half_even(Input / scale) + offset), the division in float32; NaN gives offset.")
define_kind("Dequantize", inputs=("Input",), attrs=_IN, infer=_dequantize_rule, categories=_QK, elems=Q_ELEMS,
            doc="float32(Input - offset) * scale of the input's type.")
define_kind("Rescale", inputs=("Input",), attrs=_IN + _OUT, infer=_rescale_rule, categories=_QK, elems=Q_ELEMS,
            doc="Requantize to the result's scale and offset: m = s_in / s_out.")


# -- QClip: the quantized form of Relu / Clip --------------------------------------------------------------

def _clip_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = _q(types[0], "QClip input")
    if attrs["lo"] > attrs["hi"]:
        raise GlowTypeError(f"QClip bounds lo={attrs['lo']} > hi={attrs['hi']}")
    return [x]


define_kind("QClip", inputs=("Input",), attrs=(attr("lo", A.INT, doc="the smallest integer kept"),
                                               attr("hi", A.INT, doc="the largest integer kept")),
            infer=_clip_rule, categories=_QK + (C.ELEMENTWISE,), elems=Q_ELEMS,
            doc="min(max(Input, lo), hi) on the integers; same type as Input (Relu: lo = offset).")


# -- linear kinds ----------------------------------------------------------------------------------------

def _weights(w: TensorType, s: TensorType, bias: TensorType | None, m: int, what: str) -> None:
    check_elems(w, frozenset({E.INT8}), f"{what} weight")
    check_elems(s, frozenset({E.FLOAT32}), f"{what} weight scale")
    if s.shape not in ((m,), (1,)):
        raise GlowTypeError(f"{what} weight scale must be float32[{m}] (per channel) or [1], got {s}")
    if bias is not None and (bias.elem != E.INT32 or bias.shape != (m,)):
        raise GlowTypeError(f"{what} bias must be int32[{m}], got {bias}")


def _qconv_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x, w, s = _q(types[0], "QConv input"), req(types, 1), req(types, 2)
    bias = types[3] if len(types) > 3 else None
    _weights(w, s, bias, w.shape[0], "QConv")
    _check_in(attrs, x)
    (y,) = conv_rule([TensorType(E.FLOAT32, x.shape), TensorType(E.FLOAT32, w.shape)], attrs)
    return [out_type(attrs, y.shape)]


def _qmatmul_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    a, w, s = _q(types[0], "QMatMul input"), req(types, 1), req(types, 2)
    bias = types[3] if len(types) > 3 else None
    if w.rank != 2 or a.rank < 1 or a.shape[-1] != w.shape[0]:
        raise GlowTypeError(f"QMatMul needs LHS [..., K] and a 2-D weight [K, N], got {a} and {w}")
    _weights(w, s, bias, w.shape[1], "QMatMul")
    _check_in(attrs, a)
    return [out_type(attrs, matmul_shape(a.shape, w.shape))]


_CONV = (attr("strides", A.INTS), attr("pads", A.INTS), attr("dilations", A.INTS), attr("group", A.INT, 1))
define_kind("QConv", inputs=("Input", "Filter", "FilterScale", "Bias?"), attrs=_CONV + _IN + _OUT,
            infer=_qconv_rule, categories=_QK + (C.CONVOLUTION,), elems=Q_ELEMS,
            doc="Conv(Input - offset_in, Filter) + Bias in int32, requantized per output channel with "
                "m[c] = s_in * FilterScale[c] / s_out.")
define_kind("QMatMul", inputs=("LHS", "RHS", "RHSScale", "Bias?"), attrs=_IN + _OUT, infer=_qmatmul_rule,
            categories=_QK + (C.LINEAR_ALGEBRA,), elems=Q_ELEMS,
            doc="(LHS - offset_in) @ RHS + Bias in int32, requantized per column with "
                "m[n] = s_in * RHSScale[n] / s_out.")


# -- element-wise arithmetic -----------------------------------------------------------------------------

def _binary_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    a, b = _q(types[0], "LHS"), _q(types[1], "RHS")
    _check_in(attrs, a, b)
    return [out_type(attrs, broadcast_shapes(a.shape, b.shape))]


_EW = _QK + (C.ELEMENTWISE, C.BINARY)
define_kind("QAdd", inputs=("LHS", "RHS"), attrs=_IN + _OUT, infer=_binary_rule, categories=_EW, elems=Q_ELEMS,
            doc="round(float32(a - oa) * (sa / so) + float32(b - ob) * (sb / so)) + oo, saturated.")
define_kind("QMul", inputs=("LHS", "RHS"), attrs=_IN + _OUT, infer=_binary_rule, categories=_EW, elems=Q_ELEMS,
            doc="round(float32((a - oa) * (b - ob)) * (sa * sb / so)) + oo, saturated.")


# -- pooling ---------------------------------------------------------------------------------------------

def _maxpool_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = _q(types[0], "QMaxPool input")
    return [x.with_shape(_pool_shape(TensorType(E.FLOAT32, x.shape), attrs))]


def _avgpool_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = _q(types[0], "QAvgPool input")
    _check_in(attrs, x)
    return [out_type(attrs, _pool_shape(TensorType(E.FLOAT32, x.shape), attrs))]


define_kind("QMaxPool", inputs=("Input",), attrs=_POOL_ATTRS, infer=_maxpool_rule,
            categories=_QK + (C.POOLING,), elems=Q_ELEMS,
            doc="MaxPool on the integers; the result keeps the input's type.")
define_kind("QAvgPool", inputs=("Input",), attrs=_POOL_ATTRS + (attr("count_include_pad", A.BOOL, False),) + _IN + _OUT,
            infer=_avgpool_rule, categories=_QK + (C.POOLING,), elems=Q_ELEMS,
            doc="float32 mean of (Input - offset_in) over each window (AvgPool's divisor), times s_in / s_out, "
                "rounded, plus the result offset.")

# -- QLookup: an element-wise function of one quantized operand as a table -------------------------------

_PLAIN8 = frozenset({E.INT8, E.UINT8})


def _lookup_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    plain = types[0] is not None and types[1] is not None and {types[0].elem, types[1].elem} <= _PLAIN8
    x = types[0] if plain else _q(types[0], "QLookup input")
    table = types[1] if plain else _q(types[1], "QLookup table")
    assert x is not None and table is not None
    if x.elem not in QUANTIZED_KINDS | _PLAIN8 or table.shape != (256,):
        raise GlowTypeError(f"QLookup takes an 8-bit quantized input and a table of 256 entries, got {x} and {table}")
    return [table.with_shape(x.shape)]


define_kind("QLookup", inputs=("Input", "Table"), infer=_lookup_rule, categories=_QK + (C.ELEMENTWISE,),
            elems=Q_ELEMS,
            doc="Table[Input - qmin]: the result of an element-wise float function of one quantized operand, "
                "computed for each of its 256 codes (the table has the result's type). After "
                "``lower_quantized`` for a backend that runs it, the same on plain int8 / uint8 codes.")

#: the typed quantized kinds declared here
TYPED_QUANT_KINDS = ("Quantize", "Dequantize", "Rescale", "QClip", "QConv", "QMatMul", "QAdd", "QMul", "QMaxPool",
                     "QAvgPool", "QLookup")
