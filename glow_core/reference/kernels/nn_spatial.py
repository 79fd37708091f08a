"""Spatial sampling kernels: MaxUnpool, Col2Im, GridSample, RoiAlign, DeformConv.

Gathers are vectorized: positions become flat indices into ``[N, C, prod(spatial)]``
views and ``take_along_axis`` fetches every tap of every output at once.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from glow_core import budget
from glow_core.ir.types import TensorType
from glow_core.reference.kernels import KERNELS
from glow_core.reference.kernels.nn import compute_dtype, offsets

Attrs = Mapping[str, Any]
Types = Sequence[TensorType]


@KERNELS.register("MaxUnpool")
def _maxunpool(attrs: Attrs, out: Types, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    y = np.zeros(out[0].size, dtype=out[0].dtype)
    flat = idx.reshape(-1)
    if flat.size and (flat.min() < 0 or flat.max() >= y.size):
        raise ValueError(f"indices must lie in [0, {y.size}), got [{flat.min()}, {flat.max()}]")
    y[flat] = x.reshape(-1)
    return y.reshape(out[0].shape)


@KERNELS.register("Col2Im")
def _col2im(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    image, block = tuple(attrs["image_shape"]), tuple(attrs["block_shape"])
    nd = len(image)
    strides, dil, pads = attrs["strides"], attrs["dilations"], attrs["pads"]
    n, c = out[0].shape[:2]
    blocks = [(image[i] + pads[i] + pads[nd + i] - ((block[i] - 1) * dil[i] + 1)) // strides[i] + 1
              for i in range(nd)]
    cols = x.reshape((n, c) + block + tuple(blocks))
    padded = [image[i] + pads[i] + pads[nd + i] for i in range(nd)]
    img = np.zeros((n, c) + tuple(padded), dtype=x.dtype)
    lead = (slice(None),) * 2
    for k in offsets(block):
        dst = tuple(slice(k[i] * dil[i], k[i] * dil[i] + strides[i] * (blocks[i] - 1) + 1, strides[i])
                    for i in range(nd))
        img[lead + dst] += cols[lead + k]
    crop = tuple(slice(pads[i], pads[i] + image[i]) for i in range(nd))
    return np.ascontiguousarray(img[lead + crop])


# -- GridSample ----------------------------------------------------------------------------------------

def _reflect(v: np.ndarray, x_min: float, x_max: float) -> np.ndarray:
    """Reflect coordinates outside [x_min, x_max] by the near border as onnx.reference does (in float64,
    ``n = trunc(d / span)``, ``r = d - n * span``); coordinates inside stay as they are."""
    if x_min == x_max:
        return np.zeros_like(v)
    w = v.astype(np.float64)
    span = x_max - x_min
    below, above = w < x_min, w > x_max
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.where(below, x_min - w, w - x_max)
        n = np.floor(d / span)  # d > 0 where it is used: floor is trunc
        r = d - n * span
        even = np.fmod(n, 2) == 0
    from_lo, from_hi = x_min + r, x_max - r
    out = np.where(below, np.where(even, from_lo, from_hi), np.where(above, np.where(even, from_hi, from_lo), w))
    return out.astype(v.dtype)


def _pad_coord(v: np.ndarray, size: int, padding: str, align: bool) -> np.ndarray:
    """Map a source coordinate into the image for border / reflection padding."""
    if padding == "border":
        return np.clip(v, 0, size - 1)
    if padding == "reflection":
        v = _reflect(v, 0, size - 1) if align else _reflect(v, -0.5, size - 0.5)
        return np.clip(v, 0, size - 1)
    return v


def _map_outside(v: np.ndarray, size: int, padding: str, align: bool) -> np.ndarray:
    """What onnx.reference does to a coordinate outside the sampling borders before any mode takes its taps:
    border clamps it into the image, reflection reflects it; a coordinate inside stays as it is."""
    lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    if padding == "reflection":
        return _reflect(v, lo, hi)
    if padding == "border":
        return np.where((v < lo) | (v > hi), np.clip(v, 0, size - 1), v)
    return v


def _cubic_weights(t: np.ndarray) -> list[np.ndarray]:
    a = -0.75

    def near(s: np.ndarray) -> np.ndarray:  # |s| <= 1
        return ((a + 2) * s - (a + 3)) * s * s + 1

    def far(s: np.ndarray) -> np.ndarray:  # 1 < |s| < 2
        return ((a * s - 5 * a) * s + 8 * a) * s - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


@KERNELS.register("GridSample")
def _grid_sample(attrs: Attrs, out: Types, x: np.ndarray, grid: np.ndarray) -> np.ndarray:
    ct = np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)
    n, c = x.shape[:2]
    sizes = x.shape[2:]
    r = len(sizes)
    mode, padding, align = attrs["mode"], attrs["padding_mode"], attrs["align_corners"]
    xf = x.astype(ct).reshape(n, c, -1)
    g = grid.astype(ct).reshape(n, -1, r)
    strides = [math.prod(sizes[i + 1:]) for i in range(r)]
    coords: list[np.ndarray] = []
    for i, size in enumerate(sizes):
        v: np.ndarray = g[..., r - 1 - i]  # grid lists the innermost axis first
        coords.append((v + 1) / 2 * (size - 1) if align else ((v + 1) * size - 1) / 2)
    per_axis: list[list[tuple[np.ndarray, np.ndarray]]] = []  # per axis: (index, weight) taps
    for i, size in enumerate(sizes):
        v = coords[i]
        if mode == "cubic":
            v = _map_outside(v, size, padding, align)
            base = np.floor(v)
            taps = [(base + j - 1, w) for j, w in enumerate(_cubic_weights(v - base))]
            if padding != "zeros":
                taps = [(_pad_coord(t, size, padding, align), w) for t, w in taps]
        elif mode == "nearest" and padding == "reflection":  # the reference rounds, reflects, then truncates
            taps = [(np.floor(_pad_coord(np.rint(v), size, padding, align)), np.ones_like(v))]
        else:
            v = _pad_coord(v, size, padding, align)
            if mode == "nearest":
                taps = [(np.rint(v), np.ones_like(v))]
            else:
                base = np.floor(v)
                frac = v - base
                taps = [(base, 1 - frac), (base + 1, frac)]
        per_axis.append(taps)
    def pixel(combo: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        flat = np.zeros(g.shape[:2], dtype=np.int64)
        within = np.ones(g.shape[:2], dtype=bool)
        for i, (idx, _) in enumerate(combo):
            inside = (idx >= 0) & (idx <= sizes[i] - 1)
            flat += np.clip(idx, 0, sizes[i] - 1).astype(np.int64) * strides[i]
            within &= inside
        # outside: the padding's 0, never 0 * inf
        return np.where(within[:, None, :], np.take_along_axis(xf, flat[:, None, :], axis=2), ct.type(0))

    def level(axis: int, chosen: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        """sum_j w_j * value(tap j), the inner axes first (each row along x, then the rows along y: the
        reference's order, so sums near the float range overflow alike)."""
        acc = np.zeros((n, c, g.shape[1]), dtype=ct)
        for idx, w in per_axis[axis]:
            inner = pixel(chosen + [(idx, w)]) if axis == r - 1 else level(axis + 1, chosen + [(idx, w)])
            acc = acc + w.astype(ct)[:, None, :] * inner
        return acc

    return level(0, []).reshape(out[0].shape).astype(out[0].dtype)


# -- RoiAlign ---------------------------------------------------------------------------------------------

def _bilinear_taps(pos: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                        np.ndarray]:
    """onnxruntime's RoiAlign interpolation along one axis: low/high index, weights, validity."""
    valid = (pos >= -1.0) & (pos <= size)
    p = np.maximum(pos, 0)
    low = np.floor(p).astype(np.int64)
    at_end = low >= size - 1
    low = np.where(at_end, size - 1, low)
    high = np.where(at_end, size - 1, low + 1)
    p = np.where(at_end, low, p)
    frac = p - low
    return low, high, 1 - frac, frac, valid


#: arrays of one RoI's sample grid the kernel holds at once (four taps, their weights, the validity, a sum)
ROI_GRID_ARRAYS = 7


def _check_grid(c: int, oh: int, gh: int, ow: int, gw: int, itemsize: int, r: int, sr: int) -> None:
    """One RoI's sample grid ([C, oh, gh, ow, gw] per array) within the memory budget, before it is made
    (sampling_ratio 2000 asked for gigabytes)."""
    limits = budget.current()
    what = f"the sample grid of RoI {r} ({gh} x {gw} samples per bin, sampling_ratio {sr})"
    one = limits.check_tensor((c, oh, gh, ow, gw), itemsize, "RoiAlign", what)
    limits.check_total(ROI_GRID_ARRAYS * one, "RoiAlign", what)


@KERNELS.register("RoiAlign")
def _roi_align(attrs: Attrs, out: Types, x: np.ndarray, rois: np.ndarray, batch: np.ndarray) -> np.ndarray:
    ct = np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)
    _, c, h, w = x.shape
    oh, ow = attrs["output_height"], attrs["output_width"]
    scale = ct.type(attrs["spatial_scale"])
    shift = ct.type(0.5 if attrs["half_pixel"] else 0.0)
    res = np.zeros((rois.shape[0], c, oh, ow), dtype=ct)
    xs = x.astype(ct)
    if batch.size and (batch.min() < 0 or batch.max() >= x.shape[0]):
        raise ValueError(f"batch indices must lie in [0, {x.shape[0]})")
    for r in range(rois.shape[0]):
        x1, y1, x2, y2 = (rois[r].astype(ct) * scale) - shift
        roi_w, roi_h = x2 - x1, y2 - y1
        if not attrs["half_pixel"]:
            roi_w, roi_h = max(roi_w, ct.type(1)), max(roi_h, ct.type(1))
        bin_h, bin_w = roi_h / ct.type(oh), roi_w / ct.type(ow)
        sr = attrs["sampling_ratio"]
        gh = sr if sr > 0 else math.ceil(roi_h / oh)
        gw = sr if sr > 0 else math.ceil(roi_w / ow)
        _check_grid(c, oh, gh, ow, gw, ct.itemsize, r, sr)
        ys = y1 + np.arange(oh, dtype=ct)[:, None] * bin_h + (np.arange(gh, dtype=ct)[None, :] + ct.type(0.5)) * \
            bin_h / ct.type(gh)  # oh, gh
        xs_ = x1 + np.arange(ow, dtype=ct)[:, None] * bin_w + (np.arange(gw, dtype=ct)[None, :] + ct.type(0.5)) * \
            bin_w / ct.type(gw)  # ow, gw
        yl, yh, wyl, wyh, vy = _bilinear_taps(ys, h)
        xl, xh, wxl, wxh, vx = _bilinear_taps(xs_, w)
        img = xs[int(batch[r])]  # C, H, W
        # taps: [C, oh, gh, ow, gw]
        valid = (vy[:, :, None, None] & vx[None, None, :, :]).astype(ct)
        terms = []
        for yi, wy in ((yl, wyl), (yh, wyh)):
            for xi, wx in ((xl, wxl), (xh, wxh)):
                v = img[:, yi[:, :, None, None], xi[None, None, :, :]]
                terms.append(v * (wy[:, :, None, None] * wx[None, None, :, :] * valid))
        if attrs["mode"] == "avg":
            total = terms[0] + terms[1] + terms[2] + terms[3]
            res[r] = total.sum(axis=(2, 4)) / ct.type(max(gh * gw, 1))
        else:
            best = np.maximum(np.maximum(terms[0], terms[1]), np.maximum(terms[2], terms[3]))
            res[r] = best.max(axis=(2, 4)) if gh * gw else 0
    return res.astype(out[0].dtype)


# -- DeformConv -------------------------------------------------------------------------------------------

@KERNELS.register("DeformConv")
def _deform_conv(attrs: Attrs, out: Types, x: np.ndarray, w: np.ndarray, offset: np.ndarray,
                 bias: np.ndarray | None, mask: np.ndarray | None) -> np.ndarray:
    ct = compute_dtype(x.dtype)
    n, c = x.shape[:2]
    sizes = x.shape[2:]
    nd = len(sizes)
    kernel = w.shape[2:]
    kp = math.prod(kernel)
    o_shape = out[0].shape[2:]
    op = math.prod(o_shape)
    og = attrs["offset_group"]
    cg_off = c // og
    strides, pads, dil = attrs["strides"], attrs["pads"], attrs["dilations"]
    off = offset.astype(ct).reshape(n, og, kp, nd, op)
    # base positions: o * s - pad + k * d, per axis -> [kp, op]
    k_idx = np.indices(kernel).reshape(nd, kp)
    o_idx = np.indices(o_shape).reshape(nd, op)
    xf = x.astype(ct).reshape(n, og, cg_off, -1)
    strides_flat = [math.prod(sizes[i + 1:]) for i in range(nd)]
    taps_per_axis = []
    for i in range(nd):
        pos = (o_idx[i][None, :] * strides[i] - pads[i] + k_idx[i][:, None] * dil[i]) + off[:, :, :, i, :]
        base = np.floor(pos)
        frac = pos - base
        taps_per_axis.append([(base, 1 - frac), (base + 1, frac)])
    cols = np.zeros((n, og, cg_off, kp * op), dtype=ct)
    for combo in itertools.product(*taps_per_axis):
        flat = np.zeros((n, og, kp, op), dtype=np.int64)
        weight = np.ones((n, og, kp, op), dtype=ct)
        for i, (idx, wt) in enumerate(combo):
            inside = (idx >= 0) & (idx <= sizes[i] - 1)
            flat += np.clip(idx, 0, sizes[i] - 1).astype(np.int64) * strides_flat[i]
            weight = weight * np.where(inside, wt, 0)
        if mask is not None:
            weight = weight * mask.astype(ct).reshape(n, og, kp, op)
        gathered = np.take_along_axis(xf, flat.reshape(n, og, 1, kp * op), axis=3)
        cols += gathered * weight.reshape(n, og, 1, kp * op)
    g = attrs["group"]
    m = w.shape[0]
    cols = cols.reshape(n, g, (c // g) * kp, op)
    res = np.matmul(w.astype(ct).reshape(1, g, m // g, (c // g) * kp), cols)  # N, G, Mg, O
    res = res.reshape((n, m) + tuple(o_shape))
    if bias is not None:
        res = res + bias.astype(ct).reshape((1, m) + (1,) * nd)
    return res.astype(out[0].dtype)

