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
- antialias with nearest or with tf_crop_and_resize; antialias on an axis
  that keeps its length; linear / cubic of integer data;
- nearest source indices (or the tf_crop_and_resize extrapolation mask) that
  change when the coordinates are computed in float32 instead of float64: the
  position falls on a rounding boundary, and implementations (onnxruntime
  computes in float32, the ONNX reference in float64) pick different pixels;
  likewise output lengths on a rounding boundary;
- scales that keep the whole output shape (onnxruntime then copies the input);
  tf_crop_and_resize crop boxes and tf_half_pixel_for_nn shifts on axes of
  scale 1 (onnxruntime leaves those axes alone);
- align_corners and tf_crop_and_resize where ``input * scale`` is not the
  whole output length: the spec, onnxruntime and PyTorch divide by the output
  length, the ONNX reference (and its test data) by ``input * scale``.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Callable, Sequence

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
    if scales is None or len(scales) != x.type.rank or any(not (0 < s < math.inf) for s in scales):
        raise GlowTypeError(f"{ctx.where()}: needs one positive, finite scale per axis, got {scales}")
    if ctx.op_type == "Upsample" and any(s < 1 for s in scales):
        raise GlowTypeError(f"{ctx.where()}: Upsample scales {scales} must be >= 1")
    if mode == "nearest" and any(s != int(s) for s in scales):
        raise ctx.unsupported(f"nearest {ctx.op_type} with fractional scales {scales} (whole-number upscaling "
                              "only: the legacy rounding is implementation-defined)")
    if mode == "linear" and not x.type.elem.is_float:
        raise ctx.unsupported(f"linear {ctx.op_type} of {x.type.elem.value} data")
    sizes = [_out_len(ctx, d, s, 0.0) for d, s in zip(x.shape, scales)]
    _check_unscaled_axes(ctx, x.shape, sizes, scales, [], "asymmetric", mode, "floor", False)
    attrs = {"mode": mode, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    return [_emit_resize(ctx, x, sizes, scales, attrs)]


def _representable(value: float, dtype: np.dtype) -> bool:
    """Does ``dtype`` hold ``value`` (rounded, for floats) without overflow or, for integers, rounding?"""
    if dtype.kind == "f":
        with np.errstate(over="ignore"):
            return bool(np.isfinite(np.asarray(value).astype(dtype))) or not np.isfinite(value)
    if dtype == np.bool_:
        return value in (0.0, 1.0)
    info = np.iinfo(dtype)
    return value == round(value) and info.min <= value <= info.max


def _out_len(ctx: NodeContext, n_in: int, scale: float, offset: float) -> int:
    """floor(n_in * scale + offset), refused when float32 arithmetic would round to another length."""
    wide = math.floor(n_in * scale + offset)
    narrow = math.floor(float(np.float32(n_in) * np.float32(scale) + np.float32(offset)))
    if wide != narrow:
        raise ctx.unsupported(f"output length {n_in} * {scale:g} lies on a rounding boundary ({wide} or {narrow} "
                              "depending on the float precision)")
    return wide


def _single_pixel_agrees(n_in: int, scale: float, mode: str, nearest: str) -> bool:
    """pytorch_half_pixel to length 1: the spec samples position 0, the ONNX reference -0.5 (when
    input * scale is 1) or (0.5 / scale - 0.5). Do both give the same value?"""
    ref = -0.5 if scale * n_in == 1.0 else 0.5 / scale - 0.5
    if mode == "nearest":
        return int(nearest_indices(np.array([ref]), nearest, n_in)[0]) == 0
    return mode == "linear" and ref <= 0.0


def _check_unscaled_axes(ctx: NodeContext, shape: Sequence[int], sizes: Sequence[int], scales: Sequence[float],
                         roi: Sequence[float], coord: str, mode: str, nearest: str, antialias: bool) -> None:
    """Refuse what the spec resamples but onnxruntime copies: an output shape equal to the input's, with
    antialias an axis that keeps its length, and axes of scale 1 under tf_crop_and_resize (a crop box) or
    tf_half_pixel_for_nn (a half-pixel shift)."""
    r = len(shape)
    if list(sizes) == list(shape) and any(s != 1.0 for s in scales):
        raise ctx.unsupported(f"scales {list(scales)} (or a crop box) that keep the shape {list(shape)}: the spec "
                              "resamples, onnxruntime copies the input")
    for a in range(r):
        if antialias and sizes[a] == shape[a] > 1 and scales[a] != 1.0:
            raise ctx.unsupported(f"antialias with scale {scales[a]:g} on axis {a}, which keeps its length "
                                  f"{shape[a]} (the spec resamples it, onnxruntime copies it)")
        if sizes[a] != shape[a] or scales[a] != 1.0 or shape[a] <= 1:
            continue
        if coord == "tf_crop_and_resize" and (roi[a], roi[a + r]) != (0.0, 1.0):
            raise ctx.unsupported(f"a crop box on axis {a}, which keeps its length (onnxruntime ignores the box "
                                  "there, the spec applies it)")
        if coord == "tf_half_pixel_for_nn" and (mode != "nearest" or nearest not in ("floor", "round_prefer_floor")):
            raise ctx.unsupported(f"tf_half_pixel_for_nn {mode} ({nearest}) with axis {a} unscaled (the half-pixel "
                                  "shift moves it per the spec; onnxruntime keeps it)")


#: relative distance to a rounding boundary below which a source position counts as on it
_BOUNDARY_TOL = 1e-5


def _precision_dependent(choose: Callable[[np.ndarray], np.ndarray], variants: Sequence[np.ndarray],
                         exact_ok: bool = True) -> bool:
    """Does a discrete choice (pixel index, extrapolate or not) depend on how the coordinates are computed?

    ``variants`` are the same coordinates computed in float64 (first), in
    float32, and in float64 from float32 parameters. The choice depends on the
    arithmetic where the variants choose differently, or where a coordinate lies
    within rounding distance of a boundary without being exactly on it in every
    variant (exact values, such as y / 2, are the same in every implementation;
    ``exact_ok=False`` when the formula has inexact intermediate values, so that
    even a coordinate exactly on a boundary is not trusted).
    """
    wide = variants[0]
    others = [v.astype(np.float64) for v in variants[1:]]
    picked = choose(wide)
    if any(not np.array_equal(picked, choose(v)) for v in others):
        return True
    tol = _BOUNDARY_TOL * np.maximum(1.0, np.abs(wide))
    near = choose(wide - tol) != choose(wide + tol)
    on_boundary = (choose(np.nextafter(wide, -np.inf)) != picked) | (choose(np.nextafter(wide, np.inf)) != picked)
    exact = on_boundary & np.logical_and.reduce([wide == v for v in others]) & exact_ok
    return bool(np.any(near & ~exact))


def _check_rounding(ctx: NodeContext, shape: Sequence[int], sizes: Sequence[int], scales: Sequence[float],
                    roi: Sequence[float], coord: str, mode: str, nearest: str) -> None:
    """Refuse positions whose pixel choice depends on the float precision of the coordinate transform."""
    if mode != "nearest" and coord != "tf_crop_and_resize":
        return
    r = len(shape)
    for a in range(r):
        n_in = shape[a]
        box = (roi[a], roi[a + r]) if roi else (0.0, 1.0)
        f32 = np.float32
        variants = [source_coordinates(coord, n_in, sizes[a], scales[a], box, np.float64),
                    source_coordinates(coord, n_in, sizes[a], scales[a], box, np.float32),
                    source_coordinates(coord, n_in, sizes[a], float(f32(scales[a])),
                                       (float(f32(box[0])), float(f32(box[1]))), np.float64)]
        # half_pixel_symmetric shifts by an inexact offset unless the output length is exactly input * scale
        exact_ok = coord != "half_pixel_symmetric" or sizes[a] == scales[a] * n_in
        pick = partial(nearest_indices, nearest_mode=nearest, n_in=n_in)
        if mode == "nearest" and _precision_dependent(pick, variants, exact_ok):
            raise ctx.unsupported(f"nearest resize of axis {a} ({n_in} -> {sizes[a]}, scale {scales[a]:g}, "
                                  f"{coord}, {nearest}): source positions fall on rounding boundaries, where "
                                  "implementations computing in float32 and float64 pick different pixels")
        if coord == "tf_crop_and_resize" and _precision_dependent(partial(outside, n_in=n_in), variants, exact_ok):
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


#: the largest |cubic_coeff_a| a cubic Resize takes
MAX_CUBIC_COEFF = 1e6


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
    _check_modes(ctx, x, mode, coord, nearest, policy, antialias)
    a = float(ctx.attr("cubic_coeff_a", -0.75))
    if mode == "cubic" and not abs(a) <= MAX_CUBIC_COEFF:
        raise ctx.unsupported(f"cubic_coeff_a = {a:g}: glow takes |a| up to {MAX_CUBIC_COEFF:g} (the common "
                              "choices are -0.5 and -0.75; past about 4e37 the float32 weights of the reference "
                              "overflow); the attribute is probably corrupt")
    axes = norm_axes(ctx, ctx.attr("axes", list(range(r))), r)
    full_sizes, full_scales, has_scales = _output_shape(ctx, x, axes, policy)
    # before any check that builds coordinates along the output axes (a corrupt 'sizes' asked for 2.5e16)
    ctx.importer.budget.check_tensor(full_sizes, x.type.elem.itemsize, ctx.where(), "result")
    roi = _crop_box(ctx, x, axes, has_scales) if coord == "tf_crop_and_resize" else []
    _check_output_lengths(ctx, x.shape, axes, full_sizes, full_scales, coord, mode, nearest)
    _check_unscaled_axes(ctx, x.shape, full_sizes, full_scales, roi, coord, mode, nearest, antialias)
    _check_rounding(ctx, x.shape, full_sizes, full_scales, roi, coord, mode, nearest)
    attrs = {
        "roi": roi, "mode": mode, "coordinate_transformation_mode": coord, "nearest_mode": nearest,
        "cubic_coeff_a": a,
        "exclude_outside": bool(ctx.attr("exclude_outside", 0)),
        "extrapolation_value": float(ctx.attr("extrapolation_value", 0.0)), "antialias": antialias,
    }
    return [_emit_resize(ctx, x, full_sizes, full_scales, attrs)]


def _check_modes(ctx: NodeContext, x: Value, mode: str, coord: str, nearest: str, policy: str,
                 antialias: bool) -> None:
    """Refuse attribute values (and combinations of them) the rule does not import at this opset."""
    lo, hi = _COORD_OPSETS.get(coord, (11, 10**6))
    if coord not in COORD_MODES or not lo <= ctx.opset <= hi:
        raise ctx.unsupported(f"coordinate_transformation_mode '{coord}' at opset {ctx.opset}")
    if mode not in ("nearest", "linear", "cubic") or nearest not in NEAREST_MODES or policy not in _POLICIES:
        raise ctx.unsupported(f"mode '{mode}' / nearest_mode '{nearest}' / keep_aspect_ratio_policy '{policy}'")
    if mode != "nearest" and not x.type.elem.is_float:
        raise ctx.unsupported(f"{mode} resize of {x.type.elem.value} data (only nearest for integer data)")
    if antialias and mode == "nearest":
        raise ctx.unsupported("antialias with mode 'nearest'")
    if antialias and coord == "tf_crop_and_resize":
        raise ctx.unsupported("antialias with tf_crop_and_resize (onnxruntime does not extrapolate there)")


def _output_shape(ctx: NodeContext, x: Value, axes: Sequence[int],
                  policy: str) -> tuple[list[int], list[float], bool]:
    """The output length and scale of every axis, from ``sizes`` (with ``keep_aspect_ratio_policy``) or
    ``scales`` (exactly one of them is given), and whether ``scales`` was the one."""
    has_sizes = ctx.has_input(3) and ctx.type(3).size > 0
    has_scales = ctx.has_input(2) and ctx.type(2).size > 0
    if has_sizes == has_scales:
        raise GlowTypeError(f"{ctx.where()}: give exactly one of scales and sizes")
    full_sizes, full_scales = list(x.shape), [1.0] * x.type.rank
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
            sizes = [_out_len(ctx, x.shape[a], scale, 0.5) for a in axes]
        for a, s, q in zip(axes, sizes, ratios):
            full_sizes[a], full_scales[a] = s, q
    else:
        scales = _floats(ctx, 2, "scales") or []
        if len(scales) != len(axes) or any(not s > 0 for s in scales):
            raise GlowTypeError(f"{ctx.where()}: scales {scales} must be positive, one per axis of {axes}")
        for a, sc in zip(axes, scales):
            full_sizes[a], full_scales[a] = _out_len(ctx, x.shape[a], sc, 0.0), sc
    return full_sizes, full_scales, has_scales


def _crop_box(ctx: NodeContext, x: Value, axes: Sequence[int], has_scales: bool) -> list[float]:
    """tf_crop_and_resize: the crop box over every axis (starts, then ends; 0 and 1 on the other axes),
    refused with ``scales`` and a non-trivial box, or with an extrapolation value the data type rounds."""
    r = x.type.rank
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
    if not _representable(ev, x.type.dtype):
        raise ctx.unsupported(f"extrapolation_value {ev:g}, which {x.type.elem.value} cannot hold exactly "
                              "(implementations round or saturate it differently)")
    return roi


def _check_output_lengths(ctx: NodeContext, shape: Sequence[int], axes: Sequence[int], sizes: Sequence[int],
                          scales: Sequence[float], coord: str, mode: str, nearest: str) -> None:
    """Refuse output lengths the implementations map differently: align_corners and tf_crop_and_resize
    where ``input * scale`` is not the output length, pytorch_half_pixel to length 1 (see the module doc)."""
    if coord in ("align_corners", "tf_crop_and_resize"):
        for a in axes:
            if coord == "align_corners" and sizes[a] == 1:
                continue  # source position 0 either way
            if abs(scales[a] * shape[a] - sizes[a]) > 1e-6 * max(sizes[a], 1):
                raise ctx.unsupported(f"{coord} with scale {scales[a]:g} on axis {a}, where input length "
                                      f"{shape[a]} * scale is not the output length {sizes[a]} "
                                      "(implementations disagree; give sizes)")
    if coord == "pytorch_half_pixel":
        for a in range(len(shape)):
            if sizes[a] == 1 and shape[a] > 1 and not _single_pixel_agrees(shape[a], scales[a], mode, nearest):
                raise ctx.unsupported(f"pytorch_half_pixel {mode} resize of axis {a} to length 1 with scale "
                                      f"{scales[a]:g} (implementations disagree on its source position)")
