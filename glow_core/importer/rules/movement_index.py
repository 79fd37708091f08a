"""Import rules for indexing ONNX operators: Gather*, Scatter*, OneHot, Compress, NonZero,
ReverseSequence, TensorScatter.

Compress needs a compile-time condition (it becomes a Gather of the selected
positions); NonZero needs compile-time data (its output shape depends on it).
"""

from __future__ import annotations

import numpy as np

from glow_core.errors import GlowTypeError
from glow_core.importer.context import NodeContext, import_rule
from glow_core.importer.rules.movement import reshape
from glow_core.ir.defs.movement_index import SCATTER_REDUCTIONS
from glow_core.ir.graph import Value
from glow_core.ir.types import INDEX_KINDS, normalize_axis


def _index_operand(ctx: NodeContext, i: int) -> Value:
    v = ctx.req(i)
    if v.type.elem not in INDEX_KINDS:
        raise ctx.unsupported(f"indices of element type {v.type.elem.value} (int32 and int64 are supported)")
    return v


@import_rule("Gather")
def _gather(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["axis"])
    x, idx = ctx.req(0), _index_operand(ctx, 1)
    axis = normalize_axis(int(ctx.attr("axis", 0)), x.type.rank)
    return ctx.emit("Gather", [x, idx], {"axis": axis})


@import_rule("GatherElements")
def _gather_elements(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["axis"])
    x, idx = ctx.req(0), _index_operand(ctx, 1)
    axis = normalize_axis(int(ctx.attr("axis", 0)), x.type.rank)
    return ctx.emit("GatherElements", [x, idx], {"axis": axis})


@import_rule("GatherND")
def _gather_nd(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["batch_dims"] if ctx.opset >= 12 else [])
    x, idx = ctx.req(0), _index_operand(ctx, 1)
    return ctx.emit("GatherND", [x, idx], {"batch_dims": int(ctx.attr("batch_dims", 0))})


def _reduction(ctx: NodeContext, since: dict[str, int]) -> str:
    red = str(ctx.attr("reduction", "none"))
    if red not in SCATTER_REDUCTIONS or ctx.opset < since.get(red, 0):
        raise ctx.unsupported(f"reduction '{red}' at opset {ctx.opset}")
    if red != "none" and not (ctx.type(0).elem.is_float or ctx.type(0).elem.is_int):
        raise ctx.unsupported(f"reduction '{red}' of {ctx.type(0).elem.value} data")
    return red


#: reductions and the opset that introduced each
_REDUCTIONS_SINCE = {"add": 16, "mul": 16, "max": 18, "min": 18}


@import_rule("ScatterElements", "Scatter")
def _scatter_elements(ctx: NodeContext) -> list[Value]:
    has_reduction = ctx.op_type == "ScatterElements" and ctx.opset >= 16
    ctx.check_attrs(["axis", "reduction"] if has_reduction else ["axis"])
    x, idx, upd = ctx.req(0), _index_operand(ctx, 1), ctx.req(2)
    axis = normalize_axis(int(ctx.attr("axis", 0)), x.type.rank)
    red = _reduction(ctx, _REDUCTIONS_SINCE) if has_reduction else "none"
    return ctx.emit("ScatterElements", [x, idx, upd], {"axis": axis, "reduction": red})


@import_rule("ScatterND")
def _scatter_nd(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["reduction"] if ctx.opset >= 16 else [])
    x, idx, upd = ctx.req(0), _index_operand(ctx, 1), ctx.req(2)
    red = _reduction(ctx, _REDUCTIONS_SINCE) if ctx.opset >= 16 else "none"
    return ctx.emit("ScatterND", [x, idx, upd], {"reduction": red})


@import_rule("OneHot")
def _one_hot(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["axis"])
    idx, values = ctx.req(0), ctx.req(2)
    if not (idx.type.elem.is_int or idx.type.elem.is_float):
        raise ctx.unsupported(f"indices of element type {idx.type.elem.value}")
    depth_arr = ctx.const(1, "depth")
    assert depth_arr is not None
    if depth_arr.size != 1:
        raise GlowTypeError(f"{ctx.where()}: depth must hold one value")
    depth_val = depth_arr.reshape(-1)[0]
    if not np.isfinite(depth_val):  # (int() of NaN or an infinity raised a bare ValueError / OverflowError)
        raise ctx.unsupported(f"depth {depth_val} (a positive whole number is required)")
    depth = int(depth_val)
    if depth != depth_val or depth < 1:
        raise ctx.unsupported(f"depth {depth_val} (a positive whole number is required)")
    values = reshape(ctx, values, (2,)) if values.type.size == 2 else values
    r = idx.type.rank
    axis = int(ctx.attr("axis", -1))
    if not -r - 1 <= axis <= r:
        raise GlowTypeError(f"{ctx.where()}: axis {axis} is out of range for rank {r + 1}")
    axis = axis + r + 1 if axis < 0 else axis
    return ctx.emit("OneHot", [idx, values], {"depth": depth, "axis": axis})


@import_rule("Compress")
def _compress(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["axis"])
    x = ctx.req(0)
    cond = ctx.const(1, "the condition (it decides the output shape)")
    assert cond is not None
    if np.ndim(cond) != 1:  # the spec's condition is 1-D (the reference and onnxruntime refuse others)
        raise GlowTypeError(f"{ctx.where()}: the condition must be 1-D, got shape {list(np.shape(cond))}")
    cond = np.asarray(cond).astype(bool)
    axis = ctx.attr("axis")
    if axis is None:
        x = reshape(ctx, x, (x.type.size,))
        axis = 0
    axis = normalize_axis(int(axis), x.type.rank)
    if cond.size > x.shape[axis]:
        raise GlowTypeError(f"{ctx.where()}: condition has {cond.size} entries for an axis of {x.shape[axis]}")
    picked = ctx.constant(np.flatnonzero(cond).astype(np.int64), name=f"{ctx.name}_positions")
    return ctx.emit("Gather", [x, picked], {"axis": axis})


@import_rule("NonZero")
def _non_zero(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs([])
    data = ctx.const(0, "the data (NonZero's output shape depends on its values)")
    assert data is not None
    if data.ndim == 0:
        raise ctx.unsupported("NonZero of a scalar")
    return [ctx.constant(np.array(np.nonzero(data), np.int64).reshape(data.ndim, -1))]


@import_rule("ReverseSequence")
def _reverse_sequence(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["batch_axis", "time_axis"])
    x, lens = ctx.req(0), _index_operand(ctx, 1)
    return ctx.emit("ReverseSequence", [x, lens], {"batch_axis": int(ctx.attr("batch_axis", 1)),
                                                   "time_axis": int(ctx.attr("time_axis", 0))})


@import_rule("TensorScatter")
def _tensor_scatter(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["axis", "mode"])
    past, upd, write = ctx.req(0), ctx.req(1), ctx.input(2)
    mode = str(ctx.attr("mode", "linear"))
    if mode not in ("linear", "circular"):
        raise ctx.unsupported(f"mode '{mode}'")
    axis = normalize_axis(int(ctx.attr("axis", -2)), past.type.rank)
    return ctx.emit("TensorScatter", [past, upd, write], {"axis": axis, "circular": mode == "circular"})
