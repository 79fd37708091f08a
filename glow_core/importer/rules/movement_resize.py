"""Import rules for Resize (opsets 10..19+) and the older Upsample.

The rule resolves the output shape, the per-axis scales of the coordinate
transform and the crop box from the compile-time ``roi`` / ``scales`` /
``sizes`` operands and ``axes`` / ``keep_aspect_ratio_policy``, and emits one
Resize node. Where implementations of the ONNX spec disagree the rule
refuses the configuration:

- Upsample and Resize-10 (no coordinate_transformation_mode): nearest is
  supported for whole-number upscaling only, linear for any scale;
- pytorch_half_pixel on an axis resized to length 1: only when that length is
  exactly input * scale, and not for cubic;
- tf_crop_and_resize with ``scales`` and a non-trivial crop box (the output
  length rule differs);
- antialias with nearest; linear / cubic of integer data;
- nearest source indices (or the tf_crop_and_resize extrapolation mask) that
  change when the coordinates are computed in float32 instead of float64: the
  position falls on a rounding boundary, and implementations (onnxruntime
  computes in float32, the ONNX reference in float64) pick different pixels.

Like the ONNX reference (and its test data), align_corners and
tf_crop_and_resize divide by the fractional output length ``input * scale``.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from glow_core.errors import GlowTypeError
from glow_core.importer.context import NodeContext, import_rule
from glow_core.importer.rules.movement import norm_axes
from glow_core.ir.defs.movement_resize import COORD_MODES, NEAREST_MODES, nearest_indices, outside, source_coordinates
from glow_core.ir.graph import Value

#: coordinate_transformation_mode values and the opsets that define them
_COORD_OPSETS = {"tf_half_pixel_for_nn": (11, 12), "half_pixel_symmetric": (19, 10**6)}
_POLICIES = ("stretch", "not_larger", "not_smaller")


def _floats(ctx: NodeContext, i: int, what: str) -> list[float] | None:
    arr = ctx.const(i, what)
    return None if arr is None else [float(v) for v in np.asarray(arr, np.float64).reshape(-1)]


def _emit_resize(ctx: NodeContext, x: Value, sizes: Sequence[int], scales: Sequence[float], attrs: dict) -> Value:
    if list(sizes) == list(x.shape) and all(s == 1.0 for s in scales) and not attrs.get("roi") and \
            attrs["coordinate_transformation_mode"] != "tf_half_pixel_for_nn":
        return x
    if any(d == 0 for d, s in zip(x.shape, sizes) if s > 0):
        raise ctx.unsupported(f"resizing the empty input {x.type} to {list(sizes)}")
    return ctx.emit1("Resize", [x], dict(attrs, sizes=list(sizes), scales=list(scales)))


def _legacy(ctx: NodeContext, x: Value, scales: list[float] | None) -> list[Value]:
    """Upsample and Resize-10: asymmetric coordinates, output = floor(input * scale)."""
    mode = str(ctx.attr("mode", "nearest"))
    if mode not in ("nearest", "linear"):
        raise ctx.unsupported(f"mode '{mode}'")
    if scales is None or len(scales) != x.type.rank or any(s <= 0 for s in scales):
        raise GlowTypeError(f"{ctx.where()}: needs one positive scale per axis, got {scales}")
    if ctx.op_type == "Upsample" and any(s < 1 for s in scales):
        raise GlowTypeError(f"{ctx.where()}: Upsample scales {scales} must be >= 1")
    if mode == "nearest" and any(s != int(s) for s in scales):
        raise ctx.unsupported(f"nearest {ctx.op_type} with fractional scales {scales} (whole-number upscaling "
                              "only: the legacy rounding is implementation-defined)")
    if mode == "linear" and not x.type.elem.is_float:
        raise ctx.unsupported(f"linear {ctx.op_type} of {x.type.elem.value} data")
    sizes = [int(math.floor(d * s)) for d, s in zip(x.shape, scales)]
    attrs = {"mode": mode, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    return [_emit_resize(ctx, x, sizes, scales, attrs)]


def _check_rounding(ctx: NodeContext, shape: Sequence[int], sizes: Sequence[int], scales: Sequence[float],
                    roi: Sequence[float], coord: str, mode: str, nearest: str) -> None:
    """Refuse positions whose pixel choice depends on the float precision of the coordinate transform."""
    if mode != "nearest" and coord != "tf_crop_and_resize":
        return
    r = len(shape)
    for a in range(r):
        box = (roi[a], roi[a + r]) if roi else (0.0, 1.0)
        wide, narrow = (source_coordinates(coord, shape[a], sizes[a], scales[a], box, dt)
                        for dt in (np.float64, np.float32))
        if mode == "nearest" and not np.array_equal(nearest_indices(wide, nearest, shape[a]),
                                                    nearest_indices(narrow, nearest, shape[a])):
            raise ctx.unsupported(f"nearest resize of axis {a} ({shape[a]} -> {sizes[a]}, scale {scales[a]:g}, "
                                  f"{coord}, {nearest}): source positions fall on rounding boundaries, where "
                                  "float32 and float64 implementations pick different pixels")
        if coord == "tf_crop_and_resize" and not np.array_equal(outside(wide, shape[a]), outside(narrow, shape[a])):
            raise ctx.unsupported(f"tf_crop_and_resize of axis {a}: source positions fall on the input's edge, "
                                  "where float32 and float64 implementations disagree about extrapolating")


@import_rule("Upsample")
def _upsample(ctx: NodeContext) -> list[Value]:
    x = ctx.req(0)
    if ctx.opset < 9:
        ctx.check_attrs(["mode", "scales"])
        scales = ctx.attr("scales")
        return _legacy(ctx, x, None if scales is None else [float(s) for s in scales])
    ctx.check_attrs(["mode"])
    return _legacy(ctx, x, _floats(ctx, 1, "scales"))


@import_rule("Resize")
def _resize(ctx: NodeContext) -> list[Value]:
    x = ctx.req(0)
    if ctx.opset < 11:
        ctx.check_attrs(["mode"])
        return _legacy(ctx, x, _floats(ctx, 1, "scales"))
    known = ["mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
             "extrapolation_value"]
    ctx.check_attrs(known + (["antialias", "axes", "keep_aspect_ratio_policy"] if ctx.opset >= 18 else []))
    r = x.type.rank
    mode = str(ctx.attr("mode", "nearest"))
    coord = str(ctx.attr("coordinate_transformation_mode", "half_pixel"))
    nearest = str(ctx.attr("nearest_mode", "round_prefer_floor"))
    policy = str(ctx.attr("keep_aspect_ratio_policy", "stretch"))
    antialias = bool(ctx.attr("antialias", 0))
    lo, hi = _COORD_OPSETS.get(coord, (11, 10**6))
    if coord not in COORD_MODES or not lo <= ctx.opset <= hi:
        raise ctx.unsupported(f"coordinate_transformation_mode '{coord}' at opset {ctx.opset}")
    if mode not in ("nearest", "linear", "cubic") or nearest not in NEAREST_MODES or policy not in _POLICIES:
        raise ctx.unsupported(f"mode '{mode}' / nearest_mode '{nearest}' / keep_aspect_ratio_policy '{policy}'")
    if mode != "nearest" and not x.type.elem.is_float:
        raise ctx.unsupported(f"{mode} resize of {x.type.elem.value} data (only nearest for integer data)")
    if antialias and mode == "nearest":
        raise ctx.unsupported("antialias with mode 'nearest'")
    axes = norm_axes(ctx, ctx.attr("axes", list(range(r))), r)

    has_sizes = ctx.has_input(3) and ctx.type(3).size > 0
    has_scales = ctx.has_input(2) and ctx.type(2).size > 0
    if has_sizes == has_scales:
        raise GlowTypeError(f"{ctx.where()}: give exactly one of scales and sizes")
    full_sizes, full_scales = list(x.shape), [1.0] * r
    if has_sizes:
        sizes = [int(v) for v in ctx.const_ints(3, "sizes") or ()]
        if len(sizes) != len(axes) or any(s < 0 for s in sizes):
            raise GlowTypeError(f"{ctx.where()}: sizes {sizes} do not match axes {axes}")
        if any(x.shape[a] == 0 for a in axes):
            raise ctx.unsupported(f"resizing the empty input {x.type}")
        ratios = [s / x.shape[a] for s, a in zip(sizes, axes)]
        if policy != "stretch":
            scale = min(ratios) if policy == "not_larger" else max(ratios)
            ratios = [scale] * len(axes)
            sizes = [int(scale * x.shape[a] + 0.5) for a in axes]
        for a, s, q in zip(axes, sizes, ratios):
            full_sizes[a], full_scales[a] = s, q
    else:
        scales = _floats(ctx, 2, "scales") or []
        if len(scales) != len(axes) or any(not s > 0 for s in scales):
            raise GlowTypeError(f"{ctx.where()}: scales {scales} must be positive, one per axis of {axes}")
        for a, s in zip(axes, scales):
            full_sizes[a], full_scales[a] = int(math.floor(x.shape[a] * s)), s

    roi: list[float] = []
    if coord == "tf_crop_and_resize":
        box = _floats(ctx, 1, "roi")
        if box is None or len(box) != 2 * len(axes):
            raise GlowTypeError(f"{ctx.where()}: tf_crop_and_resize needs a roi of {2 * len(axes)} values")
        roi = [0.0] * r + [1.0] * r
        for i, a in enumerate(axes):
            roi[a], roi[a + r] = box[i], box[i + len(axes)]
        if has_scales and any((roi[a], roi[a + r]) != (0.0, 1.0) for a in axes):
            raise ctx.unsupported("tf_crop_and_resize with scales and a crop box (the output length rule differs "
                                  "between implementations; give sizes)")
        ev = float(ctx.attr("extrapolation_value", 0.0))
        if not x.type.elem.is_float and ev != round(ev):
            raise ctx.unsupported(f"a fractional extrapolation_value {ev} for {x.type.elem.value} data")
    if coord == "pytorch_half_pixel":
        for a in range(r):
            resized = full_sizes[a] != x.shape[a] or full_scales[a] != 1.0
            if resized and full_sizes[a] == 1 and (mode == "cubic" or full_scales[a] * x.shape[a] != 1.0):
                raise ctx.unsupported(f"pytorch_half_pixel {mode} resize of axis {a} to length 1 "
                                      "(implementations disagree on its source position)")
    _check_rounding(ctx, x.shape, full_sizes, full_scales, roi, coord, mode, nearest)
    attrs = {
        "roi": roi, "mode": mode, "coordinate_transformation_mode": coord, "nearest_mode": nearest,
        "cubic_coeff_a": float(ctx.attr("cubic_coeff_a", -0.75)),
        "exclude_outside": bool(ctx.attr("exclude_outside", 0)),
        "extrapolation_value": float(ctx.attr("extrapolation_value", 0.0)), "antialias": antialias,
    }
    return [_emit_resize(ctx, x, full_sizes, full_scales, attrs)]
