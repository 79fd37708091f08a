"""Reductions, arg-reductions, scans, TopK and the softmax family.

Attributes are normalized by the importer: ``axes`` are non-negative, strictly
increasing and explicit (reducing every axis lists them all; an empty
``axes`` reduces over no axis, i.e. each element alone: ReduceL1 becomes
``abs``, ReduceSumSquare ``x*x``, as onnxruntime does for
``noop_with_empty_axes``). A single ``axis`` is non-negative.

Reducing an axis of length zero yields the reduction's identity (0 for sums,
1 for products, the lowest/highest value for max/min, -inf for the log
reductions); ReduceMean of an empty set is NaN (0/0) for floats.

The softmax kinds take a set of ``axes`` normalized jointly (ONNX opset < 13
coerces the input to 2-D at ``axis``: that is the trailing axes
``axis..rank-1`` taken together; opset >= 13 is one axis).
"""

from __future__ import annotations

from typing import Sequence

from glow_core.errors import GlowTypeError
from glow_core.ir.defs.common import Attrs, Types, check_elems, req
from glow_core.ir.kinds import AttrType as A
from glow_core.ir.kinds import Category as C
from glow_core.ir.kinds import attr, define_kind
from glow_core.ir.types import FLOAT_KINDS, INT_KINDS, NUMERIC_KINDS, ElemKind, TensorType

#: element kinds of the arithmetic reductions (ONNX: floats, int32/64, uint32/64; we take every int)
REDUCE_KINDS = NUMERIC_KINDS
#: ReduceMax/ReduceMin also take bool (opset 20)
MINMAX_KINDS = NUMERIC_KINDS | {ElemKind.BOOL}
#: the log reductions are defined for floats only here (ONNX dropped ints at opset 28)
LOG_REDUCE_KINDS = FLOAT_KINDS
#: ArgMax/ArgMin/TopK operands
ARG_KINDS = NUMERIC_KINDS
#: CumSum/CumProd
SCAN_KINDS = FLOAT_KINDS | INT_KINDS


# -- helpers -----------------------------------------------------------------------

def check_axes(axes: Sequence[int], rank: int, what: str = "axes") -> None:
    """``axes`` are in [0, rank) and strictly increasing (the normalized form)."""
    if any(a < 0 or a >= rank for a in axes) or any(b <= a for a, b in zip(axes, axes[1:])):
        raise GlowTypeError(f"{what} {list(axes)} must be distinct, sorted and in [0, {rank})")


def check_axis(axis: int, rank: int, what: str = "axis") -> None:
    if not 0 <= axis < max(rank, 1):
        raise GlowTypeError(f"{what} {axis} must be in [0, {rank})")


def reduced_shape(shape: Sequence[int], axes: Sequence[int], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce_rule(allowed: frozenset[ElemKind]):  # type: ignore[no-untyped-def]
    def rule(types: Types, attrs: Attrs) -> list[TensorType]:
        x = req(types, 0)
        check_elems(x, allowed, "reduction input")
        check_axes(attrs["axes"], x.rank)
        return [TensorType(x.elem, reduced_shape(x.shape, attrs["axes"], attrs["keepdims"]))]

    return rule


_REDUCE_ATTRS = (
    attr("axes", A.INTS, doc="non-negative, sorted; () reduces each element alone"),
    attr("keepdims", A.BOOL, True),
)

#: kind -> (element kinds, categories beyond REDUCTION, doc)
_REDUCTIONS: dict[str, tuple[frozenset[ElemKind], tuple[C, ...], str]] = {
    "ReduceSum": (REDUCE_KINDS, (C.PRIMITIVE,), "Sum over axes (float16/bfloat16 accumulate in float32)."),
    "ReduceMean": (REDUCE_KINDS, (), "Mean over axes; integers divide the sum truncating toward zero."),
    "ReduceMax": (MINMAX_KINDS, (C.PRIMITIVE,), "Max over axes; lowest value (-inf) over an empty set."),
    "ReduceMin": (MINMAX_KINDS, (C.PRIMITIVE,), "Min over axes; highest value (+inf) over an empty set."),
    "ReduceProd": (REDUCE_KINDS, (C.PRIMITIVE,), "Product over axes."),
    "ReduceL1": (REDUCE_KINDS, (), "Sum of absolute values."),
    "ReduceL2": (REDUCE_KINDS, (), "sqrt(sum(x*x)); integers truncate the root."),
    "ReduceLogSum": (LOG_REDUCE_KINDS, (), "log(sum(x))."),
    "ReduceLogSumExp": (LOG_REDUCE_KINDS, (), "log(sum(exp(x))), computed stably with the max subtracted."),
    "ReduceSumSquare": (REDUCE_KINDS, (), "sum(x*x)."),
}

for _name, (_elems, _cats, _doc) in _REDUCTIONS.items():
    define_kind(_name, inputs=("Input",), attrs=_REDUCE_ATTRS, infer=_reduce_rule(_elems),
                categories=(C.REDUCTION,) + _cats, elems=_elems, doc=_doc)


# -- ArgMax / ArgMin -----------------------------------------------------------------

def _arg_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    check_elems(x, ARG_KINDS, "ArgMax/ArgMin input")
    if x.rank == 0:
        raise GlowTypeError("ArgMax/ArgMin need an input of rank >= 1")
    axis = attrs["axis"]
    check_axis(axis, x.rank)
    if x.shape[axis] == 0:
        raise GlowTypeError(f"cannot take an arg-reduction over axis {axis} of length 0")
    return [TensorType(ElemKind.INT64, reduced_shape(x.shape, (axis,), attrs["keepdims"]))]


_ARG_ATTRS = (
    attr("axis", A.INT),
    attr("keepdims", A.BOOL, True),
    attr("select_last_index", A.BOOL, False, doc="ties: last index instead of first"),
)
for _name in ("ArgMax", "ArgMin"):
    define_kind(_name, inputs=("Input",), attrs=_ARG_ATTRS, infer=_arg_rule, categories=(C.REDUCTION, C.PRIMITIVE),
                elems=ARG_KINDS | {ElemKind.INT64},
                doc=f"{_name[3:]} index (int64) along axis; ties pick the first index unless select_last_index.")


# -- CumSum / CumProd ------------------------------------------------------------------

def _scan_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    check_elems(x, SCAN_KINDS, "scan input")
    if x.rank == 0:
        raise GlowTypeError("CumSum/CumProd need an input of rank >= 1")
    check_axis(attrs["axis"], x.rank)
    return [x]


_SCAN_ATTRS = (
    attr("axis", A.INT),
    attr("exclusive", A.BOOL, False, doc="element i excludes x[i]"),
    attr("reverse", A.BOOL, False, doc="scan from the end"),
)
define_kind("CumSum", inputs=("Input",), attrs=_SCAN_ATTRS, infer=_scan_rule, elems=SCAN_KINDS,
            doc="Inclusive/exclusive, forward/reverse prefix sum along axis.")
define_kind("CumProd", inputs=("Input",), attrs=_SCAN_ATTRS, infer=_scan_rule, elems=SCAN_KINDS,
            doc="Inclusive/exclusive, forward/reverse prefix product along axis.")


# -- TopK ------------------------------------------------------------------------------

def _topk_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    check_elems(x, ARG_KINDS, "TopK input")
    if x.rank == 0:
        raise GlowTypeError("TopK needs an input of rank >= 1")
    axis, k = attrs["axis"], attrs["k"]
    check_axis(axis, x.rank)
    if not 0 <= k <= x.shape[axis]:
        raise GlowTypeError(f"k={k} must be in [0, {x.shape[axis]}] (the length of axis {axis})")
    shape = tuple(k if i == axis else d for i, d in enumerate(x.shape))
    return [TensorType(x.elem, shape), TensorType(ElemKind.INT64, shape)]


define_kind("TopK", inputs=("Input",), outputs=("Values", "Indices"),
            attrs=(attr("k", A.INT), attr("axis", A.INT), attr("largest", A.BOOL, True)),
            infer=_topk_rule, categories=(C.REDUCTION, C.PRIMITIVE), elems=ARG_KINDS | {ElemKind.INT64},
            doc="The k largest (or smallest) along axis, sorted; equal values keep the lower index first.")


# -- Softmax family -----------------------------------------------------------------------

def _softmax_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    check_elems(x, FLOAT_KINDS, "softmax input")
    axes = attrs["axes"]
    if not axes and x.rank > 0:
        raise GlowTypeError("softmax needs at least one axis")
    check_axes(axes, x.rank)
    return [x]


_SOFTMAX_ATTRS = (attr("axes", A.INTS, doc="normalized jointly; non-negative, sorted"),)
define_kind("Softmax", inputs=("Input",), attrs=_SOFTMAX_ATTRS, infer=_softmax_rule, categories=(C.ACTIVATION,),
            elems=FLOAT_KINDS, doc="exp(x - max) / sum(exp(x - max)) over axes taken together.")
define_kind("LogSoftmax", inputs=("Input",), attrs=_SOFTMAX_ATTRS, infer=_softmax_rule, categories=(C.ACTIVATION,),
            elems=FLOAT_KINDS, doc="x - max - log(sum(exp(x - max))) over axes taken together.")
define_kind("Hardmax", inputs=("Input",), attrs=_SOFTMAX_ATTRS, infer=_softmax_rule, categories=(C.ACTIVATION,),
            elems=FLOAT_KINDS, doc="1 at the first maximum (row-major over axes), 0 elsewhere.")
