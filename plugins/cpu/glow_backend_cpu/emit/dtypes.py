"""Element kinds as LLVM types: how a kind is stored, how it is computed, and the conversions.

- *storage* type: what memory holds (``float``, ``half``, ``i16`` for bfloat16,
  ``i8`` for bool, ``iN`` for integers and quantized kinds);
- *compute* type: what element-wise arithmetic runs in (``float`` for the two
  16-bit floats, ``i1`` for bool, the storage type otherwise), as the
  interpreter computes float16 / bfloat16 in float32 and rounds once.

:func:`to_compute` / :func:`to_storage` convert (scalars or vectors);
:func:`convert` is numpy's ``astype`` between compute values of two kinds
(the Cast semantics).
"""

from __future__ import annotations

from llvmlite import ir

from glow_backend_cpu.helpers import F16, F32, F64, I1, I8, I16, I32, I64, const_like, lanes_of, vec_type
from glow_backend_cpu.emit.lowprec import convert_low
from glow_core.ir.types import LOW_PRECISION_KINDS, ElemKind

E = ElemKind

_STORAGE: dict[ElemKind, ir.Type] = {
    E.FLOAT32: F32, E.FLOAT64: F64, E.FLOAT16: F16, E.BFLOAT16: I16,
    E.INT8: I8, E.UINT8: I8, E.INT16: I16, E.UINT16: I16, E.INT32: I32, E.UINT32: I32,
    E.INT64: I64, E.UINT64: I64, E.BOOL: I8, E.INT8Q: I8, E.UINT8Q: I8,
    # one element per byte, computed as that byte: Cast converts them (emit/lowprec.py)
    **{k: I8 for k in LOW_PRECISION_KINDS},
}

UNSIGNED = frozenset({E.UINT8, E.UINT16, E.UINT32, E.UINT64, E.UINT8Q})
FLOATS = frozenset({E.FLOAT32, E.FLOAT64, E.FLOAT16, E.BFLOAT16})
NARROW_FLOATS = frozenset({E.FLOAT16, E.BFLOAT16})


def storage_type(elem: ElemKind) -> ir.Type:
    return _STORAGE[elem]


def compute_type(elem: ElemKind) -> ir.Type:
    if elem in NARROW_FLOATS:
        return F32
    if elem is E.BOOL:
        return I1
    return _STORAGE[elem]


def is_float(elem: ElemKind) -> bool:
    return elem in FLOATS


def is_signed(elem: ElemKind) -> bool:
    return elem not in UNSIGNED and elem is not E.BOOL and elem not in FLOATS


def bits_type(elem: ElemKind) -> ir.IntType:
    """An integer type of the element's width (for bit-exact copies)."""
    return ir.IntType(8 * elem.itemsize)


def _vt(t: ir.Type, like: ir.Value) -> ir.Type:
    return vec_type(t, lanes_of(like.type))


def bf16_to_f32(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    w = b.zext(v, _vt(I32, v))
    return b.bitcast(b.shl(w, const_like(w.type, 16)), _vt(F32, v))


def f32_to_bf16(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """Round to nearest even; NaN stays a (quiet) NaN."""
    bits = b.bitcast(v, _vt(I32, v))
    lsb = b.and_(b.lshr(bits, const_like(bits.type, 16)), const_like(bits.type, 1))
    rounded = b.add(bits, b.add(const_like(bits.type, 0x7FFF), lsb))
    r = b.trunc(b.lshr(rounded, const_like(bits.type, 16)), _vt(I16, v))
    nan = b.fcmp_unordered("uno", v, v)
    q = b.or_(b.trunc(b.lshr(bits, const_like(bits.type, 16)), _vt(I16, v)), const_like(_vt(I16, v), 0x40))
    return b.select(nan, q, r)


def to_compute(b: ir.IRBuilder, v: ir.Value, elem: ElemKind) -> ir.Value:
    """A loaded storage value as a compute value."""
    if elem is E.FLOAT16:
        return b.fpext(v, _vt(F32, v))
    if elem is E.BFLOAT16:
        return bf16_to_f32(b, v)
    if elem is E.BOOL:
        return b.icmp_unsigned("!=", v, const_like(v.type, 0))
    return v


def to_storage(b: ir.IRBuilder, v: ir.Value, elem: ElemKind) -> ir.Value:
    """A compute value as its storage value (rounding 16-bit floats to nearest even)."""
    if elem is E.FLOAT16:
        return b.fptrunc(v, _vt(F16, v))
    if elem is E.BFLOAT16:
        return f32_to_bf16(b, v)
    if elem is E.BOOL:
        return b.zext(v, _vt(I8, v))
    return v


def round_trip(b: ir.IRBuilder, v: ir.Value, elem: ElemKind) -> ir.Value:
    """Round a compute value to the precision of ``elem`` (16-bit floats), else unchanged."""
    if elem in NARROW_FLOATS:
        return to_compute(b, to_storage(b, v, elem), elem)
    return v


# -- Cast (numpy astype) ---------------------------------------------------------------------------

def _float_to_int(b: ir.IRBuilder, v: ir.Value, dst: ElemKind) -> ir.Value:
    """float -> integer as numpy does on x86-64: truncation; out of range (and NaN) gives the
    "integer indefinite" value of the 32- or 64-bit conversion, then wraps to narrower kinds."""
    wide = I64 if dst in (E.INT64, E.UINT64, E.UINT32) else I32
    bits = wide.width
    ft = v.type
    lo = const_like(ft, -(2.0 ** (bits - 1)))
    hi = const_like(ft, 2.0 ** (bits - 1))
    ok = b.and_(b.fcmp_ordered(">=", v, lo), b.fcmp_ordered("<", v, hi))
    safe = b.select(ok, v, const_like(ft, 0.0))
    iv = b.fptosi(safe, _vt(wide, v))
    indefinite = const_like(iv.type, 1 << (bits - 1))
    if dst is E.UINT64:
        # values in [2^63, 2^64) convert through the subtraction of 2^63
        big = b.and_(b.fcmp_ordered(">=", v, hi), b.fcmp_ordered("<", v, const_like(ft, 2.0 ** 64)))
        shifted = b.fptosi(b.select(big, b.fsub(v, hi), const_like(ft, 0.0)), iv.type)
        res = b.select(ok, iv, b.select(big, b.xor(shifted, indefinite), indefinite))
        return b.select(b.fcmp_ordered(">=", v, const_like(ft, 2.0 ** 64)), const_like(iv.type, 0), res)
    res = b.select(ok, iv, indefinite)
    target = compute_type(dst)
    if target.width < bits:
        return b.trunc(res, _vt(target, v))
    return res


def convert(b: ir.IRBuilder, v: ir.Value, src: ElemKind, dst: ElemKind, saturate: bool = True,
            round_mode: str = "up") -> ir.Value:
    """numpy ``astype`` from a compute value of ``src`` to a compute value of ``dst`` (ONNX Cast;
    ``saturate`` for float8 / float8e8m0 targets, ``round_mode`` for float8e8m0 ones)."""
    st, dt = compute_type(src), compute_type(dst)
    if src is dst:
        return v
    if src in LOW_PRECISION_KINDS or dst in LOW_PRECISION_KINDS:
        return convert_low(b, v, src, dst, saturate, convert, round_mode)
    if dst is E.BOOL:
        if is_float(src):
            return b.fcmp_unordered("une", v, const_like(v.type, 0.0))
        return b.icmp_unsigned("!=", v, const_like(v.type, 0))
    if src is E.BOOL:
        if is_float(dst):
            return b.uitofp(v, _vt(dt, v))
        return b.zext(v, _vt(dt, v))
    if is_float(src) and is_float(dst):
        wide_src = isinstance(st, ir.DoubleType)
        if dst is E.FLOAT16 and wide_src:
            return b.fpext(b.fptrunc(v, _vt(F16, v)), _vt(F32, v))  # one rounding, as numpy
        if dst is E.BFLOAT16 and wide_src:
            v = b.fptrunc(v, _vt(F32, v))  # ml_dtypes: float64 -> float32 -> bfloat16
        if dst in NARROW_FLOATS:
            return round_trip(b, v, dst)
        if isinstance(dt, ir.DoubleType):
            return b.fpext(v, _vt(F64, v))
        return b.fptrunc(v, _vt(F32, v)) if wide_src else v
    if is_float(dst):
        r = b.uitofp(v, _vt(dt, v)) if src in UNSIGNED else b.sitofp(v, _vt(dt, v))
        if dst in NARROW_FLOATS:
            if st.width > 16 and dst is E.FLOAT16:
                # int -> float32 -> float16 may round twice; go through float64 (exact for <= 32 bits)
                r64 = b.uitofp(v, _vt(F64, v)) if src in UNSIGNED else b.sitofp(v, _vt(F64, v))
                return b.fpext(b.fptrunc(r64, _vt(F16, v)), _vt(F32, v))
            return round_trip(b, r, dst)
        return r
    if is_float(src):
        return _float_to_int(b, v, dst)
    # integer -> integer: wrap or extend by the source's signedness
    if dt.width < st.width:
        return b.trunc(v, _vt(dt, v))
    if dt.width > st.width:
        return b.zext(v, _vt(dt, v)) if src in UNSIGNED else b.sext(v, _vt(dt, v))
    return v
