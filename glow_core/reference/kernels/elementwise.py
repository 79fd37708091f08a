"""Element-wise kernels: arithmetic, comparison, logic, bitwise, Where, Clip, Cast.

Float16 and bfloat16 operands are computed in float32 and rounded back once
(exact for + - * / and min/max: float32 holds every such result before the
final rounding). Integer arithmetic wraps like the C types. The unary math and
activation kernels live in ``elementwise_math``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from glow_core.ir.types import (
    FLOAT8_KINDS,
    FLOAT_KINDS,
    SMALL_FLOAT_KINDS,
    SMALL_INT_KINDS,
    ElemKind,
    TensorType,
)
from glow_core.reference.kernels import KERNELS

Attrs = Mapping[str, Any]
Types = Sequence[TensorType]
Binary = Callable[[np.ndarray, np.ndarray], np.ndarray]

_F32 = np.dtype(np.float32)
#: 16-bit floats, computed in float32
_NARROW = frozenset({ElemKind.FLOAT16.dtype, ElemKind.BFLOAT16.dtype})
_FLOATS = frozenset(k.dtype for k in FLOAT_KINDS)


def compute_dtype(dt: np.dtype) -> np.dtype:
    """The dtype a kernel computes in: float32 for the 16-bit floats, else the dtype itself."""
    return _F32 if dt in _NARROW else dt


def is_float(dt: np.dtype) -> bool:
    """True for float16/32/64 and bfloat16."""
    return dt in _FLOATS


def widen(a: np.ndarray) -> np.ndarray:
    cd = compute_dtype(a.dtype)
    return a if a.dtype == cd else a.astype(cd)


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division truncating toward zero (C semantics); x / 0 gives x (the spec leaves it undefined)."""
    rem = np.fmod(a, b)
    return np.floor_divide(a - rem, np.where(b == 0, np.ones((), b.dtype), b))


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.true_divide(a, b) if is_float(a.dtype) else _int_div(a, b)


_ARITH: dict[str, Binary] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": _div,
    "Max": np.maximum,
    "Min": np.minimum,
    "And": np.logical_and,
    "Or": np.logical_or,
    "Xor": np.logical_xor,
    "BitwiseAnd": np.bitwise_and,
    "BitwiseOr": np.bitwise_or,
    "BitwiseXor": np.bitwise_xor,
}

_COMPARE: dict[str, Binary] = {
    "Equal": np.equal,
    "Less": np.less,
    "LessOrEqual": np.less_equal,
}


def _binary_kernel(fn: Binary) -> Callable[..., np.ndarray]:
    def kernel(attrs: Attrs, out: Types, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.asarray(fn(widen(a), widen(b))).astype(out[0].dtype, copy=False)

    return kernel


for _kind, _fn in {**_ARITH, **_COMPARE}.items():
    KERNELS.add(_kind, _binary_kernel(_fn))


@KERNELS.register("Mod")
def _mod(attrs: Attrs, out: Types, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # np.fmod is C fmod (sign of the dividend); np.mod is Python % (sign of the divisor),
    # and for floats gives the special cases of ONNX Mod-28 (+-0 takes the divisor's sign, ...).
    fn = np.fmod if attrs["fmod"] else np.mod
    if not is_float(a.dtype):
        # x % 0 is undefined in ONNX; numpy gives 0
        b = np.where(b == 0, np.ones((), b.dtype), b) if fn is np.mod else b
    return np.asarray(fn(widen(a), widen(b))).astype(out[0].dtype, copy=False)


@KERNELS.register("BitShift")
def _bitshift(attrs: Attrs, out: Types, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # numpy defines the out-of-range cases as ONNX BitShift-28 does: a shift by a negative
    # amount or by >= the bit width gives 0, or -1 for a right shift of a negative value.
    fn = np.left_shift if attrs["direction"] == "LEFT" else np.right_shift
    return np.asarray(fn(a, b)).astype(out[0].dtype, copy=False)


@KERNELS.register("Pow")
def _pow(attrs: Attrs, out: Types, base: np.ndarray, exp: np.ndarray) -> np.ndarray:
    dt = out[0].dtype
    if is_float(base.dtype) or is_float(exp.dtype):
        # float base or float exponent: float64 pow, rounded (float) or truncated (integer base)
        r = np.power(base.astype(np.float64), exp.astype(np.float64))
        return r.astype(dt)
    # integer ** integer: exact with wrapping for e >= 0
    wide = np.dtype(np.uint64) if base.dtype.kind == "u" else np.dtype(np.int64)
    if exp.dtype.kind == "u":
        e = np.minimum(exp.astype(np.uint64), np.uint64(np.iinfo(np.int64).max)).astype(np.int64)
    else:
        e = exp.astype(np.int64)
    b = base.astype(wide)
    pos = np.power(b, np.maximum(e, 0).astype(wide))
    if not (e < 0).any():
        return pos.astype(dt)
    # negative exponents: 1 / b**-e truncated toward zero: 1 for b == 1, +-1 for b == -1, else 0
    # (0 ** negative is a division by zero: undefined; gives 0)
    one = np.ones((), wide)
    if wide.kind == "i":
        odd = (e & 1) == 1
        neg = np.where(b == 1, one, np.where(b == -1, np.where(odd, -one, one), np.zeros((), wide)))
    else:
        neg = np.where(b == 1, one, np.zeros((), wide))
    return np.where(e < 0, neg, pos).astype(dt)


@KERNELS.register("PRelu")
def _prelu(attrs: Attrs, out: Types, x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    xw, sw = widen(x), widen(slope)
    zero = np.zeros((), xw.dtype)
    return np.where(xw < zero, xw * sw, xw).astype(out[0].dtype, copy=False)


@KERNELS.register("Where")
def _where(attrs: Attrs, out: Types, cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(cond, a, b).astype(out[0].dtype, copy=False)


@KERNELS.register("Clip")
def _clip(attrs: Attrs, out: Types, x: np.ndarray, lo: np.ndarray | None, hi: np.ndarray | None) -> np.ndarray:
    # a NaN bound does not clip (as std::max/std::min in onnxruntime); a NaN input stays NaN
    r = widen(x)
    if lo is not None and not np.isnan(widen(lo)).any():
        r = np.maximum(r, widen(lo).reshape(()))
    if hi is not None and not np.isnan(widen(hi)).any():
        r = np.minimum(r, widen(hi).reshape(()))
    return np.asarray(r).astype(out[0].dtype, copy=False)


#: 4- and 2-bit integers, which ml_dtypes does not cast among each other directly
_SMALL_INTS = frozenset(k.dtype for k in SMALL_INT_KINDS)
_SMALL_FLOATS = frozenset(k.dtype for k in SMALL_FLOAT_KINDS)


def to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """float8e8m0 codes: the biased exponent of |x| as float32, rounded by ``round_mode``
    (see the Cast kind's doc); inf and NaN give 0xFF (NaN)."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    exp = ((bits >> 23) & 0xFF).astype(np.uint16)
    frac = bits & 0x7FFFFF
    if round_mode == "up":
        inc = frac > 0
    elif round_mode == "down":
        inc = np.zeros(frac.shape, dtype=bool)
    else:  # nearest: the guard bit, and below the normal range a tie rounds down
        guard, rest = (frac >> 22) & 1, frac & 0x3FFFFF
        inc = (guard == 1) & ((rest > 0) | (exp > 0))
    if saturate:
        inc &= exp != 0xFE
    code = np.where(exp == 0xFF, 0xFF, exp + inc).astype(np.uint8)
    return code.view(ElemKind.FLOAT8E8M0.dtype)


@KERNELS.register("Cast")
def _cast(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    # numpy's astype is the ONNX Cast: float -> int truncates, int -> int wraps,
    # -> bool is x != 0, float -> narrower float rounds to nearest even (ml_dtypes for bfloat16,
    # float8, float4 and the 4- / 2-bit integers). As onnx.reference: saturate clamps first.
    to = out[0].elem
    if to is ElemKind.FLOAT8E8M0:
        return to_e8m0(x, bool(attrs.get("saturate", 1)), attrs.get("round_mode", "up"))
    if to in FLOAT8_KINDS and attrs.get("saturate", 1):
        big = float(ml_dtypes.finfo(to.dtype).max)
        if x.dtype.kind in "fV" and x.dtype not in _SMALL_INTS:
            x = np.clip(x.astype(np.float32), -big, big)  # float64 rounds through float32 (ml_dtypes)
        else:
            x = np.clip(x.astype(np.float64), -big, big)
    if x.dtype in _SMALL_INTS and to.dtype in _SMALL_INTS:
        x = x.astype(np.int8)
    if x.dtype in _SMALL_FLOATS and not (to.is_float or to in SMALL_FLOAT_KINDS):
        # float8 / float4 -> integer as float32 -> integer (ml_dtypes saturates NaN / inf / out-of-range
        # values instead; the spec leaves them undefined, and float32's way is the cpu's)
        x = x.astype(np.float32)
    return x.astype(to.dtype)
