"""Numpy kernels of the mandatory primitive set: the starting point a vendor replaces.

One kernel per primitive kind, in the table :data:`KERNELS` (kind name ->
kernel). A kernel is called as ``kernel(attrs, out_types, *operands)`` with
numpy arrays (``None`` for an omitted optional operand) and returns one array,
or a tuple of arrays for kinds with several results, of exactly the declared
``out_types`` (element kind and shape).

The semantics are those of the node-kind table (``glow_core/ir/defs``) and of
the reference interpreter; ``glow conformance --backend NAME`` checks every
kernel against the reference, for every element kind the backend declares,
on scalars, size-1 dimensions, broadcasting, odd and large shapes, and special
values (NaN, infinities, -0.0, denormals, integer extremes).

Replace a kernel by a call into your device's library (or generate code in
``backend.compile``); keep the table keyed by kind.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from glow_core.ir.types import TensorType

Attrs = Mapping[str, Any]
Types = Sequence[TensorType]
Kernel = Callable[..., Any]

#: kind name -> kernel
KERNELS: dict[str, Kernel] = {}


def kernel(*kinds: str) -> Callable[[Kernel], Kernel]:
    """Register ``fn`` as the kernel of ``kinds``."""

    def deco(fn: Kernel) -> Kernel:
        for k in kinds:
            if k in KERNELS:
                raise ValueError(f"kernel of {k} registered twice")
            KERNELS[k] = fn
        return fn

    return deco


def _is_float(a: np.ndarray) -> bool:
    return a.dtype.kind == "f"


# -- element-wise binary -----------------------------------------------------------------

def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division truncating toward zero (C semantics); division by zero is undefined."""
    rem = np.fmod(a, b)
    return np.floor_divide(a - rem, np.where(b == 0, np.ones((), b.dtype), b))


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.true_divide(a, b) if _is_float(a) else _int_div(a, b)


_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": _div,
    "Max": np.maximum, "Min": np.minimum,
    "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
    "BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or, "BitwiseXor": np.bitwise_xor,
    "Equal": np.equal, "Less": np.less, "LessOrEqual": np.less_equal,
}


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Kernel:
    def run(attrs: Attrs, out: Types, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.asarray(fn(a, b)).astype(out[0].dtype, copy=False)

    return run


for _kind, _fn in _BINARY.items():
    kernel(_kind)(_binary(_fn))


@kernel("Mod")
def _mod(attrs: Attrs, out: Types, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if attrs["fmod"]:
        return np.fmod(a, b).astype(out[0].dtype, copy=False)  # sign of the dividend (C fmod)
    if not _is_float(a):
        b = np.where(b == 0, np.ones((), b.dtype), b)  # x % 0 is undefined; give 0 like the reference
    return np.mod(a, b).astype(out[0].dtype, copy=False)  # sign of the divisor


@kernel("BitShift")
def _bitshift(attrs: Attrs, out: Types, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # a shift by >= the bit width (or a negative amount) gives 0 (-1 for a right shift of a negative value)
    fn = np.left_shift if attrs["direction"] == "LEFT" else np.right_shift
    return np.asarray(fn(a, b)).astype(out[0].dtype, copy=False)


@kernel("Pow")
def _pow(attrs: Attrs, out: Types, base: np.ndarray, exp: np.ndarray) -> np.ndarray:
    if _is_float(base) or _is_float(exp):
        return np.power(base.astype(np.float64), exp.astype(np.float64)).astype(out[0].dtype)
    wide = np.dtype(np.uint64) if base.dtype.kind == "u" else np.dtype(np.int64)
    e = (np.minimum(exp, np.iinfo(np.int64).max) if exp.dtype.kind == "u" else exp).astype(np.int64)
    b = base.astype(wide)
    pos = np.power(b, np.maximum(e, 0).astype(wide))
    # a negative exponent: 1 / b**-e truncated toward zero (1 for b == 1, +-1 for b == -1, else 0)
    one = np.ones((), wide)
    if wide.kind == "i":
        neg = np.where(b == 1, one, np.where(b == -1, np.where((e & 1) == 1, -one, one), np.zeros((), wide)))
    else:
        neg = np.where(b == 1, one, np.zeros((), wide))
    return np.where(e < 0, neg, pos).astype(out[0].dtype)


@kernel("Where")
def _where(attrs: Attrs, out: Types, cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(cond, a, b).astype(out[0].dtype, copy=False)


# -- element-wise unary ---------------------------------------------------------------------

_VERF = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))  # never overflows
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Abs": np.abs, "Neg": np.negative, "Sign": np.sign, "Floor": np.floor, "Ceil": np.ceil,
    "Round": np.rint,  # halves to even
    "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt, "Tanh": np.tanh, "Sigmoid": _sigmoid,
    "Erf": lambda x: _VERF(x.astype(np.float64)) if x.size else x.astype(np.float64),
    "Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Asin": np.arcsin, "Acos": np.arccos, "Atan": np.arctan,
    "Sinh": np.sinh, "Cosh": np.cosh, "Asinh": np.arcsinh, "Acosh": np.arccosh, "Atanh": np.arctanh,
    "IsNaN": np.isnan, "Not": np.logical_not, "BitwiseNot": np.invert,
}


def _unary(fn: Callable[[np.ndarray], np.ndarray]) -> Kernel:
    def run(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
        return np.asarray(fn(x)).astype(out[0].dtype, copy=False)

    return run


for _kind, _ufn in _UNARY.items():
    kernel(_kind)(_unary(_ufn))


@kernel("IsInf")
def _isinf(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    pos = (x == np.inf) if attrs["detect_positive"] else np.zeros(x.shape, bool)
    neg = (x == -np.inf) if attrs["detect_negative"] else np.zeros(x.shape, bool)
    return pos | neg


@kernel("Cast")
def _cast(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    # float -> int truncates, int -> int wraps, -> bool is x != 0, float -> narrower float rounds to nearest even
    return x.astype(out[0].dtype)


@kernel("BitCast")
def _bitcast(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(out[0].dtype).reshape(out[0].shape)


# -- reductions -----------------------------------------------------------------------------

def _lowest(dt: np.dtype) -> Any:
    return False if dt == np.bool_ else (-np.inf if dt.kind == "f" else np.iinfo(dt).min)


def _highest(dt: np.dtype) -> Any:
    return True if dt == np.bool_ else (np.inf if dt.kind == "f" else np.iinfo(dt).max)


_REDUCE: dict[str, Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]] = {
    "ReduceSum": lambda x, ax, kd: np.sum(x, axis=ax, keepdims=kd, dtype=x.dtype),
    "ReduceProd": lambda x, ax, kd: np.prod(x, axis=ax, keepdims=kd, dtype=x.dtype),
    "ReduceMax": lambda x, ax, kd: np.max(x, axis=ax, keepdims=kd, initial=_lowest(x.dtype)),
    "ReduceMin": lambda x, ax, kd: np.min(x, axis=ax, keepdims=kd, initial=_highest(x.dtype)),
}


def _reduce(fn: Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]) -> Kernel:
    def run(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
        r = fn(x, tuple(attrs["axes"]), bool(attrs["keepdims"]))
        return np.asarray(r).astype(out[0].dtype, copy=False).reshape(out[0].shape)

    return run


for _kind, _rfn in _REDUCE.items():
    kernel(_kind)(_reduce(_rfn))


def _arg(pick: Callable[..., np.ndarray]) -> Kernel:
    def run(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
        axis = attrs["axis"]
        if attrs["select_last_index"]:
            idx = x.shape[axis] - 1 - pick(np.flip(x, axis), axis=axis, keepdims=True)
        else:
            idx = pick(x, axis=axis, keepdims=True)
        return idx.astype(np.int64).reshape(out[0].shape)

    return run


kernel("ArgMax")(_arg(np.argmax))
kernel("ArgMin")(_arg(np.argmin))


@kernel("TopK")
def _topk(attrs: Attrs, out: Types, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    axis, k = attrs["axis"], attrs["k"]
    rows = np.moveaxis(x, axis, -1)
    n = rows.shape[-1]
    if attrs["largest"]:  # descending values; equal values keep the lower index first
        order = (n - 1 - np.argsort(rows[..., ::-1], axis=-1, kind="stable"))[..., ::-1]
    else:
        order = np.argsort(rows, axis=-1, kind="stable")
    idx = order[..., :k]
    vals = np.take_along_axis(rows, idx, axis=-1)
    return (np.ascontiguousarray(np.moveaxis(vals, -1, axis)),
            np.ascontiguousarray(np.moveaxis(idx, -1, axis)).astype(np.int64))


# -- data movement --------------------------------------------------------------------------

@kernel("Reshape")
def _reshape(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    return np.reshape(x, out[0].shape)


@kernel("Transpose")
def _transpose(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(x, attrs["perm"])).reshape(out[0].shape)


@kernel("Slice")
def _slice(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    sel = []
    for start, size, step in zip(attrs["starts"], attrs["sizes"], attrs["steps"]):
        idx = start + step * np.arange(size)  # explicit positions: negative steps need no special case
        sel.append(idx)
    return np.ascontiguousarray(x[np.ix_(*sel)] if sel else x).reshape(out[0].shape)


@kernel("Concat")
def _concat(attrs: Attrs, out: Types, *xs: np.ndarray) -> np.ndarray:
    return np.concatenate(xs, axis=attrs["axis"])


def _indices(idx: np.ndarray, dim: int) -> np.ndarray:
    i = idx.astype(np.int64)
    i = np.where(i < 0, i + dim, i)  # negative indices count from the end
    if ((i < 0) | (i >= dim)).any():
        raise IndexError(f"index out of range for a dimension of {dim}")
    return i


@kernel("Gather")
def _gather(attrs: Attrs, out: Types, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    axis = attrs["axis"]
    return np.take(x, _indices(idx, x.shape[axis]), axis=axis)


@kernel("Broadcast")
def _broadcast(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.broadcast_to(x, attrs["shape"]))


@kernel("Pad")
def _pad(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    pads, r = attrs["pads"], x.ndim
    width = [(pads[i], pads[i + r]) for i in range(r)]
    if attrs["mode"] == "constant":
        value = np.asarray(attrs["value"]).reshape(()).astype(x.dtype)
        return np.pad(x, width, mode="constant", constant_values=value)
    if x.size == 0:
        return np.zeros(out[0].shape, x.dtype)
    return np.pad(x, width, mode=attrs["mode"])  # reflect / edge / wrap: numpy.pad's modes


_SCATTER: dict[str, Callable[..., None]] = {
    "add": np.add.at, "mul": np.multiply.at, "max": np.maximum.at, "min": np.minimum.at,
}


@kernel("ScatterND")
def _scatter_nd(attrs: Attrs, out: Types, x: np.ndarray, idx: np.ndarray, upd: np.ndarray) -> np.ndarray:
    res = x.copy()
    k = idx.shape[-1]
    tuples = idx.reshape(-1, k)
    where = tuple(_indices(tuples[:, j], x.shape[j]) for j in range(k))
    slices = upd.reshape((-1,) + x.shape[k:])
    if attrs["reduction"] == "none":
        res[where] = slices
    else:
        _SCATTER[attrs["reduction"]](res, where, slices)
    return res


# -- matrix products, convolution, pooling ----------------------------------------------------

@kernel("MatMul")
def _matmul(attrs: Attrs, out: Types, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.matmul(a, b).astype(out[0].dtype, copy=False)


def _window(xp: np.ndarray, k: tuple[int, ...], strides: Sequence[int], dilations: Sequence[int],
            out_spatial: Sequence[int]) -> np.ndarray:
    """The elements of the padded input ``xp`` that kernel offset ``k`` meets, for every output position."""
    sel = tuple(slice(k[i] * dilations[i], k[i] * dilations[i] + (o - 1) * strides[i] + 1, strides[i])
                for i, o in enumerate(out_spatial))
    return xp[(slice(None), slice(None)) + sel]


def _pad_spatial(x: np.ndarray, pads: Sequence[int], out_spatial: Sequence[int], kernel_shape: Sequence[int],
                 strides: Sequence[int], dilations: Sequence[int], fill: Any) -> np.ndarray:
    """Pad the spatial axes by ``pads`` and, at the end, by what a ceil_mode window needs beyond them."""
    nd = len(kernel_shape)
    width = [(0, 0), (0, 0)]
    for i in range(nd):
        need = (out_spatial[i] - 1) * strides[i] + (kernel_shape[i] - 1) * dilations[i] + 1
        width.append((pads[i], max(pads[nd + i], need - x.shape[2 + i] - pads[i])))
    return np.pad(x, width, constant_values=fill)


@kernel("Conv")
def _conv(attrs: Attrs, out: Types, x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    m, cg = w.shape[:2]
    g = attrs["group"]
    mg = m // g
    out_spatial = out[0].shape[2:]
    ks = tuple(w.shape[2:])
    xp = _pad_spatial(x, attrs["pads"], out_spatial, ks, attrs["strides"], attrs["dilations"], 0)
    y = np.zeros(out[0].shape, dtype=x.dtype)
    for k in np.ndindex(*ks):
        win = _window(xp, k, attrs["strides"], attrs["dilations"], out_spatial)  # N, C, O...
        for gi in range(g):
            part = win[:, gi * cg:(gi + 1) * cg]  # N, Cg, O...
            wk = w[(slice(gi * mg, (gi + 1) * mg), slice(None)) + k]  # Mg, Cg
            y[:, gi * mg:(gi + 1) * mg] += np.moveaxis(np.tensordot(wk, part, axes=([1], [1])), 0, 1)
    if b is not None:
        y += b.reshape((1, m) + (1,) * len(ks))
    return y


def _pool(attrs: Attrs, out: Types, x: np.ndarray, fill: Any,
          combine: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    ks = tuple(attrs["kernel_shape"])
    out_spatial = out[0].shape[2:]
    xp = _pad_spatial(x, attrs["pads"], out_spatial, ks, attrs["strides"], attrs["dilations"], fill)
    acc: np.ndarray | None = None
    for k in np.ndindex(*ks):
        win = _window(xp, k, attrs["strides"], attrs["dilations"], out_spatial)
        acc = win.copy() if acc is None else combine(acc, win)
    assert acc is not None
    return acc


@kernel("MaxPool")
def _maxpool(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    return _pool(attrs, out, x, _lowest(x.dtype), np.maximum)  # padding never wins


@kernel("AvgPool")
def _avgpool(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    total = _pool(attrs, out, x, 0, np.add)
    # the divisor: input elements in the window, plus explicit padding with count_include_pad
    # (never the part of a ceil_mode window beyond the padding)
    nd = x.ndim - 2
    pads = attrs["pads"]
    ones = np.ones((1, 1) + x.shape[2:], dtype=x.dtype)
    if attrs["count_include_pad"]:
        ones = np.pad(ones, [(0, 0), (0, 0)] + [(pads[i], pads[nd + i]) for i in range(nd)], constant_values=1)
        no_pads = {**attrs, "pads": (0,) * (2 * nd)}
        counts = _pool(no_pads, out, ones, 0, np.add)
    else:
        counts = _pool(attrs, out, ones, 0, np.add)
    return (total / counts).astype(out[0].dtype, copy=False)


# -- the optional quantized primitives (int8 models; declare them with INT8 / UINT8 in ELEMS) -----------------

def _wrap_int32(v: np.ndarray) -> np.ndarray:
    return v.astype(np.int64).astype(np.int32)


@kernel("IntConv")
def _qconv(attrs: Attrs, out: Types, x: np.ndarray, w: np.ndarray, xz: np.ndarray, wz: np.ndarray,
           b: np.ndarray | None) -> np.ndarray:
    # exact: (x - xz) and (w - wz) are small integers, so every float64 partial sum is exact
    xd = x.astype(np.float64) - float(xz.reshape(()))
    wd = w.astype(np.float64) - wz.astype(np.float64).reshape((-1,) + (1,) * (w.ndim - 1) if wz.size > 1 else ())
    acc = _conv(attrs, [TensorType(out[0].elem, out[0].shape)], xd, wd, None)
    if b is not None:
        acc = acc + b.astype(np.float64).reshape((1, -1) + (1,) * (acc.ndim - 2))
    return _wrap_int32(acc)


@kernel("IntMatMul")
def _qmatmul(attrs: Attrs, out: Types, a: np.ndarray, b: np.ndarray, az: np.ndarray | None,
             bz: np.ndarray | None) -> np.ndarray:
    ad, bd = a.astype(np.int64), b.astype(np.int64)
    if az is not None:  # a 1-D zero point holds one value per row of A
        ad = ad - (az.astype(np.int64).reshape(-1, 1) if az.ndim == 1 and az.size > 1 else az.astype(np.int64))
    if bz is not None:  # ... and one per column of B
        bd = bd - bz.astype(np.int64)
    return _wrap_int32(np.matmul(ad, bd))


@kernel("Requantize")
def _requantize(attrs: Attrs, out: Types, x: np.ndarray, mult: np.ndarray, zp: np.ndarray) -> np.ndarray:
    v = np.rint(x.astype(np.float32) * mult.astype(np.float32)) + zp.astype(np.float32).reshape(())
    info = np.iinfo(out[0].dtype)
    lo, hi = max(int(info.min), attrs["clamp_lo"]), min(int(info.max), attrs["clamp_hi"])
    return np.clip(v, lo, hi).astype(out[0].dtype)


__all__ = ["KERNELS", "kernel"]
