"""What a backend author compares with: tolerances, comparisons, array statistics.

Tolerances are declared once, in :data:`KIND_TOLERANCES` (node kind -> a
tolerance *class*) and :data:`TOLERANCE_CLASSES` (class -> element kind ->
:class:`Tolerance`); kinds not listed take the class of their category
(:func:`tolerance_class`). Integers and booleans always compare exactly. The
conformance suite (``glow-conformance``) compares with these tables, and records
them in its reports.

Helpers::

    compare_arrays(got, want, tolerance_for("Exp", ElemKind.FLOAT32))   # -> Comparison
    array_stats(a)                                                       # -> ArrayStats (min, max, mean, NaN, ...)

These are pure (numpy and the IR's kind table only). The helpers that drive
the compiler (``check_node``: run one node on a backend and on the reference)
are developer tooling, above the core: ``glow_tools.testing``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from glow_core.ir.kinds import Category, get_kind
from glow_core.ir.types import ElemKind

E = ElemKind


@dataclass(frozen=True)
class Tolerance:
    """How close a result must be to the reference.

    An element passes when ``|got - want| <= atol + rtol * s``, where ``s`` is
    ``|want|`` (element-wise) or, with ``scaled``, the largest finite ``|want|``
    of the whole tensor (for sums of many terms, whose absolute error follows
    the magnitude of the terms, not of the result). ``rtol_of_max`` adds
    ``rtol_of_max * max|want|`` to the element-wise bound: a whole model's
    outputs are long chains of sums, so a result near zero may carry the
    absolute error of the tensor's large values. NaN must meet NaN, an
    infinity the same infinity. ``flush_denormals`` adds the smallest normal
    number to ``atol`` (a device may flush denormals to zero);
    ``signed_zeros`` requires -0.0 and +0.0 to match.
    """

    rtol: float = 0.0
    atol: float = 0.0
    scaled: bool = False
    rtol_of_max: float = 0.0
    flush_denormals: bool = True
    signed_zeros: bool = False

    def describe(self) -> str:
        if self.rtol == 0 and self.atol == 0:
            base = "exact" + (" (denormals may flush to zero)" if self.flush_denormals else "")
        else:
            base = f"rtol {self.rtol:g}, atol {self.atol:g}" + (" of the largest |value|" if self.scaled else "")
            if self.rtol_of_max:
                base += f", plus {self.rtol_of_max:g} of the largest |value|"
        return base + (", signed zeros" if self.signed_zeros else "")

    def as_dict(self) -> dict[str, Any]:
        return {"rtol": self.rtol, "atol": self.atol, "scaled": self.scaled, "rtol_of_max": self.rtol_of_max,
                "flush_denormals": self.flush_denormals, "signed_zeros": self.signed_zeros}


EXACT = Tolerance()
BITWISE = Tolerance(flush_denormals=False, signed_zeros=True)

#: tolerance class -> element kind -> tolerance (floats; integers and bools are always exact)
TOLERANCE_CLASSES: Mapping[str, Mapping[ElemKind, Tolerance]] = MappingProxyType({
    # data movement and selection: the very bits (NaN payloads aside)
    "bitwise": {e: BITWISE for e in (E.FLOAT32, E.FLOAT16, E.BFLOAT16, E.FLOAT64)},
    # one correctly rounded operation (+ - * / sqrt, min/max, comparisons, casts, rounding)
    "exact": {e: EXACT for e in (E.FLOAT32, E.FLOAT16, E.BFLOAT16, E.FLOAT64)},
    # libm-quality functions: a few units in the last place
    "transcendental": {
        E.FLOAT32: Tolerance(1e-5, 1e-6), E.FLOAT16: Tolerance(2e-3, 1e-4),
        E.BFLOAT16: Tolerance(1.6e-2, 1e-3), E.FLOAT64: Tolerance(1e-12, 1e-14),
    },
    # sums of many products (reductions, matrix products, convolutions, pools)
    "accumulate": {
        E.FLOAT32: Tolerance(5e-5, 1e-6, scaled=True), E.FLOAT16: Tolerance(4e-3, 1e-4, scaled=True),
        E.BFLOAT16: Tolerance(3e-2, 1e-3, scaled=True), E.FLOAT64: Tolerance(1e-12, 1e-14, scaled=True),
    },
    # products of many factors: relative error grows with their number
    "product": {
        E.FLOAT32: Tolerance(2e-4, 1e-6), E.FLOAT16: Tolerance(1e-2, 1e-4),
        E.BFLOAT16: Tolerance(6e-2, 1e-3), E.FLOAT64: Tolerance(1e-11, 1e-14),
    },
    # a high-level kind computed as a chain of primitives (or natively by another formula)
    "composite": {
        E.FLOAT32: Tolerance(1e-4, 1e-5), E.FLOAT16: Tolerance(1e-2, 1e-3),
        E.BFLOAT16: Tolerance(6e-2, 1e-2), E.FLOAT64: Tolerance(1e-9, 1e-12),
    },
    # a high-level kind that accumulates (Gemm, recurrent cells, normalizations, attention)
    "composite-accumulate": {
        E.FLOAT32: Tolerance(2e-4, 1e-5, scaled=True), E.FLOAT16: Tolerance(2e-2, 1e-3, scaled=True),
        E.BFLOAT16: Tolerance(8e-2, 1e-2, scaled=True), E.FLOAT64: Tolerance(1e-9, 1e-12, scaled=True),
    },
    # a whole model against the reference: relative to each value, plus a share of the largest
    # (e.g. VGG-19's logits reach 10.5; a logit near 0 then differs by 3e-5 between two correct
    # float32 backends, onnxruntime's own difference being 1.4e-5)
    "model": {
        E.FLOAT32: Tolerance(1e-3, 1e-5, rtol_of_max=1e-5), E.FLOAT16: Tolerance(3e-2, 1e-3, rtol_of_max=1e-3),
        E.BFLOAT16: Tolerance(1e-1, 1e-2, rtol_of_max=1e-2), E.FLOAT64: Tolerance(1e-6, 1e-9, rtol_of_max=1e-10),
    },
})

_BITWISE_KINDS = ("Reshape", "Transpose", "Slice", "Concat", "Gather", "Broadcast", "Pad", "ScatterND", "BitCast",
                  "TopK", "Where", "Neg", "Abs", "Identity", "Dropout", "Split", "Tile", "GatherElements",
                  "GatherND", "ScatterElements", "DepthToSpace", "SpaceToDepth", "ReverseSequence", "Trilu",
                  "TensorScatter", "OneHot", "MaxUnpool")
_EXACT_KINDS = ("Add", "Sub", "Mul", "Div", "Max", "Min", "Mod", "Sqrt", "Sign", "Floor", "Ceil", "Round",
                "Cast", "Equal", "Less", "LessOrEqual", "IsNaN", "IsInf", "Not", "And", "Or", "Xor",
                "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "BitShift", "ArgMax", "ArgMin",
                "ReduceMax", "ReduceMin", "MaxPool", "Relu", "Clip", "Reciprocal", "Hardmax")
_TRANSCENDENTAL_KINDS = ("Exp", "Log", "Pow", "Erf", "Tanh", "Sigmoid", "Sin", "Cos", "Tan", "Asin", "Acos",
                         "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh")
_ACCUMULATE_KINDS = ("ReduceSum", "MatMul", "Conv", "AvgPool", "FusedConv", "FusedMatMul")

#: node kind -> tolerance class (the one table; kinds not listed follow their category)
KIND_TOLERANCES: Mapping[str, str] = MappingProxyType({
    **{k: "bitwise" for k in _BITWISE_KINDS},
    **{k: "exact" for k in _EXACT_KINDS},
    **{k: "transcendental" for k in _TRANSCENDENTAL_KINDS},
    **{k: "accumulate" for k in _ACCUMULATE_KINDS},
    "ReduceProd": "product",
    "CumProd": "product",
})

#: categories whose high-level kinds accumulate (a class for kinds not in KIND_TOLERANCES)
_ACCUMULATING_CATEGORIES = (Category.LINEAR_ALGEBRA, Category.CONVOLUTION, Category.POOLING, Category.REDUCTION,
                            Category.NORMALIZATION)


def tolerance_class(kind: str) -> str:
    """The tolerance class of node kind ``kind`` (:data:`KIND_TOLERANCES`, else by category)."""
    cls = KIND_TOLERANCES.get(kind)
    if cls is not None:
        return cls
    spec = get_kind(kind)
    if any(spec.is_(c) for c in _ACCUMULATING_CATEGORIES) or not spec.is_(Category.ELEMENTWISE):
        return "composite-accumulate"
    return "composite"


def tolerance_for(kind: str, elem: ElemKind, cls: str | None = None) -> Tolerance:
    """The tolerance for a result of element kind ``elem`` computed by a ``kind`` node (or class ``cls``)."""
    table = TOLERANCE_CLASSES[cls or tolerance_class(kind)]
    return table.get(elem, EXACT)


# -- comparing ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Comparison:
    """The outcome of comparing one result with the reference."""

    ok: bool
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    mismatches: int = 0
    total: int = 0
    #: index of the worst offending element, with both values, when something differs
    where: tuple[int, ...] | None = None
    got_value: Any = None
    want_value: Any = None
    message: str = ""


def finfo(dt: np.dtype) -> Any:
    """``numpy.finfo`` that also knows bfloat16 (through ml_dtypes)."""
    try:
        return np.finfo(dt)
    except ValueError:
        import ml_dtypes

        return ml_dtypes.finfo(dt)


def is_float_dtype(dt: np.dtype) -> bool:
    """float16/32/64 and bfloat16."""
    return dt.kind == "f" or dt.name == "bfloat16"


def _fmt(v: Any) -> str:
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.9g}"
    return str(v)


def compare_arrays(got: Any, want: np.ndarray, tol: Tolerance = EXACT) -> Comparison:
    """Compare ``got`` with the reference ``want`` under ``tol`` (integers and bools exactly)."""
    got_a = np.asarray(got)
    if got_a.dtype != want.dtype:
        return Comparison(False, math.inf, math.inf, want.size, want.size,
                          message=f"dtype {got_a.dtype}, expected {want.dtype}")
    if got_a.shape != want.shape:
        return Comparison(False, math.inf, math.inf, want.size, want.size,
                          message=f"shape {list(got_a.shape)}, expected {list(want.shape)}")
    total = int(want.size)
    if total == 0:
        return Comparison(True, total=0)
    if not is_float_dtype(want.dtype):
        # float8 / float4 (one byte a value): their codes must match exactly (NaN, -0 included)
        small_float = want.dtype.itemsize == 1 and want.dtype.name.startswith("float")
        bad_mask = got_a.view(np.uint8) != want.view(np.uint8) if small_float else got_a != want
        bad = int(np.count_nonzero(bad_mask))
        if not bad:
            return Comparison(True, total=total)
        diff = np.abs(got_a.astype(np.float64) - want.astype(np.float64))
        idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(np.where(bad_mask, diff, -1.0))), want.shape))
        return Comparison(False, float(diff.max()), 0.0, bad, total, idx, got_a[idx].item(), want[idx].item(),
                          f"{bad} of {total} elements differ (exact comparison); at {list(idx)}: "
                          f"got {_fmt(got_a[idx].item())}, expected {_fmt(want[idx].item())}")
    with np.errstate(all="ignore"):
        g = got_a.astype(np.float64)
        w = want.astype(np.float64)
        g_nan, w_nan = np.isnan(g), np.isnan(w)
        g_inf, w_inf = np.isinf(g), np.isinf(w)
        finite = ~(g_nan | w_nan | g_inf | w_inf)
        diff = np.where(finite, np.abs(g - w), 0.0)
        finite_w = np.abs(np.where(np.isfinite(w), w, 0.0))
        largest = float(finite_w.max())
        scale = np.full(w.shape, largest) if tol.scaled else finite_w
        atol = tol.atol + tol.rtol_of_max * largest + (float(finfo(want.dtype).tiny) if tol.flush_denormals else 0.0)
        limit = atol + tol.rtol * scale
        ok_mask = (g_nan == w_nan) & np.where(g_inf | w_inf, g == w, True) & (diff <= limit)
        if tol.signed_zeros:
            zeros = (g == 0) & (w == 0)
            ok_mask &= ~zeros | (np.signbit(g) == np.signbit(w))
        rel = np.where(finite & (finite_w > 0), diff / np.where(finite_w > 0, finite_w, 1.0), 0.0)
    max_abs = float(diff.max())
    max_rel = float(rel.max())
    bad = int(np.count_nonzero(~ok_mask))
    if not bad:
        return Comparison(True, max_abs, max_rel, 0, total)
    badness = np.where(~ok_mask, np.where(finite, diff - limit, np.inf), -np.inf)
    idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(badness)), want.shape))
    gv, wv = got_a[idx].item(), want[idx].item()
    if isinstance(gv, float) or isinstance(wv, float) or want.dtype.name == "bfloat16":
        gv, wv = float(gv), float(wv)
    msg = (f"{bad} of {total} elements differ beyond {tol.describe()} (max abs error {max_abs:.3g}); "
           f"worst at {list(idx)}: got {_fmt(gv)}, expected {_fmt(wv)}")
    return Comparison(False, max_abs, max_rel, bad, total, idx, gv, wv, msg)


# -- statistics --------------------------------------------------------------------------

@dataclass(frozen=True)
class ArrayStats:
    """Summary statistics of a tensor (over its finite values), for divergence reports."""

    dtype: str
    shape: tuple[int, ...]
    min: float = math.nan
    max: float = math.nan
    mean: float = math.nan
    std: float = math.nan
    nans: int = 0
    infs: int = 0

    def format(self) -> str:
        head = f"{self.dtype}[{','.join(map(str, self.shape))}]"
        if self.min != self.min and self.nans == 0 and self.infs == 0:
            return head + "  (empty)"
        extra = "".join([f"  NaN {self.nans}" if self.nans else "", f"  inf {self.infs}" if self.infs else ""])
        return (f"{head}  min {self.min:.6g}  max {self.max:.6g}  mean {self.mean:.6g}  std {self.std:.6g}"
                + extra)


def array_stats(a: np.ndarray) -> ArrayStats:
    """Min, max, mean and standard deviation of the finite values; NaN and infinity counts."""
    arr = np.asarray(a)
    head = (str(arr.dtype), tuple(int(d) for d in arr.shape))
    if arr.size == 0 or not (arr.dtype.kind in "biu" or is_float_dtype(arr.dtype)):
        return ArrayStats(*head)
    x = arr.astype(np.float64)
    fin = x[np.isfinite(x)]
    nans, infs = int(np.isnan(x).sum()), int(np.isinf(x).sum())
    if not fin.size:
        return ArrayStats(*head, nans=nans, infs=infs)
    return ArrayStats(*head, float(fin.min()), float(fin.max()), float(fin.mean()), float(fin.std()), nans, infs)


__all__ = [
    "BITWISE", "EXACT", "KIND_TOLERANCES", "TOLERANCE_CLASSES", "ArrayStats", "Comparison", "Tolerance",
    "array_stats", "compare_arrays", "finfo", "is_float_dtype", "tolerance_class", "tolerance_for",
]
