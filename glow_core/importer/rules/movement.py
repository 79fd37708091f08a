"""Import rules for data-movement and shape ONNX operators.

Constant, Shape and Size become graph constants (shapes are static);
ConstantOfShape a Broadcast of its fill value (folded into a constant unless it
is too large to fold). Reshape / Flatten / Squeeze / Unsqueeze become Reshape nodes with the
full output shape; Slice, Pad (negative pads crop with a Slice), CenterCropPad,
Concat, Split, Transpose, Tile, Expand (Broadcast), DepthToSpace,
SpaceToDepth, Trilu and BitCast map to their kinds with normalized attributes.
Operands that decide shapes are read with ``ctx.const``.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from glow_core.errors import GlowTypeError
from glow_core.importer.context import NodeContext, import_rule, onnx_elem, tensor_array
from glow_core.ir.graph import Value
from glow_core.ir.types import ElemKind, broadcast_shapes, normalize_axis

# -- shared helpers (also used by the other movement rule modules) --------------


def norm_axes(ctx: NodeContext, axes: Sequence[int], rank: int, what: str = "axes") -> list[int]:
    """Non-negative, distinct axes (GlowTypeError for out-of-range or repeated ones)."""
    out = [normalize_axis(int(a), rank, what) for a in axes]
    if len(set(out)) != len(out):
        raise GlowTypeError(f"{ctx.where()}: {what} {list(axes)} repeat an axis")
    return out


def reshape(ctx: NodeContext, x: Value, shape: Sequence[int]) -> Value:
    shape = tuple(int(d) for d in shape)
    if shape == x.shape:
        return x
    return ctx.emit1("Reshape", [x], {"shape": shape})


def slice_axes(ctx: NodeContext, x: Value, per_axis: dict[int, tuple[int, int, int]]) -> Value:
    """Slice with ``{axis: (start, size, step)}`` (other axes whole); no node for a no-op."""
    starts, sizes, steps = [0] * x.type.rank, list(x.shape), [1] * x.type.rank
    for axis, (start, size, step) in per_axis.items():
        starts[axis], sizes[axis], steps[axis] = (start if size else 0), size, step
    if sizes == list(x.shape) and all(s == 1 for s in steps):
        return x
    return ctx.emit1("Slice", [x], {"starts": starts, "sizes": sizes, "steps": steps})


def pad_value(x: Value, value: np.ndarray | float | bool) -> np.ndarray:
    arr = np.asarray(value).reshape(()).astype(x.type.dtype)
    arr.setflags(write=False)
    return arr


def pad(ctx: NodeContext, x: Value, begins: Sequence[int], ends: Sequence[int], mode: str = "constant",
        value: np.ndarray | float | bool = 0) -> Value:
    """Pad with possibly negative amounts: negative ones crop the padded tensor (constant mode only)."""
    if any(p < 0 for p in list(begins) + list(ends)) and mode != "constant":
        raise ctx.unsupported(f"negative pads (cropping) in {mode} mode")
    crop: dict[int, tuple[int, int, int]] = {}
    for axis, dim in enumerate(x.shape):
        lo, hi = begins[axis], ends[axis]
        if dim + lo + hi < 0:
            raise GlowTypeError(f"{ctx.where()}: pads ({lo}, {hi}) crop axis {axis} of {x.type} below zero")
        if lo < 0 or hi < 0:
            crop[axis] = (max(-lo, 0), dim + lo + hi, 1)
        if mode != "constant" and (lo or hi) and dim == 0:
            raise ctx.unsupported(f"{mode} padding of the empty axis {axis}")
        if mode == "reflect" and max(lo, hi) >= dim:
            raise ctx.unsupported(f"reflect pads ({lo}, {hi}) not smaller than dimension {dim} of axis {axis}")
    grow_lo, grow_hi = [max(p, 0) for p in begins], [max(p, 0) for p in ends]
    if any(grow_lo) or any(grow_hi):
        x = ctx.emit1("Pad", [x], {"pads": grow_lo + grow_hi, "mode": mode, "value": pad_value(x, value)})
    return slice_axes(ctx, x, crop)


def int_list(ctx: NodeContext, i: int, what: str) -> list[int] | None:
    vals = ctx.const_ints(i, what)
    return None if vals is None else list(vals)


# -- constants -----------------------------------------------------------------
_CONSTANT_LISTS = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
                   "value_ints": np.int64}


@import_rule("Constant")
def _constant(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["value", "value_float", "value_floats", "value_int", "value_ints", "sparse_value",
                     "value_string", "value_strings"])
    for a in ctx.node.attribute:
        if a.ref_attr_name:
            raise ctx.unsupported(f"attribute '{a.name}' refers to a function attribute")
        if a.name in ("sparse_value", "value_string", "value_strings"):
            raise ctx.unsupported(f"Constant with '{a.name}' (sparse and string tensors are not supported)")
        if a.name == "value":
            return [ctx.constant(tensor_array(a.t, ctx.where()))]
        if a.name in _CONSTANT_LISTS:
            return [ctx.constant(np.asarray(ctx.attr(a.name), _CONSTANT_LISTS[a.name]))]
    raise GlowTypeError(f"{ctx.where()}: Constant needs one value attribute")


@import_rule("Shape")
def _shape(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["start", "end"])
    shape = ctx.type(0).shape
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    return [ctx.constant(np.array(shape[start:end], np.int64))]


@import_rule("Size")
def _size(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs([])
    return [ctx.constant(np.array(ctx.type(0).size, np.int64))]


@import_rule("ConstantOfShape")
def _constant_of_shape(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["value"])
    shape = int_list(ctx, 0, "the shape")
    assert shape is not None
    if any(d < 0 for d in shape):
        raise GlowTypeError(f"{ctx.where()}: negative dimension in shape {shape}")
    fill = np.zeros(1, np.float32)
    for a in ctx.node.attribute:
        if a.name == "value":
            fill = tensor_array(a.t, ctx.where()).reshape(-1)
    if fill.size != 1:
        raise GlowTypeError(f"{ctx.where()}: value must hold one element")
    # a Broadcast of the fill value: folded into a constant unless it is too large to fold
    return ctx.emit("Broadcast", [ctx.constant(fill.reshape(()))], {"shape": shape})


# -- reshapes ------------------------------------------------------------------
@import_rule("Reshape")
def _reshape(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["allowzero"])
    x = ctx.req(0)
    spec = int_list(ctx, 1, "the shape")
    assert spec is not None
    allowzero = bool(ctx.attr("allowzero", 0))
    if allowzero and 0 in spec and -1 in spec:
        raise GlowTypeError(f"{ctx.where()}: with allowzero, shape {spec} cannot hold both 0 and -1")
    if spec.count(-1) > 1 or any(d < -1 for d in spec):
        raise GlowTypeError(f"{ctx.where()}: invalid shape {spec}")
    out = []
    for i, d in enumerate(spec):
        if d == 0 and not allowzero:
            if i >= x.type.rank:
                raise GlowTypeError(f"{ctx.where()}: shape {spec} copies dimension {i} of {x.type}, which has none")
            d = x.shape[i]
        out.append(d)
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or x.type.size % known:
            raise GlowTypeError(f"{ctx.where()}: cannot infer the -1 of shape {spec} for {x.type}")
        out[out.index(-1)] = x.type.size // known
    return [reshape(ctx, x, out)]


@import_rule("Flatten")
def _flatten(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["axis"])
    x = ctx.req(0)
    r = x.type.rank
    axis = int(ctx.attr("axis", 1))
    if not -r <= axis <= r:
        raise GlowTypeError(f"{ctx.where()}: axis {axis} is out of range for rank {r}")
    axis = axis + r if axis < 0 else axis
    return [reshape(ctx, x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))]


def _axes_operand(ctx: NodeContext, attr_until: int) -> list[int] | None:
    """Squeeze/Unsqueeze axes: an attribute before opset ``attr_until``, an operand from it."""
    if ctx.opset < attr_until:
        ctx.check_attrs(["axes"])
        axes = ctx.attr("axes")
        return None if axes is None else list(axes)
    ctx.check_attrs([])
    return int_list(ctx, 1, "the axes")


@import_rule("Squeeze")
def _squeeze(ctx: NodeContext) -> list[Value]:
    x = ctx.req(0)
    axes = _axes_operand(ctx, 13)
    if axes is not None and not axes:
        raise ctx.unsupported("an empty axes operand (onnxruntime squeezes every unit axis, the ONNX shape "
                              "inference none)")
    if axes is None:
        drop = [i for i, d in enumerate(x.shape) if d == 1]
    else:
        drop = norm_axes(ctx, axes, x.type.rank)
        bad = [a for a in drop if x.shape[a] != 1]
        if bad:
            raise GlowTypeError(f"{ctx.where()}: cannot squeeze axes {bad} of {x.type} (not of size 1)")
    return [reshape(ctx, x, [d for i, d in enumerate(x.shape) if i not in drop])]


@import_rule("Unsqueeze")
def _unsqueeze(ctx: NodeContext) -> list[Value]:
    x = ctx.req(0)
    axes = _axes_operand(ctx, 13)
    if axes is None:
        raise GlowTypeError(f"{ctx.where()}: Unsqueeze needs axes")
    if ctx.opset < 11 and any(a < 0 for a in axes):  # negative axes came with opset 11
        raise GlowTypeError(f"{ctx.where()}: negative axes {list(axes)} (allowed from opset 11 on)")
    rank = x.type.rank + len(axes)
    new = set(norm_axes(ctx, axes, rank))
    dims = iter(x.shape)
    return [reshape(ctx, x, [1 if i in new else next(dims) for i in range(rank)])]


@import_rule("Transpose")
def _transpose(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["perm"])
    x = ctx.req(0)
    r = x.type.rank
    perm = ctx.attr("perm")
    perm = list(range(r))[::-1] if perm is None else [int(p) + r if int(p) < 0 else int(p) for p in perm]
    if perm == list(range(r)):
        return [x]
    return ctx.emit("Transpose", [x], {"perm": perm})


# -- slicing and joining -------------------------------------------------------
_INT_MAXES = (2**31 - 1, 2**63 - 1)


def _slice_range(ctx: NodeContext, dim: int, start: int, end: int, step: int, axis: int) -> tuple[int, int, int]:
    """(first index, count, step) of an ONNX slice of one axis, clamped as the spec says."""
    if step == 0:
        raise GlowTypeError(f"{ctx.where()}: step 0 on axis {axis}")
    if step < 0 and end in _INT_MAXES and dim > 0:
        raise ctx.unsupported(f"end INT_MAX with the negative step {step} on axis {axis} (the spec clamps it to "
                              "the last element, onnxruntime reads it as 'to the beginning')")
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    count = max(-((start - end) // step), 0) if dim > 0 else 0  # ceil((end - start) / step)
    return (start if count else 0), count, step


@import_rule("Slice")
def _slice(ctx: NodeContext) -> list[Value]:
    x = ctx.req(0)
    if ctx.opset < 10:
        ctx.check_attrs(["starts", "ends", "axes"])
        starts, ends, axes, steps = ctx.attr("starts"), ctx.attr("ends"), ctx.attr("axes"), None
        if starts is None or ends is None:
            raise GlowTypeError(f"{ctx.where()}: Slice needs starts and ends")
    else:
        ctx.check_attrs([])
        starts, ends = int_list(ctx, 1, "starts"), int_list(ctx, 2, "ends")
        axes, steps = int_list(ctx, 3, "axes"), int_list(ctx, 4, "steps")
    assert starts is not None and ends is not None
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise GlowTypeError(f"{ctx.where()}: starts, ends, axes and steps differ in length")
    per_axis = {}
    for axis, start, end, step in zip(norm_axes(ctx, axes, x.type.rank), starts, ends, steps):
        per_axis[axis] = _slice_range(ctx, x.shape[axis], int(start), int(end), int(step), axis)
    return [slice_axes(ctx, x, per_axis)]


@import_rule("Concat")
def _concat(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["axis"])
    xs = [ctx.req(i) for i in range(ctx.num_inputs)]
    if ctx.attr("axis") is None:
        raise GlowTypeError(f"{ctx.where()}: Concat needs axis")
    axis = normalize_axis(int(ctx.attr("axis")), xs[0].type.rank)
    if len(xs) == 1:
        return xs
    return ctx.emit("Concat", xs, {"axis": axis})


@import_rule("Split")
def _split(ctx: NodeContext) -> list[Value]:
    x = ctx.req(0)
    n_out = ctx.num_outputs
    if ctx.opset < 13:
        ctx.check_attrs(["axis", "split"])
        split = ctx.attr("split")
        split = list(split) if split is not None else None
    else:
        ctx.check_attrs(["axis", "num_outputs"] if ctx.opset >= 18 else ["axis"])
        split = int_list(ctx, 1, "split")
    if x.type.rank == 0:
        raise GlowTypeError(f"{ctx.where()}: cannot split a scalar (the input must have rank 1 or more)")
    axis = normalize_axis(int(ctx.attr("axis", 0)), x.type.rank)
    dim = x.shape[axis]
    num = ctx.attr("num_outputs")
    if split is not None and num is not None:
        raise GlowTypeError(f"{ctx.where()}: give either split or num_outputs, not both")
    if split is None:
        parts = int(num) if num is not None else n_out
        if parts <= 0 or parts != n_out:  # checked before a list of `parts` sizes is made
            raise GlowTypeError(f"{ctx.where()}: cannot split into {parts} parts with {n_out} outputs")
        if num is None and dim % parts:
            raise GlowTypeError(f"{ctx.where()}: dimension {dim} does not split into {parts} equal parts")
        chunk = -(-dim // parts)
        split = [chunk] * (parts - 1) + [dim - chunk * (parts - 1)]
    if len(split) != n_out or any(s < 0 for s in split) or sum(split) != dim:
        raise GlowTypeError(f"{ctx.where()}: split {split} does not cut dimension {dim} into {n_out} outputs")
    return ctx.emit("Split", [x], {"axis": axis, "splits": split})


# -- padding -------------------------------------------------------------------
@import_rule("Pad")
def _pad(ctx: NodeContext) -> list[Value]:
    x = ctx.req(0)
    r = x.type.rank
    mode = str(ctx.attr("mode", "constant"))
    modes = ("constant", "reflect", "edge", "wrap") if ctx.opset >= 19 else ("constant", "reflect", "edge")
    if mode not in modes:
        raise ctx.unsupported(f"mode '{mode}' (opset {ctx.opset} defines {', '.join(modes)})")
    if ctx.opset < 11:
        ctx.check_attrs(["pads", "mode", "value"])
        pads, axes, value = list(ctx.attr("pads", [])), None, np.float32(ctx.attr("value", 0.0))
        if x.type.elem.is_int and value != np.round(value):
            raise ctx.unsupported(f"a fractional pad value {value} for {x.type.elem.value} data")
    else:
        ctx.check_attrs(["mode"])
        pads = int_list(ctx, 1, "pads") or []
        cv = ctx.const(2, "constant_value")
        value = np.zeros((), x.type.dtype) if cv is None else np.asarray(cv)
        if value.size != 1:
            raise GlowTypeError(f"{ctx.where()}: constant_value must hold one element")
        axes = int_list(ctx, 3, "axes") if ctx.opset >= 18 else None
    axes = norm_axes(ctx, axes, r) if axes is not None else list(range(r))
    if len(pads) != 2 * len(axes):
        raise GlowTypeError(f"{ctx.where()}: {len(pads)} pads for {len(axes)} axes")
    begins, ends = [0] * r, [0] * r
    for i, axis in enumerate(axes):
        begins[axis], ends[axis] = pads[i], pads[i + len(axes)]
    return [pad(ctx, x, begins, ends, mode, value)]


@import_rule("CenterCropPad")
def _center_crop_pad(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["axes"])
    x = ctx.req(0)
    r = x.type.rank
    shape = int_list(ctx, 1, "the shape")
    assert shape is not None
    axes = norm_axes(ctx, ctx.attr("axes", list(range(r))), r)
    if len(shape) != len(axes) or any(s < 0 for s in shape):
        raise GlowTypeError(f"{ctx.where()}: shape {shape} does not match axes {axes}")
    crop: dict[int, tuple[int, int, int]] = {}
    begins, ends = [0] * r, [0] * r
    for axis, want in zip(axes, shape):
        dim = x.shape[axis]
        if dim > want:
            crop[axis] = ((dim - want) // 2, want, 1)
        elif dim < want:
            begins[axis] = (want - dim) // 2
            ends[axis] = want - dim - begins[axis]
    return [pad(ctx, slice_axes(ctx, x, crop), begins, ends)]


# -- repetition ----------------------------------------------------------------
@import_rule("Tile")
def _tile(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs([])
    x = ctx.req(0)
    reps = int_list(ctx, 1, "repeats")
    assert reps is not None
    if len(reps) != x.type.rank or any(n < 0 for n in reps):
        raise GlowTypeError(f"{ctx.where()}: repeats {reps} must be {x.type.rank} non-negative counts")
    if all(n == 1 for n in reps):
        return [x]
    return ctx.emit("Tile", [x], {"repeats": reps})


@import_rule("Expand")
def _expand(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs([])
    x = ctx.req(0)
    shape = int_list(ctx, 1, "the shape")
    assert shape is not None
    try:
        out = broadcast_shapes(x.shape, tuple(shape))
    except GlowTypeError as e:
        raise GlowTypeError(f"{ctx.where()}: {e}") from None
    if out == x.shape:
        return [x]
    return ctx.emit("Broadcast", [x], {"shape": out})


# -- blocks, triangles, bits ---------------------------------------------------
@import_rule("DepthToSpace")
def _depth_to_space(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["blocksize", "mode"] if ctx.opset >= 11 else ["blocksize"])
    return ctx.emit("DepthToSpace", [ctx.req(0)], {"blocksize": ctx.attr("blocksize"),
                                                   "mode": ctx.attr("mode", "DCR")})


@import_rule("SpaceToDepth")
def _space_to_depth(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["blocksize"])
    return ctx.emit("SpaceToDepth", [ctx.req(0)], {"blocksize": ctx.attr("blocksize")})


@import_rule("Trilu")
def _trilu(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["upper"])
    x = ctx.req(0)
    if x.type.elem.is_quantized:
        raise ctx.unsupported("Trilu of quantized data")
    k = ctx.const_ints(1, "k")
    if k is not None and len(k) != 1:
        raise GlowTypeError(f"{ctx.where()}: k must be a scalar")
    return ctx.emit("Trilu", [x], {"upper": bool(ctx.attr("upper", 1)), "k": k[0] if k else 0})


@import_rule("BitCast")
def _bitcast(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["to"])
    x = ctx.req(0)
    to = onnx_elem(int(ctx.attr("to")), ctx.where())
    if to == ElemKind.BOOL and x.type.elem != ElemKind.BOOL:
        raise ctx.unsupported(f"BitCast of {x.type.elem.value} to bool (only 0/1 bytes are valid booleans)")
    if x.type.elem.is_quantized or x.type.elem.itemsize != to.itemsize:
        raise GlowTypeError(f"{ctx.where()}: cannot BitCast {x.type.elem.value} to {to.value} (widths differ)")
    if to == x.type.elem:
        return [x]
    return ctx.emit("BitCast", [x], {"to": to})

