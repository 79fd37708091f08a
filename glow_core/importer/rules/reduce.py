"""Import rules for ONNX reductions, ArgMax/ArgMin, CumSum/CumProd, TopK and the softmax family.

Opset differences handled here:

- reduction ``axes`` is an attribute before opset 13 (ReduceSum) / 18 (the
  others) and an optional input after, together with
  ``noop_with_empty_axes``; no axes reduce every axis unless that flag is
  set, in which case each element is reduced alone (the identity for
  sum/mean/max/min/prod, ``abs`` for ReduceL1, ``x*x`` for ReduceSumSquare,
  as onnxruntime does);
- Softmax/LogSoftmax/Hardmax before opset 13 coerce the input to 2-D at
  ``axis`` (default 1), i.e. normalize over axes ``axis..rank-1`` jointly;
  from opset 13 they normalize along one ``axis`` (default -1);
- TopK's ``k`` is an attribute before opset 10 and an input after.
"""

from __future__ import annotations

from typing import Sequence

from glow_core.importer.context import NodeContext, import_rule
from glow_core.ir.graph import Value
from glow_core.ir.kinds import get_kind

#: reductions whose ``axes`` became an input at an opset other than 18
_AXES_INPUT_SINCE = {"ReduceSum": 13}
#: reductions for which reducing each element alone is the identity
_IDENTITY_WHEN_NOOP = frozenset({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"})
REDUCTIONS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


def require_elems(ctx: NodeContext, v: Value, kind: str, what: str = "input") -> None:
    """Refuse (as unsupported) an operand whose element kind the graph kind does not take."""
    allowed = get_kind(kind).elems
    if v.type.elem not in allowed:
        raise ctx.unsupported(f"{what} of element kind {v.type.elem.value} is not supported "
                              f"(supported: {', '.join(sorted(e.value for e in allowed))})")


def norm_axis(ctx: NodeContext, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise ctx.unsupported(f"{what} {axis} is out of range for an input of rank {rank}")
    return axis + rank if axis < 0 else axis


def norm_axes(ctx: NodeContext, axes: Sequence[int], rank: int) -> tuple[int, ...]:
    out = [norm_axis(ctx, int(a), rank, "axes entry") for a in axes]
    if len(set(out)) != len(out):
        raise ctx.unsupported(f"axes {list(axes)} name an axis twice")
    return tuple(sorted(out))


@import_rule(*REDUCTIONS)
def _reduce(ctx: NodeContext) -> list[Value]:
    op = ctx.op_type
    x = ctx.req(0)
    if ctx.opset >= _AXES_INPUT_SINCE.get(op, 18):
        ctx.check_attrs(["keepdims", "noop_with_empty_axes"])
        axes = ctx.const_ints(1, "axes")
        noop = bool(ctx.attr("noop_with_empty_axes", 0))
    else:
        ctx.check_attrs(["axes", "keepdims"])
        a = ctx.attr("axes")
        axes = None if a is None else tuple(int(v) for v in a)
        noop = False
    keepdims = bool(ctx.attr("keepdims", 1))
    require_elems(ctx, x, op)
    rank = x.type.rank
    if not axes:
        if noop and op in _IDENTITY_WHEN_NOOP:
            return [x]
        norm: tuple[int, ...] = () if noop else tuple(range(rank))
    else:
        norm = norm_axes(ctx, axes, rank)
    return ctx.emit(op, [x], {"axes": norm, "keepdims": keepdims})


@import_rule("ArgMax", "ArgMin")
def _arg(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["axis", "keepdims", "select_last_index"])
    x = ctx.req(0)
    require_elems(ctx, x, ctx.op_type)
    if x.type.rank == 0:
        raise ctx.unsupported("the input is a scalar (rank 0)")
    axis = norm_axis(ctx, int(ctx.attr("axis", 0)), x.type.rank)
    if x.type.shape[axis] == 0:
        raise ctx.unsupported(f"axis {axis} has length 0: there is no index to return")
    return ctx.emit(ctx.op_type, [x], {"axis": axis, "keepdims": bool(ctx.attr("keepdims", 1)),
                                       "select_last_index": bool(ctx.attr("select_last_index", 0))})


@import_rule("CumSum", "CumProd")
def _scan(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["exclusive", "reverse"])
    x = ctx.req(0)
    require_elems(ctx, x, ctx.op_type)
    if x.type.rank == 0:
        raise ctx.unsupported("the input is a scalar (rank 0)")
    axis_v = ctx.const_ints(1, "axis")
    if axis_v is None or len(axis_v) != 1:
        raise ctx.unsupported("the axis operand must hold exactly one value")
    axis = norm_axis(ctx, axis_v[0], x.type.rank)
    return ctx.emit(ctx.op_type, [x], {"axis": axis, "exclusive": bool(ctx.attr("exclusive", 0)),
                                       "reverse": bool(ctx.attr("reverse", 0))})


@import_rule("TopK")
def _topk(ctx: NodeContext) -> list[Value]:
    x = ctx.req(0)
    if ctx.opset < 10:
        ctx.check_attrs(["axis", "k"])
        if not ctx.has_attr("k"):
            raise ctx.unsupported("attribute 'k' is missing")
        k = int(ctx.attr("k"))
    else:
        ctx.check_attrs(["axis", "largest", "sorted"])
        kv = ctx.const_ints(1, "k")
        if kv is None or len(kv) != 1:
            raise ctx.unsupported("the k operand must hold exactly one value")
        k = kv[0]
    require_elems(ctx, x, "TopK")
    if x.type.rank == 0:
        raise ctx.unsupported("the input is a scalar (rank 0)")
    axis = norm_axis(ctx, int(ctx.attr("axis", -1)), x.type.rank)
    if not 0 <= k <= x.type.shape[axis]:
        raise ctx.unsupported(f"k={k} is outside [0, {x.type.shape[axis]}] (the length of axis {axis})")
    # sorted=0 leaves the order unspecified: a sorted result is one valid answer
    return ctx.emit("TopK", [x], {"k": k, "axis": axis, "largest": bool(ctx.attr("largest", 1))})


@import_rule("Softmax", "LogSoftmax", "Hardmax")
def _softmax(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["axis"])
    x = ctx.req(0)
    require_elems(ctx, x, ctx.op_type)
    rank = x.type.rank
    if rank == 0:
        raise ctx.unsupported("the input is a scalar (rank 0)")
    shape = x.type.shape
    if ctx.opset < 13:
        # coerced to 2-D [prod(d[:axis]), prod(d[axis:])]: the trailing axes together
        axis = norm_axis(ctx, int(ctx.attr("axis", 1)), rank)
        axes = tuple(a for a in range(axis, rank) if shape[a] != 1) or (axis,)
    else:
        axes = (norm_axis(ctx, int(ctx.attr("axis", -1)), rank),)
    return ctx.emit(ctx.op_type, [x], {"axes": axes})
