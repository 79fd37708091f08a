"""Spatial sampling kinds: MaxUnpool, Col2Im, GridSample, RoiAlign, DeformConv.

Layout is channels first; every shape-deciding value (output sizes, block
shapes) is a normalized attribute.
"""

from __future__ import annotations

import math

from glow_core.errors import GlowTypeError
from glow_core.ir.defs.common import Attrs, Types, check_elems, req
from glow_core.ir.defs.nn import check_spatial_attrs, conv_rule, window_out_dim
from glow_core.ir.kinds import AttrType as A
from glow_core.ir.kinds import Category as C
from glow_core.ir.kinds import attr, define_kind
from glow_core.ir.types import FLOAT_KINDS, NUMERIC_KINDS, ElemKind, TensorType

E = ElemKind


def _maxunpool_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x, idx = req(types, 0), req(types, 1)
    check_elems(x, FLOAT_KINDS, "MaxUnpool input")
    if idx.elem != E.INT64 or idx.shape != x.shape:
        raise GlowTypeError(f"indices {idx} must be int64 shaped like the input {x}")
    shape = tuple(attrs["output_shape"])
    if len(shape) != x.rank or shape[:2] != x.shape[:2]:
        raise GlowTypeError(f"output_shape {list(shape)} must keep the input's N and C {list(x.shape[:2])}")
    return [TensorType(x.elem, shape)]


define_kind("MaxUnpool", inputs=("Input", "Indices"), attrs=(attr("output_shape", A.INTS, doc="full result shape"),),
            infer=_maxunpool_rule, categories=(C.POOLING,), elems=FLOAT_KINDS | {E.INT64},
            doc="Zeros, with Input scattered to the flat positions Indices (over the whole result).")


def col2im_blocks(image: tuple[int, ...], block: tuple[int, ...], attrs: Attrs) -> list[int]:
    nd = len(image)
    return [window_out_dim(image[i], block[i], attrs["strides"][i], attrs["dilations"][i], attrs["pads"][i],
                           attrs["pads"][nd + i]) for i in range(nd)]


def _col2im_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    check_elems(x, NUMERIC_KINDS, "Col2Im input")
    image, block = tuple(attrs["image_shape"]), tuple(attrs["block_shape"])
    nd = len(image)
    if nd < 1 or len(block) != nd or any(b < 1 for b in block):
        raise GlowTypeError(f"image_shape {list(image)} and block_shape {list(block)} must be equally long")
    check_spatial_attrs(nd, attrs)
    if x.rank != 3 or x.shape[1] % math.prod(block):
        raise GlowTypeError(f"input {x} must be [N, C * {math.prod(block)}, L]")
    blocks = math.prod(col2im_blocks(image, block, attrs))
    if x.shape[2] != blocks:
        raise GlowTypeError(f"input {x} holds {x.shape[2]} blocks, the image needs {blocks}")
    return [TensorType(x.elem, (x.shape[0], x.shape[1] // math.prod(block), *image))]


define_kind("Col2Im", inputs=("Input",),
            attrs=(attr("image_shape", A.INTS), attr("block_shape", A.INTS), attr("strides", A.INTS),
                   attr("pads", A.INTS), attr("dilations", A.INTS)),
            infer=_col2im_rule, categories=(C.DATA_MOVEMENT,), elems=NUMERIC_KINDS,
            doc="Sums column blocks back into an image (inverse of im2col; overlaps add up).")


GRID_MODES = ("linear", "nearest", "cubic")
GRID_PADDINGS = ("zeros", "border", "reflection")


def _grid_sample_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x, grid = req(types, 0), req(types, 1)
    check_elems(x, FLOAT_KINDS, "GridSample input")
    check_elems(grid, FLOAT_KINDS, "GridSample grid")
    r = x.rank - 2
    if r < 1 or grid.rank != r + 2 or grid.shape[0] != x.shape[0] or grid.shape[-1] != r:
        raise GlowTypeError(f"grid {grid} must be [N, out..., {r}] for input {x}")
    if attrs["mode"] not in GRID_MODES or attrs["padding_mode"] not in GRID_PADDINGS:
        raise GlowTypeError(f"mode {attrs['mode']!r} / padding_mode {attrs['padding_mode']!r}")
    return [TensorType(x.elem, (x.shape[0], x.shape[1], *grid.shape[1:-1]))]


define_kind("GridSample", inputs=("Input", "Grid"),
            attrs=(attr("mode", A.STRING, "linear"), attr("padding_mode", A.STRING, "zeros"),
                   attr("align_corners", A.BOOL, False)),
            infer=_grid_sample_rule, elems=FLOAT_KINDS,
            doc="Samples Input at normalized Grid positions (last grid component = last spatial axis) with "
                "N-linear, nearest (ties to even) or N-cubic (A = -0.75) interpolation.")


def _roi_align_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x, rois, idx = req(types, 0), req(types, 1), req(types, 2)
    check_elems(x, FLOAT_KINDS, "RoiAlign input")
    if x.rank != 4 or rois.rank != 2 or rois.shape[1] != 4 or rois.elem != x.elem:
        raise GlowTypeError(f"input {x} must be [N,C,H,W] and rois {rois} [R, 4] of the same element kind")
    if idx.elem != E.INT64 or idx.shape != (rois.shape[0],):
        raise GlowTypeError(f"batch indices {idx} must be int64[{rois.shape[0]}]")
    if attrs["output_height"] < 1 or attrs["output_width"] < 1 or attrs["sampling_ratio"] < 0:
        raise GlowTypeError("output sizes must be >= 1 and sampling_ratio >= 0")
    if attrs["mode"] not in ("avg", "max"):
        raise GlowTypeError(f"mode {attrs['mode']!r}")
    return [TensorType(x.elem, (rois.shape[0], x.shape[1], attrs["output_height"], attrs["output_width"]))]


define_kind("RoiAlign", inputs=("Input", "Rois", "BatchIndices"),
            attrs=(attr("mode", A.STRING, "avg"), attr("output_height", A.INT, 1), attr("output_width", A.INT, 1),
                   attr("sampling_ratio", A.INT, 0), attr("spatial_scale", A.FLOAT, 1.0),
                   attr("half_pixel", A.BOOL, True, doc="shift input coordinates by -0.5")),
            infer=_roi_align_rule, categories=(C.POOLING,), elems=FLOAT_KINDS | {E.INT64},
            doc="Mask R-CNN RoI Align: bilinear samples per bin, averaged (or max of the weighted taps, "
                "as onnxruntime).")


def _deform_conv_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x, w, off = req(types, 0), req(types, 1), req(types, 2)
    b = types[3] if len(types) > 3 else None
    mask = types[4] if len(types) > 4 else None
    (y,) = conv_rule([x, w, b], attrs)
    nd = x.rank - 2
    og = attrs["offset_group"]
    kp = math.prod(w.shape[2:])
    if og < 1 or x.shape[1] % og:
        raise GlowTypeError(f"offset_group {og} must divide the {x.shape[1]} input channels")
    want = (x.shape[0], og * kp * nd, *y.shape[2:])
    if off.shape != want or off.elem != x.elem:
        raise GlowTypeError(f"offset {off} must be {x.elem.value}{list(want)}")
    if mask is not None and (mask.shape != (x.shape[0], og * kp, *y.shape[2:]) or mask.elem != x.elem):
        raise GlowTypeError(f"mask {mask} must be [{x.shape[0]}, {og * kp}, {', '.join(map(str, y.shape[2:]))}]")
    return [y]


define_kind("DeformConv", inputs=("Input", "Filter", "Offset", "Bias?", "Mask?"),
            attrs=(attr("strides", A.INTS), attr("pads", A.INTS), attr("dilations", A.INTS),
                   attr("group", A.INT, 1), attr("offset_group", A.INT, 1)),
            infer=_deform_conv_rule, categories=(C.CONVOLUTION,), elems=FLOAT_KINDS,
            doc="Conv whose taps are sampled (N-linearly, zero outside the input) at offset positions, "
                "scaled by Mask.")
