"""What a backend author tests with: tolerances, comparisons, runs against the reference backend.

Tolerances are declared once, in :data:`KIND_TOLERANCES` (node kind -> a
tolerance *class*) and :data:`TOLERANCE_CLASSES` (class -> element kind ->
:class:`Tolerance`); kinds not listed take the class of their category
(:func:`tolerance_class`). Integers and booleans always compare exactly. The
conformance suite (``glow-conformance``) compares with these tables, and records
them in its reports.

Helpers::

    from glow_sdk.testing import check_node
    r = check_node("xyz", "Add", [a, b])          # run one Add on backend xyz and on the reference
    assert r.ok, r.message

    compare_arrays(got, want, tolerance_for("Exp", ElemKind.FLOAT32))   # -> Comparison
    array_stats(a)                                                       # -> ArrayStats (min, max, mean, NaN, ...)

The run helpers drive the compiler (``glow_core.api.prepare_function``, the
plugin registry); they import it when called, so importing this module stays
as light as the rest of the SDK.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from glow_core.errors import UnsupportedError
from glow_core.ir.graph import Function, Node, Value
from glow_core.ir.kinds import Category, get_kind
from glow_core.ir.types import ElemKind, TensorType

if TYPE_CHECKING:
    from glow_sdk.backend import Backend

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
        bad_mask = got_a != want
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


# -- running one node / one function ------------------------------------------------------

def _backend(backend: str | Backend) -> Backend:
    if isinstance(backend, str):
        from glow_core.plugin_host import get_backend

        return get_backend(backend)
    return backend


def pad_operands(kind: str, operands: Sequence[np.ndarray | None]) -> list[np.ndarray | None]:
    """``operands`` with None for omitted trailing optional operands (kernels take every operand slot)."""
    spec = get_kind(kind)
    out = list(operands)
    if spec.inputs and not spec.inputs[-1].variadic and len(out) < len(spec.inputs):
        out += [None] * (len(spec.inputs) - len(out))
    return out


def one_node_function(kind: str, operands: Sequence[np.ndarray | None], attrs: Mapping[str, Any] | None = None,
                      types: Sequence[TensorType | None] | None = None, consts: Sequence[int] = ()) -> Function:
    """A function holding one ``kind`` node; operand ``i`` is input ``in{i}`` (a constant if ``i`` in ``consts``;
    None omits an optional operand). ``types`` overrides operand types (quantized kinds). Outputs: ``out{j}``."""
    operands = pad_operands(kind, operands)
    fn = Function("main")
    values: list[Value | None] = []
    for i, a in enumerate(operands):
        if a is None:
            values.append(None)
            continue
        t = types[i] if types is not None and types[i] is not None else TensorType.of(a)
        assert t is not None
        values.append(fn.add_constant(a, f"in{i}", t) if i in consts else fn.add_input(f"in{i}", t))
    node = fn.create(kind, values, dict(attrs or {}), name=kind.lower())
    for j, out in enumerate(node.outputs):
        fn.set_output(f"out{j}", out)
    return fn


def feeds_of(fn: Function, operands: Sequence[np.ndarray | None]) -> dict[str, np.ndarray]:
    """The feeds of a :func:`one_node_function`: ``in{i}`` for the operands that are inputs."""
    names = {p.name for p in fn.inputs}
    return {f"in{i}": a for i, a in enumerate(operands) if a is not None and f"in{i}" in names}


def unsupported_nodes(fn: Function, backend: Backend) -> list[Node]:
    return [n for n in fn.nodes if not backend.supports(n)]


def prepare_for(fn: Function, backend: str | Backend, *, lower_all: bool = False) -> Function:
    """Optimize and lower ``fn`` for ``backend`` in place (``lower_all``: lower every high-level kind)."""
    from glow_core.api import prepare_function
    from glow_core.passes import PassContext

    be = _backend(backend)
    ctx = PassContext(backend=be, options={"lower_all": True} if lower_all else {})
    return prepare_function(fn, be, ctx=ctx)


def run_function(fn: Function, backend: str | Backend, feeds: Mapping[str, np.ndarray], *,
                 lower_all: bool = False, prepared: bool = False) -> dict[str, np.ndarray]:
    """Prepare (unless ``prepared``), check support (every offending node at once), compile and run ``fn``."""
    from glow_core.api import check_support
    from glow_sdk.backend import CompileOptions

    be = _backend(backend)
    if not prepared:
        prepare_for(fn, be, lower_all=lower_all)
    check_support(fn, be)
    return be.compile(fn, CompileOptions()).execute(dict(feeds))


def evaluate_reference(kind: str, operands: Sequence[np.ndarray | None], attrs: Mapping[str, Any],
                       out_types: Sequence[TensorType]) -> list[np.ndarray]:
    """Evaluate one node on the reference backend (``interpreter`` unless ``GLOW_REFERENCE_BACKEND`` says otherwise)."""
    from glow_core.plugin_host import reference_backend

    return reference_backend().evaluate(kind, attrs, list(operands), list(out_types))


@dataclass
class NodeCheck:
    """The outcome of :func:`check_node`: one comparison per result."""

    kind: str
    backend: str
    comparisons: list[Comparison] = field(default_factory=list)
    nodes: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.comparisons)

    @property
    def max_error(self) -> float:
        return max((c.max_abs_error for c in self.comparisons), default=0.0)

    @property
    def message(self) -> str:
        bad = [f"result {i}: {c.message}" for i, c in enumerate(self.comparisons) if not c.ok]
        return "; ".join(bad) if bad else "matches the reference"


def check_node(backend: str | Backend, kind: str, operands: Sequence[np.ndarray | None],
               attrs: Mapping[str, Any] | None = None, *, tolerance: Tolerance | None = None,
               types: Sequence[TensorType | None] | None = None, lower_all: bool = False) -> NodeCheck:
    """Run one ``kind`` node on ``backend`` (through the real pipeline) and on the reference; compare.

    Raises :class:`~glow_core.errors.UnsupportedError` when the backend cannot
    run the (lowered) node.
    """
    be = _backend(backend)
    operands = pad_operands(kind, operands)
    fn = one_node_function(kind, operands, attrs, types)
    node = fn.nodes[0]
    out_types = [o.type for o in node.outputs]
    want = evaluate_reference(kind, operands, node.attrs, out_types)
    got = run_function(fn, be, feeds_of(fn, operands), lower_all=lower_all)
    check = NodeCheck(kind, be.name, nodes=fn.count_by_kind())
    for j, (w, t) in enumerate(zip(want, out_types)):
        tol = tolerance or tolerance_for(kind, t.elem)
        check.comparisons.append(compare_arrays(got[f"out{j}"], w, tol))
    return check


def assert_matches_reference(backend: str | Backend, kind: str, operands: Sequence[np.ndarray | None],
                             attrs: Mapping[str, Any] | None = None, **kw: Any) -> NodeCheck:
    """:func:`check_node`, raising AssertionError with the comparison message when a result differs."""
    check = check_node(backend, kind, operands, attrs, **kw)
    if not check.ok:
        raise AssertionError(f"{kind} on backend {check.backend}: {check.message}")
    return check


__all__ = [
    "BITWISE", "EXACT", "KIND_TOLERANCES", "TOLERANCE_CLASSES", "ArrayStats", "Comparison", "NodeCheck",
    "Tolerance", "UnsupportedError", "array_stats", "assert_matches_reference", "check_node", "compare_arrays",
    "evaluate_reference", "feeds_of", "finfo", "is_float_dtype", "one_node_function", "pad_operands", "prepare_for", "run_function", "tolerance_class",
    "tolerance_for", "unsupported_nodes",
]
