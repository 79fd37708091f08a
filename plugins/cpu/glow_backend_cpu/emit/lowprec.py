"""float8 / float4 / int4 / int2 element kinds in native code: decoding and encoding by bit arithmetic.

Memory holds one element per byte, as ml_dtypes does (and so the arrays a user
passes and gets back need no conversion): a float8 code, a float4 code or the
4- / 2-bit integer's two's complement pattern in the low bits. The compute type
of these kinds is that byte (``i8``): Cast is their only arithmetic, and it
converts through float32 (floats) or a wider integer.

Encoding float32 -> float8 / float4 (round to nearest even, vectorizable, no
table): with ``e`` the input's unbiased exponent clamped to
``[emin, 30]`` (``emin`` the smallest normal exponent of the target), the
target's spacing there is ``2^(e - m)`` (``m`` mantissa bits), so
``r = rint(|x| / 2^(e - m))`` is the rounded significand and the code is
``((e + bias) << m) + r - 2^m`` (which also covers subnormals, whose ``e`` is
``emin`` and ``emin + bias == 1``, and a rounding that carries into the next
binade). A rounded value above the largest finite one overflows: to it when
saturating, else to inf (e5m2) or NaN (the others). Everything matches
``onnx.reference`` (ml_dtypes ``astype`` after a clip for ``saturate``),
including its float64 -> float32 -> float8 path and float4e2m1's NaN -> -0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from glow_backend_cpu.helpers import F32, I8, I32, call_intrinsic, const_like, lanes_of, vec_type
from glow_core.ir.types import SMALL_FLOAT_KINDS, SMALL_INT_KINDS, ElemKind

E = ElemKind
#: ``dtypes.convert`` (numpy astype between the plain kinds' compute values)
ConvertFn = Callable[[ir.IRBuilder, ir.Value, ElemKind, ElemKind], ir.Value]


@dataclass(frozen=True)
class SmallFloat:
    """One small float format: mantissa / exponent bits, bias, specials."""

    mant: int
    exp: int
    bias: int
    max_value: float
    #: "fn" (NaN is S.1111.111), "fnuz" (NaN is 0x80, no -0), "ieee" (inf and NaN, e5m2), "none" (float4)
    specials: str
    #: the code of ``max_value``
    max_code: int

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def sign_shift(self) -> int:
        return self.mant + self.exp

FORMATS: dict[ElemKind, SmallFloat] = {
    E.FLOAT8E4M3FN: SmallFloat(3, 4, 7, 448.0, "fn", 0x7E),
    E.FLOAT8E4M3FNUZ: SmallFloat(3, 4, 8, 240.0, "fnuz", 0x7F),
    E.FLOAT8E5M2: SmallFloat(2, 5, 15, 57344.0, "ieee", 0x7B),
    E.FLOAT8E5M2FNUZ: SmallFloat(2, 5, 16, 57344.0, "fnuz", 0x7F),
    E.FLOAT4E2M1: SmallFloat(1, 2, 1, 6.0, "none", 0x7),
}

#: 4- / 2-bit integers: (bits, signed)
INT_FORMATS: dict[ElemKind, tuple[int, bool]] = {
    E.INT4: (4, True), E.UINT4: (4, False), E.INT2: (2, True), E.UINT2: (2, False),
}


def _vt(t: ir.Type, like: ir.Value) -> ir.Type:
    return vec_type(t, lanes_of(like.type))


def _c(like: ir.Value, value: float) -> ir.Constant:
    return const_like(like.type, value)


# -- decoding ------------------------------------------------------------------------------------

def decode_int(b: ir.IRBuilder, v: ir.Value, elem: ElemKind) -> tuple[ir.Value, ElemKind]:
    """A 4- / 2-bit integer byte as an int8 (signed kinds) or uint8 compute value."""
    bits, signed = INT_FORMATS[elem]
    if signed:
        sh = _c(v, 8 - bits)
        return b.ashr(b.shl(v, sh), sh), E.INT8
    return b.and_(v, _c(v, (1 << bits) - 1)), E.UINT8


def decode_e8m0(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """A float8e8m0 code as float32: 2^(code - 127) (code 0: the subnormal 2^-127), 0xFF: NaN."""
    c = b.zext(v, _vt(I32, v))
    r = b.select(b.icmp_unsigned("==", c, _c(c, 0)), _c(c, 0x00400000), b.shl(c, _c(c, 23)))
    r = b.select(b.icmp_unsigned("==", c, _c(c, 0xFF)), _c(c, 0x7FC00000), r)
    return b.bitcast(r, _vt(F32, v))


def encode_e8m0(b: ir.IRBuilder, x: ir.Value, saturate: bool, round_mode: str) -> ir.Value:
    """A float32 value as a float8e8m0 code: its biased exponent, rounded by ``round_mode``
    (up: any fraction adds 1; nearest: the guard bit, a tie below the normal range rounds down)."""
    bits = b.bitcast(x, _vt(I32, x))
    exp = b.and_(b.lshr(bits, _c(bits, 23)), _c(bits, 0xFF))
    frac = b.and_(bits, _c(bits, 0x7FFFFF))
    zero = _c(frac, 0)
    if round_mode == "up":
        inc = b.icmp_unsigned("!=", frac, zero)
    elif round_mode == "down":
        inc = b.icmp_unsigned("!=", zero, zero)
    else:
        guard = b.icmp_unsigned("!=", b.and_(frac, _c(frac, 0x400000)), zero)
        rest = b.icmp_unsigned("!=", b.and_(frac, _c(frac, 0x3FFFFF)), zero)
        inc = b.and_(guard, b.or_(rest, b.icmp_unsigned("!=", exp, zero)))
    if saturate:
        inc = b.and_(inc, b.icmp_unsigned("!=", exp, _c(exp, 0xFE)))
    code = b.add(exp, b.zext(inc, bits.type))
    code = b.select(b.icmp_unsigned("==", exp, _c(exp, 0xFF)), _c(exp, 0xFF), code)
    return b.trunc(code, _vt(I8, x))


def decode_float(b: ir.IRBuilder, v: ir.Value, elem: ElemKind) -> ir.Value:
    """A float8 / float4 code (i8) as the float32 it denotes (exact; NaN keeps the code's sign)."""
    if elem is E.FLOAT8E8M0:
        return decode_e8m0(b, v)
    f = FORMATS[elem]
    c = b.zext(v, _vt(I32, v))
    sign = b.and_(b.lshr(c, _c(c, f.sign_shift)), _c(c, 1))
    field = b.and_(b.lshr(c, _c(c, f.mant)), _c(c, (1 << f.exp) - 1))
    mant = b.and_(c, _c(c, (1 << f.mant) - 1))
    sign32 = b.shl(sign, _c(c, 31))
    normal_bits = b.or_(sign32, b.or_(b.shl(b.add(field, _c(c, 127 - f.bias)), _c(c, 23)),
                                      b.shl(mant, _c(c, 23 - f.mant))))
    normal = b.bitcast(normal_bits, _vt(F32, v))
    sub_mag = b.fmul(b.uitofp(mant, _vt(F32, v)), const_like(_vt(F32, v), 2.0 ** (f.emin - f.mant)))
    sub = b.select(b.icmp_unsigned("!=", sign, _c(sign, 0)), b.fneg(sub_mag), sub_mag)
    r = b.select(b.icmp_unsigned("==", field, _c(field, 0)), sub, normal)
    nan = b.bitcast(b.or_(sign32, _c(c, 0x7FC00000)), _vt(F32, v))
    low = b.and_(c, _c(c, (1 << f.sign_shift) - 1))
    if f.specials == "fn":
        r = b.select(b.icmp_unsigned("==", low, _c(low, (1 << f.sign_shift) - 1)), nan, r)
    elif f.specials == "fnuz":
        r = b.select(b.icmp_unsigned("==", c, _c(c, 1 << f.sign_shift)), nan, r)
    elif f.specials == "ieee":
        top = b.icmp_unsigned("==", field, _c(field, (1 << f.exp) - 1))
        inf = b.bitcast(b.or_(sign32, _c(c, 0x7F800000)), _vt(F32, v))
        r = b.select(top, b.select(b.icmp_unsigned("==", mant, _c(mant, 0)), inf, nan), r)
    return r


# -- encoding ------------------------------------------------------------------------------------

def encode_float(b: ir.IRBuilder, x: ir.Value, elem: ElemKind, saturate: bool) -> ir.Value:
    """A float32 value as the nearest (ties to even) code of ``elem`` (i8), see the module doc."""
    f = FORMATS[elem]
    bits = b.bitcast(x, _vt(I32, x))
    sign = b.lshr(bits, _c(bits, 31))
    a = call_intrinsic(b, "fabs", [x])
    ex = b.sub(b.and_(b.lshr(bits, _c(bits, 23)), _c(bits, 0xFF)), _c(bits, 127))
    e = b.select(b.icmp_signed("<", ex, _c(ex, f.emin)), _c(ex, f.emin), ex)
    e = b.select(b.icmp_signed(">", e, _c(e, 30)), _c(e, 30), e)
    k = b.sub(e, _c(e, f.mant))  # the spacing 2^k of the target's values in x's binade
    inv = b.bitcast(b.shl(b.sub(_c(k, 127), k), _c(k, 23)), x.type)  # 2^-k
    r = call_intrinsic(b, "rint", [b.fmul(a, inv)])
    r = call_intrinsic(b, "minnum", [r, _c(r, float(1 << (f.mant + 2)))])  # NaN / huge: bounded
    ri = b.fptosi(r, bits.type)
    code = b.sub(b.add(b.shl(b.add(e, _c(e, f.bias)), _c(e, f.mant)), ri), _c(ri, 1 << f.mant))
    scale = b.bitcast(b.shl(b.add(k, _c(k, 127)), _c(k, 23)), x.type)
    over = b.fcmp_ordered(">", b.fmul(r, scale), const_like(x.type, f.max_value))
    over = b.or_(over, b.fcmp_ordered("==", a, const_like(x.type, float("inf"))))
    sbit = b.shl(sign, _c(sign, f.sign_shift))
    if f.specials == "fnuz":
        sbit = b.select(b.icmp_unsigned("==", code, _c(code, 0)), _c(sbit, 0), sbit)
    nan_code, over_code = _specials(b, f, sign, sbit, saturate)
    res = b.select(over, over_code, b.or_(code, sbit))
    res = b.select(b.fcmp_unordered("uno", x, x), nan_code, res)
    return b.trunc(res, _vt(I8, x))


def _specials(b: ir.IRBuilder, f: SmallFloat, sign: ir.Value, sbit: ir.Value,
              saturate: bool) -> tuple[ir.Value, ir.Value]:
    """(the NaN code, the overflow code) for format ``f``, as i32 values like ``sign``."""
    signed_max = b.or_(_c(sign, f.max_code), b.shl(sign, _c(sign, f.sign_shift)))
    top = 1 << f.sign_shift
    if f.specials == "fn":
        nan = b.or_(_c(sign, top - 1), b.shl(sign, _c(sign, f.sign_shift)))
        return nan, signed_max if saturate else nan
    if f.specials == "fnuz":
        return _c(sign, top), signed_max if saturate else _c(sign, top)
    if f.specials == "ieee":
        s = b.shl(sign, _c(sign, f.sign_shift))
        nan = b.or_(_c(sign, ((1 << f.exp) - 1) << f.mant | (1 << (f.mant - 1))), s)
        inf = b.or_(_c(sign, ((1 << f.exp) - 1) << f.mant), s)
        return nan, signed_max if saturate else inf
    # float4e2m1: no NaN and no inf; always saturates; NaN -> -0 for +NaN, +0 for -NaN (ml_dtypes)
    return b.shl(b.xor(sign, _c(sign, 1)), _c(sign, f.sign_shift)), signed_max


def encode_int(b: ir.IRBuilder, v: ir.Value, elem: ElemKind) -> ir.Value:
    """An integer compute value (any width) as a 4- / 2-bit pattern: its low bits (wraps)."""
    bits, _ = INT_FORMATS[elem]
    w = v.type.element.width if isinstance(v.type, ir.VectorType) else v.type.width
    if w > 8:
        v = b.trunc(v, _vt(I8, v))
    elif w < 8:
        v = b.zext(v, _vt(I8, v))
    return b.and_(v, _c(v, (1 << bits) - 1))


def to_f32(b: ir.IRBuilder, v: ir.Value, src: ElemKind, convert: ConvertFn) -> ir.Value:
    """A compute value of ``src`` as float32, as ml_dtypes feeds its float8 conversions
    (float64 rounds to float32 first; integers convert to float32 directly)."""
    return convert(b, v, src, E.FLOAT32)


def convert_low(b: ir.IRBuilder, v: ir.Value, src: ElemKind, dst: ElemKind, saturate: bool,
                convert: ConvertFn, round_mode: str = "up") -> ir.Value:
    """Cast where ``src`` or ``dst`` is a low-precision kind; ``convert`` handles the plain kinds."""
    if src in SMALL_INT_KINDS:
        v, src = decode_int(b, v, src)
    elif src in SMALL_FLOAT_KINDS:
        v, src = decode_float(b, v, src), E.FLOAT32
    if dst is E.FLOAT8E8M0:
        return encode_e8m0(b, to_f32(b, v, src, convert), saturate, round_mode)
    if dst in SMALL_FLOAT_KINDS:
        return encode_float(b, to_f32(b, v, src, convert), dst, saturate)
    if dst in SMALL_INT_KINDS:
        if src in (E.FLOAT32, E.FLOAT64, E.FLOAT16, E.BFLOAT16):
            v, src = convert(b, v, src, E.INT64), E.INT64
        elif src is E.BOOL:
            v = b.zext(v, _vt(I8, v))
        return encode_int(b, v, dst)
    return convert(b, v, src, dst)
