"""Element-wise kinds: arithmetic, math, comparison, logic, bitwise, activations, casts.

Conventions shared by every kind here:

- Binary kinds broadcast numpy-style. Their operands share one element kind,
  except ``Pow`` (any numeric exponent; the result has the base's kind) and
  ``Where`` (a boolean condition).
- Comparisons are normalized to ``Equal``, ``Less`` and ``LessOrEqual``: the
  importer swaps operands for ONNX Greater / GreaterOrEqual.
- Float attributes (alpha, beta, ...) hold the ONNX float32 value; kernels apply
  them in the computation type (float32 for float16/bfloat16 inputs).
- The type rules check operand element kinds against each kind's allowed set;
  ``elems`` is that set plus the result's kind (bool for predicates).
- ``doc`` gives the exact formula: the lowering pass and code generators follow it.

Variadic ONNX ops (Sum, Mean, Max, Min) are imported as chains of binary nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from glow_core.errors import GlowTypeError
from glow_core.ir.defs.common import Attrs, Types, broadcast_rule, check_elems, req
from glow_core.ir.kinds import AttrSpec, AttrType, attr, define_kind
from glow_core.ir.kinds import Category as C
from glow_core.ir.types import (
    FLOAT_KINDS,
    INT_KINDS,
    LOW_PRECISION_KINDS,
    NUMERIC_KINDS,
    SIGNED_INT_KINDS,
    ElemKind,
    TensorType,
    broadcast_shapes,
)

BOOL_KINDS = frozenset({ElemKind.BOOL})
#: every non-quantized element kind
PLAIN_KINDS = NUMERIC_KINDS | BOOL_KINDS
SIGNED_KINDS = FLOAT_KINDS | SIGNED_INT_KINDS
#: what Cast converts between: the plain kinds and the float8 / float4 / int4 / int2 kinds
CAST_KINDS = PLAIN_KINDS | LOW_PRECISION_KINDS


@dataclass(frozen=True)
class _Spec:
    """One row of a kind table: allowed operand element kinds, extra categories, attributes, formula."""

    elems: frozenset[ElemKind]
    cats: tuple[C, ...] = ()
    attrs: tuple[AttrSpec, ...] = ()
    doc: str = ""


# -- type rules ----------------------------------------------------------------


def _check_choice(attrs: Attrs, name: str, choices: tuple[str, ...]) -> None:
    if attrs.get(name) not in choices:
        raise GlowTypeError(f"attribute '{name}' is {attrs.get(name)!r}; allowed: {', '.join(choices)}")


#: attributes that take one of a few strings
_CHOICES: dict[str, tuple[str, ...]] = {"approximate": ("none", "tanh"), "direction": ("LEFT", "RIGHT")}


def _check_attr_choices(attrs: Attrs) -> None:
    for name, choices in _CHOICES.items():
        if name in attrs:
            _check_choice(attrs, name, choices)


def unary_rule(allowed: frozenset[ElemKind], result: ElemKind | None = None):  # type: ignore[no-untyped-def]
    """Same shape as the operand; the operand's element kind (or ``result``)."""

    def rule(types: Types, attrs: Attrs) -> list[TensorType]:
        t = req(types, 0)
        check_elems(t, allowed, "Input")
        _check_attr_choices(attrs)
        return [t if result is None else TensorType(result, t.shape)]

    return rule


def binary_rule(allowed: frozenset[ElemKind], result: ElemKind | None = None):  # type: ignore[no-untyped-def]
    """Broadcast operands of one allowed element kind; that kind (or ``result``)."""

    def rule(types: Types, attrs: Attrs) -> list[TensorType]:
        for i, name in enumerate(("LHS", "RHS")):
            check_elems(req(types, i), allowed, name)
        _check_attr_choices(attrs)
        t = broadcast_rule(types, attrs)[0]
        return [t if result is None else TensorType(result, t.shape)]

    return rule


def _pow_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    base, exp = req(types, 0), req(types, 1)
    check_elems(base, NUMERIC_KINDS, "Base")
    check_elems(exp, NUMERIC_KINDS, "Exponent")
    return [TensorType(base.elem, broadcast_shapes(base.shape, exp.shape))]


def _prelu_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x, slope = req(types, 0), req(types, 1)
    check_elems(x, NUMERIC_KINDS, "Input")
    if slope.elem != x.elem:
        raise GlowTypeError(f"Slope has element kind {slope.elem.value}, Input has {x.elem.value}")
    if broadcast_shapes(x.shape, slope.shape) != x.shape:
        raise GlowTypeError(f"Slope {list(slope.shape)} does not broadcast to Input {list(x.shape)}")
    return [x]


def _where_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    cond, a, b = req(types, 0), req(types, 1), req(types, 2)
    check_elems(cond, BOOL_KINDS, "Cond")
    check_elems(a, PLAIN_KINDS, "LHS")
    if a.elem != b.elem:
        raise GlowTypeError(f"LHS and RHS have element kinds {a.elem.value} and {b.elem.value}")
    return [TensorType(a.elem, broadcast_shapes(cond.shape, a.shape, b.shape))]


def _clip_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    check_elems(x, NUMERIC_KINDS, "Input")
    for name, t in (("Min", types[1] if len(types) > 1 else None), ("Max", types[2] if len(types) > 2 else None)):
        if t is None:
            continue
        if t.elem != x.elem:
            raise GlowTypeError(f"{name} has element kind {t.elem.value}, Input has {x.elem.value}")
        if t.size != 1 or t.rank > max(x.rank, 1):
            raise GlowTypeError(f"{name} must be a scalar (one element), got shape {list(t.shape)}")
    return [x]


def _cast_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    check_elems(x, CAST_KINDS, "Input")
    to: ElemKind = attrs["to"]
    if attrs.get("round_mode", "up") not in ("up", "down", "nearest"):
        raise GlowTypeError(f"round_mode must be up, down or nearest, got {attrs.get('round_mode')!r}")
    if to not in CAST_KINDS:
        raise GlowTypeError(f"cannot cast to {to.value}: quantized kinds need a scale and an offset (use Quantize)")
    return [TensorType(to, x.shape)]


# -- the tables ----------------------------------------------------------------

_P = (C.PRIMITIVE,)
_ACT = (C.ACTIVATION,)

_BINARY: dict[str, _Spec] = {
    "Add": _Spec(NUMERIC_KINDS, (C.COMMUTATIVE,) + _P, doc="LHS + RHS (integers wrap)."),
    "Sub": _Spec(NUMERIC_KINDS, _P, doc="LHS - RHS (integers wrap)."),
    "Mul": _Spec(NUMERIC_KINDS, (C.COMMUTATIVE,) + _P, doc="LHS * RHS (integers wrap)."),
    "Div": _Spec(NUMERIC_KINDS, _P, doc="LHS / RHS; integer division truncates toward zero."),
    "Max": _Spec(NUMERIC_KINDS, (C.COMMUTATIVE,) + _P, doc="max(LHS, RHS); NaN propagates."),
    "Min": _Spec(NUMERIC_KINDS, (C.COMMUTATIVE,) + _P, doc="min(LHS, RHS); NaN propagates."),
    "Mod": _Spec(NUMERIC_KINDS, _P, (attr("fmod", AttrType.BOOL, False),),
                 doc="fmod=False: LHS - floor(LHS/RHS)*RHS (sign of RHS, Python %); "
                     "fmod=True: LHS - trunc(LHS/RHS)*RHS (sign of LHS, C fmod)."),
    "And": _Spec(BOOL_KINDS, (C.COMMUTATIVE, C.LOGICAL) + _P, doc="LHS and RHS."),
    "Or": _Spec(BOOL_KINDS, (C.COMMUTATIVE, C.LOGICAL) + _P, doc="LHS or RHS."),
    "Xor": _Spec(BOOL_KINDS, (C.COMMUTATIVE, C.LOGICAL) + _P, doc="LHS xor RHS."),
    "BitwiseAnd": _Spec(INT_KINDS, (C.COMMUTATIVE,) + _P, doc="LHS & RHS."),
    "BitwiseOr": _Spec(INT_KINDS, (C.COMMUTATIVE,) + _P, doc="LHS | RHS."),
    "BitwiseXor": _Spec(INT_KINDS, (C.COMMUTATIVE,) + _P, doc="LHS ^ RHS."),
    "BitShift": _Spec(INT_KINDS, _P, (attr("direction", AttrType.STRING),),
                      doc="direction LEFT: LHS << RHS, RIGHT: LHS >> RHS (arithmetic for signed kinds). "
                          "A shift by a negative amount or by the bit width or more gives 0 (-1 for a right "
                          "shift of a negative value)."),
}

_COMPARE: dict[str, _Spec] = {
    "Equal": _Spec(PLAIN_KINDS, (C.COMMUTATIVE,), doc="LHS == RHS (bool result)."),
    "Less": _Spec(NUMERIC_KINDS, (), doc="LHS < RHS (bool result; false when either is NaN)."),
    "LessOrEqual": _Spec(NUMERIC_KINDS, (), doc="LHS <= RHS (bool result; false when either is NaN)."),
}

_F = FLOAT_KINDS
_UNARY: dict[str, _Spec] = {
    "Abs": _Spec(NUMERIC_KINDS, _P, doc="|x| (signed integers wrap: abs(min) = min)."),
    "Neg": _Spec(SIGNED_KINDS, _P, doc="-x (signed integers wrap)."),
    "Sign": _Spec(NUMERIC_KINDS, _P, doc="-1, 0 or 1 by the sign of x (NaN stays NaN)."),
    "Ceil": _Spec(_F, _P, doc="ceil(x)."),
    "Floor": _Spec(_F, _P, doc="floor(x)."),
    "Round": _Spec(_F, _P, doc="x rounded to the nearest integer, halves to even."),
    "Sqrt": _Spec(_F, _P, doc="sqrt(x)."),
    "Reciprocal": _Spec(_F, (), doc="1 / x."),
    "Exp": _Spec(_F, _P, doc="exp(x)."),
    "Log": _Spec(_F, _P, doc="natural log(x)."),
    "Erf": _Spec(_F, _P, doc="the Gauss error function erf(x)."),
    "Sin": _Spec(_F, _P, doc="sin(x)."),
    "Cos": _Spec(_F, _P, doc="cos(x)."),
    "Tan": _Spec(_F, _P, doc="tan(x)."),
    "Asin": _Spec(_F, _P, doc="asin(x)."),
    "Acos": _Spec(_F, _P, doc="acos(x)."),
    "Atan": _Spec(_F, _P, doc="atan(x)."),
    "Sinh": _Spec(_F, _P, doc="sinh(x)."),
    "Cosh": _Spec(_F, _P, doc="cosh(x)."),
    "Asinh": _Spec(_F, _P, doc="asinh(x)."),
    "Acosh": _Spec(_F, _P, doc="acosh(x)."),
    "Atanh": _Spec(_F, _P, doc="atanh(x)."),
    "Tanh": _Spec(_F, _P + _ACT, doc="tanh(x)."),
    "Sigmoid": _Spec(_F, _P + _ACT, doc="1 / (1 + exp(-x))."),
    "Not": _Spec(BOOL_KINDS, (C.LOGICAL,) + _P, doc="logical not x."),
    "BitwiseNot": _Spec(INT_KINDS, _P, doc="~x."),
    "Relu": _Spec(NUMERIC_KINDS, _ACT, doc="max(x, 0)."),
    "Softplus": _Spec(_F, _ACT, doc="log(1 + exp(x))."),
    "Softsign": _Spec(_F, _ACT, doc="x / (1 + |x|)."),
    "Mish": _Spec(_F, _ACT, doc="x * tanh(softplus(x))."),
    "HardSwish": _Spec(_F, _ACT, doc="x * max(0, min(1, x / 6 + 0.5))."),
    "LeakyRelu": _Spec(_F, _ACT, (attr("alpha", AttrType.FLOAT, 0.009999999776482582),),
                       doc="x if x >= 0 else alpha * x."),
    "Elu": _Spec(_F, _ACT, (attr("alpha", AttrType.FLOAT, 1.0),), doc="alpha * (exp(x) - 1) if x < 0 else x."),
    "Celu": _Spec(_F, _ACT, (attr("alpha", AttrType.FLOAT, 1.0),),
                  doc="max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."),
    "Selu": _Spec(_F, _ACT, (attr("alpha", AttrType.FLOAT, 1.6732631921768188),
                             attr("gamma", AttrType.FLOAT, 1.0507010221481323)),
                  doc="gamma * x if x > 0 else gamma * alpha * (exp(x) - 1)."),
    "HardSigmoid": _Spec(_F, _ACT, (attr("alpha", AttrType.FLOAT, 0.20000000298023224),
                                    attr("beta", AttrType.FLOAT, 0.5)),
                         doc="max(0, min(1, alpha * x + beta))."),
    "ThresholdedRelu": _Spec(_F, _ACT, (attr("alpha", AttrType.FLOAT, 1.0),), doc="x if x > alpha else 0."),
    "Swish": _Spec(_F, _ACT, (attr("alpha", AttrType.FLOAT, 1.0),), doc="x * sigmoid(alpha * x)."),
    "Gelu": _Spec(_F, _ACT, (attr("approximate", AttrType.STRING, "none"),),
                  doc="none: 0.5 * x * (1 + erf(x / sqrt(2))); "
                      "tanh: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))."),
    "Shrink": _Spec(NUMERIC_KINDS, _ACT, (attr("lambd", AttrType.FLOAT, 0.5), attr("bias", AttrType.FLOAT, 0.0)),
                    doc="x + bias if x < -lambd, x - bias if x > lambd, else 0 (integers: computed in "
                        "float64 and truncated)."),
}

_PREDICATES: dict[str, _Spec] = {
    "IsNaN": _Spec(_F, _P, doc="x is NaN (bool result)."),
    "IsInf": _Spec(_F, _P, (attr("detect_negative", AttrType.BOOL, True), attr("detect_positive", AttrType.BOOL, True)),
                   doc="x is +inf (when detect_positive) or -inf (when detect_negative) (bool result)."),
}

for _name, _s in _BINARY.items():
    define_kind(_name, inputs=("LHS", "RHS"), attrs=_s.attrs, infer=binary_rule(_s.elems),
                categories=(C.ELEMENTWISE, C.BINARY) + _s.cats, elems=_s.elems, doc=_s.doc)

for _name, _s in _COMPARE.items():
    define_kind(_name, inputs=("LHS", "RHS"), attrs=_s.attrs, infer=binary_rule(_s.elems, ElemKind.BOOL),
                categories=(C.ELEMENTWISE, C.BINARY, C.COMPARISON, C.PRIMITIVE) + _s.cats,
                elems=_s.elems | BOOL_KINDS, doc=_s.doc)

for _name, _s in _UNARY.items():
    define_kind(_name, inputs=("Input",), attrs=_s.attrs, infer=unary_rule(_s.elems),
                categories=(C.ELEMENTWISE, C.UNARY) + _s.cats, elems=_s.elems, doc=_s.doc)

for _name, _s in _PREDICATES.items():
    define_kind(_name, inputs=("Input",), attrs=_s.attrs, infer=unary_rule(_s.elems, ElemKind.BOOL),
                categories=(C.ELEMENTWISE, C.UNARY) + _s.cats, elems=_s.elems | BOOL_KINDS, doc=_s.doc)

define_kind("Pow", inputs=("Base", "Exponent"), infer=_pow_rule, categories=(C.ELEMENTWISE, C.BINARY, C.PRIMITIVE),
            elems=NUMERIC_KINDS,
            doc="Base ** Exponent with the base's element kind. Float base: computed in float64 and rounded. "
                "Integer base: exact (wrapping) for integer exponents >= 0; a negative integer exponent gives "
                "1 / Base**-e truncated (so 0 unless |Base| == 1); a float exponent: float64 pow, truncated.")
define_kind("PRelu", inputs=("Input", "Slope"), infer=_prelu_rule,
            categories=(C.ELEMENTWISE, C.BINARY, C.ACTIVATION), elems=NUMERIC_KINDS,
            doc="x if x >= 0 else Slope * x; Slope broadcasts to Input's shape.")
define_kind("Where", inputs=("Cond", "LHS", "RHS"), infer=_where_rule, categories=(C.ELEMENTWISE, C.PRIMITIVE),
            elems=PLAIN_KINDS, doc="LHS where Cond else RHS; all three broadcast together.")
define_kind("Clip", inputs=("Input", "Min?", "Max?"), infer=_clip_rule, categories=(C.ELEMENTWISE, C.ACTIVATION),
            elems=NUMERIC_KINDS,
            doc="min(max(x, Min), Max) with scalar bounds (an omitted bound does not clip); "
                "Min > Max gives Max everywhere.")
define_kind("Cast", inputs=("Input",),
            attrs=(attr("to", AttrType.ELEM),
                   attr("saturate", AttrType.INT, 1, doc="float8 targets: 1 clamps to +-max finite"),
                   attr("round_mode", AttrType.STRING, "up", doc="float8e8m0 targets: up, down or nearest")),
            infer=_cast_rule, categories=(C.ELEMENTWISE, C.UNARY, C.PRIMITIVE), elems=CAST_KINDS,
            doc="Convert to element kind `to`: float -> int truncates toward zero (out of range: undefined), "
                "int -> int wraps (also to int4 / int2: the low bits), -> bool is x != 0 (NaN -> true), "
                "float -> float rounds to nearest even. float8 targets (float64 sources through float32, "
                "as ml_dtypes): saturate=1 clamps +-inf and values beyond the largest finite value to it "
                "(NaN stays NaN); saturate=0 overflows to inf (e5m2) or NaN (the others). float4e2m1 "
                "always saturates, NaN becomes -0 (+NaN) or +0 (-NaN), as ml_dtypes and onnx.reference. "
                "float8e8m0 targets: the exponent of |x| as float32, rounded by round_mode (up: any fraction "
                "adds 1; down: none; nearest: a fraction >= 1/2 adds 1, below the normal range > 1/2), "
                "inf / NaN -> NaN (0xFF), saturate=1 keeps 2^127 from rounding up to NaN.")

#: ONNX-style names of the kinds by table, for tests and documentation
BINARY_KINDS = tuple(_BINARY)
COMPARE_KINDS = tuple(_COMPARE)
UNARY_KINDS = tuple(_UNARY)
PREDICATE_KINDS = tuple(_PREDICATES)

#: kind -> element kinds its (first) operands may have; import rules refuse others as unsupported
INPUT_ELEMS: dict[str, frozenset[ElemKind]] = {
    **{n: s.elems for table in (_BINARY, _COMPARE, _UNARY, _PREDICATES) for n, s in table.items()},
    "Pow": NUMERIC_KINDS,
    "PRelu": NUMERIC_KINDS,
    "Where": PLAIN_KINDS,
    "Clip": NUMERIC_KINDS,
    "Cast": CAST_KINDS,
}
