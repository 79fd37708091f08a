"""Import rules for ONNX spatial sampling ops: MaxUnpool, Col2Im, GridSample, RoiAlign, DeformConv."""

from __future__ import annotations

from typing import Any

import numpy as np

from glow_core.errors import ModelError
from glow_core.importer.context import NodeContext, import_rule
from glow_core.importer.rules.movement import pad
from glow_core.importer.rules.nn import _check_kernel_shape, _float_operands, _group, _ints, spatial_window
from glow_core.ir.defs.nn_spatial import GRID_MODES, GRID_PADDINGS
from glow_core.ir.graph import Value
from glow_core.ir.types import ElemKind

E = ElemKind


@import_rule("MaxUnpool")
def _maxunpool(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["kernel_shape", "pads", "strides"])
    x, idx = ctx.req(0), ctx.req(1)
    _float_operands(ctx, x.type)
    nd = x.type.rank - 2
    kernel = tuple(int(k) for k in ctx.attr("kernel_shape", []))
    if nd < 1 or len(kernel) != nd:
        raise ctx.unsupported(f"kernel_shape {list(kernel)} for input {x.type}")
    strides = _ints(ctx, "strides", nd, 1)
    pads = _ints(ctx, "pads", 2 * nd, 0)
    spatial = [(x.type.shape[2 + i] - 1) * strides[i] + kernel[i] - pads[i] - pads[nd + i] for i in range(nd)]
    shape = (*x.type.shape[:2], *spatial)
    given = ctx.const_ints(2, "output_shape") if ctx.has_input(2) else None
    y = ctx.emit1("MaxUnpool", [x, idx], {"output_shape": shape})
    if given is None or tuple(given) == shape:
        return [y]
    # onnx.reference (which decides where runtimes differ): the indices address the inferred shape, whose
    # result lands in the leading corner of output_shape, zeros elsewhere
    if len(given) != len(shape) or tuple(given[:2]) != shape[:2] or any(g < s for g, s in zip(given, shape)):
        raise ModelError(f"{ctx.where()}: output_shape {list(given)} must keep N and C and be at least the "
                         f"inferred shape {list(shape)} in every dimension")
    ctx.importer.budget.check_tensor(given, x.type.elem.itemsize, ctx.where(), "result")
    ends = [g - s for g, s in zip(given, shape)]
    return [pad(ctx, y, [0] * len(shape), ends, "constant", np.zeros((), x.type.dtype))]


@import_rule("Col2Im")
def _col2im(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["dilations", "pads", "strides"])
    x = ctx.req(0)
    image = ctx.const_ints(1, "image_shape")
    block = ctx.const_ints(2, "block_shape")
    assert image is not None and block is not None
    nd = len(image)
    if len(block) != nd:
        raise ctx.unsupported(f"image_shape {list(image)} and block_shape {list(block)} differ in length")
    attrs = {"image_shape": image, "block_shape": block, "strides": _ints(ctx, "strides", nd, 1),
             "pads": _ints(ctx, "pads", 2 * nd, 0), "dilations": _ints(ctx, "dilations", nd, 1)}
    return ctx.emit("Col2Im", [x], attrs)


_GRID_MODE_ALIASES = {"bilinear": "linear", "bicubic": "cubic"}


@import_rule("GridSample")
def _grid_sample(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["align_corners", "mode", "padding_mode"])
    x, grid = ctx.req(0), ctx.req(1)
    _float_operands(ctx, x.type, grid.type)
    mode = str(ctx.attr("mode", "linear" if ctx.opset >= 20 else "bilinear"))
    mode = _GRID_MODE_ALIASES.get(mode, mode)
    padding = str(ctx.attr("padding_mode", "zeros"))
    if mode not in GRID_MODES or padding not in GRID_PADDINGS:
        raise ctx.unsupported(f"mode {mode!r} / padding_mode {padding!r}")
    if ctx.opset < 20 and x.type.rank != 4:
        raise ctx.unsupported(f"input {x.type}: GridSample before opset 20 is 2-D only")
    return ctx.emit("GridSample", [x, grid], {"mode": mode, "padding_mode": padding,
                                               "align_corners": bool(ctx.attr("align_corners", 0))})


@import_rule("RoiAlign")
def _roi_align(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["coordinate_transformation_mode", "mode", "output_height", "output_width", "sampling_ratio",
                     "spatial_scale"])
    x = ctx.req(0)
    _float_operands(ctx, x.type)
    # opset 16 introduced the attribute with default half_pixel; opset 10 behaves as output_half_pixel
    ctm = str(ctx.attr("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else "output_half_pixel"))
    if ctm not in ("half_pixel", "output_half_pixel"):
        raise ctx.unsupported(f"coordinate_transformation_mode {ctm!r}")
    mode = str(ctx.attr("mode", "avg"))
    if mode not in ("avg", "max"):
        raise ctx.unsupported(f"mode {mode!r}")
    attrs: dict[str, Any] = {"mode": mode, "output_height": int(ctx.attr("output_height", 1)),
             "output_width": int(ctx.attr("output_width", 1)), "sampling_ratio": int(ctx.attr("sampling_ratio", 0)),
             "spatial_scale": float(ctx.attr("spatial_scale", 1.0)), "half_pixel": ctm == "half_pixel"}
    if attrs["sampling_ratio"] < 0 or attrs["output_height"] < 1 or attrs["output_width"] < 1:
        raise ctx.unsupported("negative sampling_ratio or empty output")
    return ctx.emit("RoiAlign", [x, ctx.req(1), ctx.req(2)], attrs)


@import_rule("DeformConv")
def _deform_conv(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["dilations", "group", "kernel_shape", "offset_group", "pads", "strides"])
    x, w = ctx.req(0), ctx.req(1)
    _float_operands(ctx, x.type)
    win = spatial_window(ctx, x.type, _check_kernel_shape(ctx, w.type))
    og = int(ctx.attr("offset_group", 1))
    if og < 1:
        raise ctx.unsupported(f"offset_group {og}")
    attrs = {"strides": win.strides, "pads": win.pads, "dilations": win.dilations, "group": _group(ctx),
             "offset_group": og}
    return ctx.emit("DeformConv", [x, w, ctx.req(2), ctx.input(3), ctx.input(4)], attrs)
