"""The element-wise operation table: one IR builder per element-wise primitive kind.

An operation is ``fn(b, args, in_elems, out_elem, attrs) -> value``: ``args``
are compute values (``dtypes.compute_type``; scalars or vectors, all of one
lane count) of the operands' element kinds ``in_elems``; it returns the
result as a compute value of ``out_elem``. The loop generator
(``elementwise.py``) loads, converts, chains and stores around it, so one
table serves single instructions and fused chains alike.

The semantics are the interpreter's (numpy's): float16 / bfloat16 computed in
float32 and rounded once; integers wrap; integer division truncates toward
zero (x / 0 = x, as the interpreter); Max / Min propagate NaN; Mod follows
Python's ``%`` (or C's ``fmod``); shifts by the bit width or more give 0
(or -1 for a negative value shifted right).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from llvmlite import ir

from glow_backend_cpu.emit import ew_math
from glow_backend_cpu.emit.dtypes import FLOATS, UNSIGNED, compute_type, convert, is_float
from glow_backend_cpu.helpers import I1, I64, call_intrinsic, const_like, lanes_of, scalar_type, vec_type
from glow_core.ir.types import LOW_PRECISION_KINDS, ElemKind

E = ElemKind
Attrs = Mapping[str, Any]
OpFn = Callable[[ir.IRBuilder, Sequence[ir.Value], Sequence[ElemKind], ElemKind, Attrs], ir.Value]

#: kind -> operation builder
EW_OPS: dict[str, OpFn] = {}
#: kind -> element kinds the operation accepts (of every operand and its result)
EW_ELEMS: dict[str, frozenset[ElemKind]] = {}
#: kinds whose operation calls the C library lane by lane (slower; kept out of long fused loops' way)
SCALAR_CALLS: set[str] = set()

INTS = frozenset({E.INT8, E.INT16, E.INT32, E.INT64, E.UINT8, E.UINT16, E.UINT32, E.UINT64})
SIGNED_INTS = frozenset({E.INT8, E.INT16, E.INT32, E.INT64})
NUMERIC = FLOATS | INTS
ALL = NUMERIC | {E.BOOL}


def op(*kinds: str, elems: frozenset[ElemKind], scalar_calls: bool = False) -> Callable[[OpFn], OpFn]:
    def deco(fn: OpFn) -> OpFn:
        for k in kinds:
            if k in EW_OPS:
                raise ValueError(f"element-wise op {k} defined twice")
            EW_OPS[k] = fn
            EW_ELEMS[k] = elems
            if scalar_calls:
                SCALAR_CALLS.add(k)
        return fn
    return deco


def _c(v: ir.Value, value: float) -> ir.Constant:
    return const_like(v.type, value)


def _isnan(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    return b.fcmp_unordered("uno", v, v)


# -- arithmetic ----------------------------------------------------------------------------------

def _simple(fop: str, iop: str) -> OpFn:
    def fn(b: ir.IRBuilder, a: Sequence[ir.Value], ie: Sequence[ElemKind], oe: ElemKind, at: Attrs) -> ir.Value:
        return getattr(b, fop if is_float(ie[0]) else iop)(a[0], a[1])
    return fn


op("Add", elems=NUMERIC)(_simple("fadd", "add"))
op("Sub", elems=NUMERIC)(_simple("fsub", "sub"))
op("Mul", elems=NUMERIC)(_simple("fmul", "mul"))


@op("Div", elems=NUMERIC)
def _div(b: ir.IRBuilder, a: Sequence[ir.Value], ie: Sequence[ElemKind], oe: ElemKind, at: Attrs) -> ir.Value:
    x, y = a
    if is_float(ie[0]):
        return b.fdiv(x, y)
    # the interpreter divides (x - fmod(x, y)) by y, or by 1 where y == 0: x / 0 = x
    zero = b.icmp_unsigned("==", y, _c(y, 0))
    if ie[0] in UNSIGNED:
        return b.udiv(x, b.select(zero, _c(y, 1), y))
    minus_one = b.icmp_signed("==", y, _c(y, -1))
    safe = b.select(b.or_(zero, minus_one), _c(y, 1), y)
    q = b.sdiv(x, safe)
    return b.select(minus_one, b.sub(_c(x, 0), x), q)  # x / -1 = -x, wrapping (INT_MIN stays)


def _minmax(greater: bool) -> OpFn:
    def fn(b: ir.IRBuilder, a: Sequence[ir.Value], ie: Sequence[ElemKind], oe: ElemKind, at: Attrs) -> ir.Value:
        x, y = a
        e = ie[0]
        if is_float(e):
            pick_x = b.fcmp_ordered(">=" if greater else "<=", x, y)
            r = b.select(pick_x, x, y)
            return b.select(_isnan(b, x), x, r)  # a NaN in either operand gives NaN
        cmp = b.icmp_unsigned if e in UNSIGNED else b.icmp_signed
        return b.select(cmp(">" if greater else "<", x, y), x, y)
    return fn


op("Max", elems=NUMERIC)(_minmax(True))
op("Min", elems=NUMERIC)(_minmax(False))


@op("Mod", elems=NUMERIC)
def _mod(b: ir.IRBuilder, a: Sequence[ir.Value], ie: Sequence[ElemKind], oe: ElemKind, at: Attrs) -> ir.Value:
    x, y = a
    e = ie[0]
    fmod = bool(at.get("fmod", False))
    if is_float(e):
        r = b.frem(x, y)
        if fmod:
            return r
        # numpy's float %: the sign of the divisor; a zero result takes the divisor's sign
        nz = b.fcmp_ordered("!=", r, _c(r, 0.0))
        differ = b.xor(b.fcmp_ordered("<", r, _c(r, 0.0)), b.fcmp_ordered("<", y, _c(y, 0.0)))
        adj = b.select(b.and_(nz, differ), b.fadd(r, y), r)
        zero = call_intrinsic(b, "copysign", [_c(r, 0.0), y])
        res = b.select(nz, adj, zero)
        return b.select(_isnan(b, r), r, res)  # x % 0, inf % y: NaN
    zero = b.icmp_unsigned("==", y, _c(y, 0))
    if e in UNSIGNED:
        r = b.urem(x, b.select(zero, _c(y, 1), y))
        return b.select(zero, _c(x, 0), r)
    minus_one = b.icmp_signed("==", y, _c(y, -1))
    safe = b.select(b.or_(zero, minus_one), _c(y, 1), y)
    r = b.srem(x, safe)  # C remainder: the sign of the dividend
    if not fmod:
        differ = b.xor(b.icmp_signed("<", r, _c(r, 0)), b.icmp_signed("<", y, _c(y, 0)))
        r = b.select(b.and_(b.icmp_signed("!=", r, _c(r, 0)), differ), b.add(r, y), r)
    return b.select(b.or_(zero, minus_one), _c(x, 0), r)


@op("BitShift", elems=INTS)
def _bitshift(b: ir.IRBuilder, a: Sequence[ir.Value], ie: Sequence[ElemKind], oe: ElemKind, at: Attrs) -> ir.Value:
    x, s = a
    width = scalar_type(x.type).width
    in_range = b.icmp_unsigned("<", s, _c(s, width))
    safe = b.select(in_range, s, _c(s, 0))
    if at["direction"] == "LEFT":
        return b.select(in_range, b.shl(x, safe), _c(x, 0))
    if ie[0] in UNSIGNED:
        return b.select(in_range, b.lshr(x, safe), _c(x, 0))
    out_of_range = b.select(b.icmp_signed("<", x, _c(x, 0)), _c(x, -1), _c(x, 0))
    return b.select(in_range, b.ashr(x, safe), out_of_range)


def _int_pow(b: ir.IRBuilder, base: ir.Value, exp: ir.Value, be: ElemKind, ee: ElemKind) -> ir.Value:
    """Integer ** integer in 64 bits, wrapping; negative exponents truncate 1 / b**-e."""
    lanes = lanes_of(base.type)
    wt = vec_type(I64, lanes)
    unsigned = be in UNSIGNED
    bw = convert(b, base, be, E.UINT64 if unsigned else E.INT64)
    if ee in UNSIGNED:
        ew = convert(b, exp, ee, E.UINT64)
        top = const_like(wt, (1 << 63) - 1)
        ew = b.select(b.icmp_unsigned(">", ew, top), top, ew)
    else:
        ew = convert(b, exp, ee, E.INT64)
    neg = b.icmp_signed("<", ew, const_like(wt, 0))
    e = b.select(neg, const_like(wt, 0), ew)
    result = const_like(wt, 1)
    sq = bw
    for _ in range(63):
        bit = b.icmp_unsigned("!=", b.and_(e, const_like(wt, 1)), const_like(wt, 0))
        result = b.select(bit, b.mul(result, sq), result)
        sq = b.mul(sq, sq)
        e = b.lshr(e, const_like(wt, 1))
    one, zero = const_like(wt, 1), const_like(wt, 0)
    if unsigned:
        negres = b.select(b.icmp_unsigned("==", bw, one), one, zero)
    else:
        odd = b.icmp_unsigned("!=", b.and_(ew, one), zero)
        m1 = const_like(wt, -1)
        negres = b.select(b.icmp_signed("==", bw, one), one,
                          b.select(b.icmp_signed("==", bw, m1), b.select(odd, m1, one), zero))
    return b.select(neg, negres, result)


def splat_constant(v: ir.Value) -> float | None:
    """The value of a constant whose lanes are all equal (a splat immediate), else None."""
    if not isinstance(v, ir.Constant):
        return None
    if isinstance(v.type, ir.VectorType):
        consts = v.constant if isinstance(v.constant, (list, tuple)) else None
        if not consts:
            return None
        vals = {c.constant for c in consts}
        if len(vals) != 1:
            return None
        val = vals.pop()
    else:
        val = v.constant
    return float(val) if isinstance(val, (int, float)) else None


def _pow_three_quarters(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    s = call_intrinsic(b, "sqrt", [x])
    r = b.fmul(s, call_intrinsic(b, "sqrt", [s]))
    return b.select(b.fcmp_ordered("==", x, _c(x, float("-inf"))), _c(x, float("inf")), r)


#: constant float exponents computed without libm (within an ulp or two of the correctly rounded pow)
_POW_SPECIAL: dict[float, Callable[[ir.IRBuilder, ir.Value], ir.Value]] = {
    1.0: lambda b, x: x,
    2.0: lambda b, x: b.fmul(x, x),
    3.0: lambda b, x: b.fmul(b.fmul(x, x), x),
    -1.0: lambda b, x: b.fdiv(_c(x, 1.0), x),
    0.5: lambda b, x: call_intrinsic(b, "sqrt", [x]),  # numpy's power takes sqrt for 0.5 too
    0.75: _pow_three_quarters,
}


@op("Pow", elems=NUMERIC, scalar_calls=True)
def _pow(b: ir.IRBuilder, a: Sequence[ir.Value], ie: Sequence[ElemKind], oe: ElemKind, at: Attrs) -> ir.Value:
    x, y = a
    c = splat_constant(y)
    if c is not None and is_float(ie[0]) and ie[0] == oe and c in _POW_SPECIAL:
        return _POW_SPECIAL[c](b, x)
    if is_float(ie[0]) or is_float(ie[1]):
        # float64 pow, rounded (float result) or truncated (integer base), as the interpreter
        xd = convert(b, x, ie[0], E.FLOAT64)
        yd = convert(b, y, ie[1], E.FLOAT64)
        r = ew_math.libm_call(b, "pow", [xd, yd])
        return convert(b, r, E.FLOAT64, oe)
    r = _int_pow(b, x, y, ie[0], ie[1])
    return convert(b, r, E.UINT64 if ie[0] in UNSIGNED else E.INT64, oe)


# -- logic, bitwise, comparison --------------------------------------------------------------------

op("And", elems=frozenset({E.BOOL}))(lambda b, a, ie, oe, at: b.and_(a[0], a[1]))
op("Or", elems=frozenset({E.BOOL}))(lambda b, a, ie, oe, at: b.or_(a[0], a[1]))
op("Xor", elems=frozenset({E.BOOL}))(lambda b, a, ie, oe, at: b.xor(a[0], a[1]))
op("Not", elems=frozenset({E.BOOL}))(lambda b, a, ie, oe, at: b.xor(a[0], _c(a[0], 1)))
op("BitwiseAnd", elems=INTS)(lambda b, a, ie, oe, at: b.and_(a[0], a[1]))
op("BitwiseOr", elems=INTS)(lambda b, a, ie, oe, at: b.or_(a[0], a[1]))
op("BitwiseXor", elems=INTS)(lambda b, a, ie, oe, at: b.xor(a[0], a[1]))
op("BitwiseNot", elems=INTS)(lambda b, a, ie, oe, at: b.xor(a[0], _c(a[0], -1)))


def _compare(pred: str) -> OpFn:
    def fn(b: ir.IRBuilder, a: Sequence[ir.Value], ie: Sequence[ElemKind], oe: ElemKind, at: Attrs) -> ir.Value:
        e = ie[0]
        if is_float(e):
            return b.fcmp_ordered(pred, a[0], a[1])
        if e in UNSIGNED or e is E.BOOL:
            return b.icmp_unsigned(pred, a[0], a[1])
        return b.icmp_signed(pred, a[0], a[1])
    return fn


op("Equal", elems=ALL)(_compare("=="))  # (bool results)
op("Less", elems=ALL)(_compare("<"))
op("LessOrEqual", elems=ALL)(_compare("<="))


@op("Where", elems=ALL)
def _where(b: ir.IRBuilder, a: Sequence[ir.Value], ie: Sequence[ElemKind], oe: ElemKind, at: Attrs) -> ir.Value:
    return b.select(a[0], a[1], a[2])


@op("Cast", elems=ALL | LOW_PRECISION_KINDS)
def _cast(b: ir.IRBuilder, a: Sequence[ir.Value], ie: Sequence[ElemKind], oe: ElemKind, at: Attrs) -> ir.Value:
    return convert(b, a[0], ie[0], oe, bool(at.get("saturate", 1)), str(at.get("round_mode", "up")))


# -- unary -----------------------------------------------------------------------------------------

@op("Abs", elems=NUMERIC)
def _abs(b: ir.IRBuilder, a: Sequence[ir.Value], ie: Sequence[ElemKind], oe: ElemKind, at: Attrs) -> ir.Value:
    x = a[0]
    if is_float(ie[0]):
        return call_intrinsic(b, "fabs", [x])
    if ie[0] in UNSIGNED:
        return x
    return b.select(b.icmp_signed("<", x, _c(x, 0)), b.sub(_c(x, 0), x), x)


@op("Neg", elems=NUMERIC - frozenset({E.UINT8, E.UINT16, E.UINT32, E.UINT64}))
def _neg(b: ir.IRBuilder, a: Sequence[ir.Value], ie: Sequence[ElemKind], oe: ElemKind, at: Attrs) -> ir.Value:
    x = a[0]
    return b.fneg(x) if is_float(ie[0]) else b.sub(_c(x, 0), x)


@op("Sign", elems=NUMERIC)
def _sign(b: ir.IRBuilder, a: Sequence[ir.Value], ie: Sequence[ElemKind], oe: ElemKind, at: Attrs) -> ir.Value:
    x = a[0]
    if is_float(ie[0]):
        r = b.select(b.fcmp_ordered(">", x, _c(x, 0.0)), _c(x, 1.0),
                     b.select(b.fcmp_ordered("<", x, _c(x, 0.0)), _c(x, -1.0), _c(x, 0.0)))
        return b.select(_isnan(b, x), x, r)
    if ie[0] in UNSIGNED:
        return b.zext(b.icmp_unsigned("!=", x, _c(x, 0)), x.type)
    pos = b.zext(b.icmp_signed(">", x, _c(x, 0)), x.type)
    negv = b.zext(b.icmp_signed("<", x, _c(x, 0)), x.type)
    return b.sub(pos, negv)


def _intrinsic(name: str) -> OpFn:
    return lambda b, a, ie, oe, at: call_intrinsic(b, name, [a[0]])


op("Sqrt", elems=FLOATS)(_intrinsic("sqrt"))
op("Floor", elems=FLOATS)(_intrinsic("floor"))
op("Ceil", elems=FLOATS)(_intrinsic("ceil"))
op("Round", elems=FLOATS)(_intrinsic("roundeven"))
op("Exp", elems=FLOATS)(lambda b, a, ie, oe, at: ew_math.exp(b, a[0]))


def _libm(name: str) -> OpFn:
    return lambda b, a, ie, oe, at: ew_math.libm_call(b, name, [a[0]])


@op("Log", elems=FLOATS)
def _log(b: ir.IRBuilder, a: Sequence[ir.Value], ie: Sequence[ElemKind], oe: ElemKind, at: Attrs) -> ir.Value:
    """float32: the vectorized ``ew_math.log_f32``; others: libm."""
    if ew_math.is_f32(a[0]):
        return ew_math.log_f32(b, a[0])
    return ew_math.libm_call(b, "log", [a[0]])


for _k, _f in {"Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin", "Acos": "acos",
               "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh",
               "Atanh": "atanh"}.items():
    op(_k, elems=FLOATS, scalar_calls=True)(_libm(_f))


@op("Tanh", elems=FLOATS)
def _tanh(b: ir.IRBuilder, a: Sequence[ir.Value], ie: Sequence[ElemKind], oe: ElemKind, at: Attrs) -> ir.Value:
    """float32: the vectorized ``ew_math.tanh_f32`` the recurrent kernels use (a libm call per lane made a
    tanh-GELU network spend its time in ``tanhf``); others: libm."""
    if ew_math.is_f32(a[0]):
        return ew_math.tanh_f32(b, a[0])
    return ew_math.libm_call(b, "tanh", [a[0]])


@op("Erf", elems=FLOATS)
def _erf(b: ir.IRBuilder, a: Sequence[ir.Value], ie: Sequence[ElemKind], oe: ElemKind, at: Attrs) -> ir.Value:
    """float32: the vectorized ``ew_math.erf_f32`` (GELU's erf in one pass); others: libm in float64."""
    if ew_math.is_f32(a[0]):
        return ew_math.erf_f32(b, a[0])
    return ew_math.libm_call_f64(b, "erf", [a[0]])


@op("Sigmoid", elems=FLOATS)
def _sigmoid(b: ir.IRBuilder, a: Sequence[ir.Value], ie: Sequence[ElemKind], oe: ElemKind, at: Attrs) -> ir.Value:
    x = a[0]
    e = ew_math.exp(b, b.fneg(call_intrinsic(b, "fabs", [x])))
    den = b.fadd(_c(x, 1.0), e)
    return b.select(b.fcmp_ordered(">=", x, _c(x, 0.0)), b.fdiv(_c(x, 1.0), den), b.fdiv(e, den))


@op("IsNaN", elems=FLOATS | {E.BOOL})
def _isnan_op(b: ir.IRBuilder, a: Sequence[ir.Value], ie: Sequence[ElemKind], oe: ElemKind, at: Attrs) -> ir.Value:
    x = a[0]
    if not is_float(ie[0]):
        return const_like(vec_type(I1, lanes_of(x.type)), 0)
    return _isnan(b, x)


@op("IsInf", elems=FLOATS | {E.BOOL})
def _isinf(b: ir.IRBuilder, a: Sequence[ir.Value], ie: Sequence[ElemKind], oe: ElemKind, at: Attrs) -> ir.Value:
    x = a[0]
    f = const_like(vec_type(I1, lanes_of(x.type)), 0)
    if not is_float(ie[0]):
        return f
    r = f
    if at.get("detect_positive", True):
        r = b.or_(r, b.fcmp_ordered("==", x, _c(x, float("inf"))))
    if at.get("detect_negative", True):
        r = b.or_(r, b.fcmp_ordered("==", x, _c(x, float("-inf"))))
    return r
