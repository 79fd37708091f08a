"""Lowerings of the spatial sampling kinds onto primitives (``glow_core.ir.defs.nn_spatial``).

In: MaxUnpool, Col2Im, GridSample, RoiAlign, DeformConv. Out: ScatterND (plain
and scatter-add), Gather, MatMul, element-wise arithmetic (Floor, Mod, Where,
comparisons), Cast, ReduceSum / ReduceMax and data movement.

Data-dependent positions are computed with primitives as the kernels
(``kernels/nn_spatial.py``) compute them, in the same working kind, then
turned into int64 row indices of a ``[rows, channels]`` view of the input so
that one Gather fetches every tap of every output at once. Scatters use
compile-time index tables.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from glow_core.ir.graph import Constant, Node, Value
from glow_core.ir.types import ElemKind
from glow_core.lowering.builder import Builder
from glow_core.lowering.rules.nn import gather_rows, last, matmul, per_channel, slice_nd, zeros
from glow_core.lowering.rules.reduce import compute_elem
from glow_core.lowering.table import lowering

E = ElemKind
F32, F64 = E.FLOAT32, E.FLOAT64
Tap = tuple[Value, Value]  # (position as a float tensor, weight)


def _c(b: Builder, value: float, like: Value) -> Value:
    return b.scalar(value, like, like.type.rank)


def _clip(b: Builder, v: Value, lo: float, hi: float) -> Value:
    """np.clip(v, lo, hi)."""
    return b.minimum(b.maximum(v, _c(b, lo, v)), _c(b, hi, v))


def _rows(b: Builder, x: Value, lead: int, elem: ElemKind) -> Value:
    """[lead..., C, spatial...] -> [prod(lead) * prod(spatial), C] in ``elem``: one row per position."""
    shape = x.type.shape
    r = x.type.rank
    perm = tuple(range(lead)) + tuple(range(lead + 1, r)) + (lead,)
    return b.reshape(b.cast(b.transpose(x, perm), elem), (math.prod(shape) // shape[lead], shape[lead]))


def _tap_index(b: Builder, taps: Sequence[tuple[Value, Value]], sizes: Sequence[int],
               weight_elem: ElemKind) -> tuple[Value, Value, Value]:
    """Flat int64 index (clipped per axis), the weight (zero outside the input) of one tap combination,
    and whether the tap is inside the input on every axis."""
    flat: Value | None = None
    weight: Value | None = None
    within: Value | None = None
    for i, (idx, w) in enumerate(taps):
        size = sizes[i]
        inside = b.emit1("And", [b.binary("LessOrEqual", _c(b, 0.0, idx), idx),
                                 b.binary("LessOrEqual", idx, _c(b, size - 1, idx))])
        part = b.cast(_clip(b, idx, 0, size - 1), E.INT64)
        stride = math.prod(sizes[i + 1:])
        if stride != 1:
            part = b.mul(part, b.scalar(stride, E.INT64, part.type.rank))
        flat = part if flat is None else b.add(flat, part)
        wi = b.where(inside, w, b.scalar(0.0, weight_elem, w.type.rank))
        weight = wi if weight is None else b.mul(weight, wi)
        within = inside if within is None else b.emit1("And", [within, inside])
    assert flat is not None and weight is not None and within is not None
    return flat, weight, within


# -- MaxUnpool / Col2Im: scatters with index tables ------------------------------------------------------------

@lowering("MaxUnpool")
def _maxunpool(b: Builder, node: Node) -> list[Value]:
    x, idx = b.input(0), b.input(1)
    out = b.out_type()
    data = zeros(b, x.type.elem, (out.size,))
    y = b.emit1("ScatterND", [data, b.reshape(idx, (x.type.size, 1)), b.reshape(x, (x.type.size,))],
                reduction="none")
    return [b.reshape(y, out.shape)]


@lowering("Col2Im")
def _col2im(b: Builder, node: Node) -> list[Value]:
    x = b.input(0)
    image, block = tuple(node.attrs["image_shape"]), tuple(node.attrs["block_shape"])
    strides, dil, pads = node.attrs["strides"], node.attrs["dilations"], node.attrs["pads"]
    nd = len(image)
    n, c = b.out_type().shape[:2]
    kp, nl = math.prod(block), x.type.shape[2]
    blocks = [(image[i] + pads[i] + pads[nd + i] - ((block[i] - 1) * dil[i] + 1)) // strides[i] + 1
              for i in range(nd)]
    padded = tuple(image[i] + pads[i] + pads[nd + i] for i in range(nd))
    # padded-image position of block offset k, block l: k * d + l * s per axis; [K, L] in (k, l) order,
    # so every position receives its contributions in the kernel's order (offset by offset)
    k_grid = np.indices(block).reshape(nd, kp, 1)
    l_grid = np.indices(tuple(blocks)).reshape(nd, 1, nl)
    pos = np.zeros((kp, nl), dtype=np.int64)
    for i in range(nd):
        pos = pos * padded[i] + k_grid[i] * dil[i] + l_grid[i] * strides[i]
    updates = b.transpose(b.reshape(x, (n, c, kp * nl)), (2, 0, 1))  # K*L, N, C
    img = b.emit1("ScatterND", [zeros(b, x.type.elem, (math.prod(padded), n, c)),
                                b.const(pos.reshape(kp * nl, 1)), updates], reduction="add")
    img = b.reshape(b.transpose(img, (1, 2, 0)), (n, c) + padded)
    return [slice_nd(b, img, (0, 0) + tuple(pads[:nd]), (n, c) + image)]


# -- GridSample -----------------------------------------------------------------------------------------------

def _reflect(b: Builder, v: Value, x_min: float, x_max: float) -> Value:
    """Reflect a coordinate outside [x_min, x_max] by its near border, as onnx.reference does: in float64,
    ``n = trunc(d / span)``, ``r = d - n * span`` with ``d`` its distance past that border (for huge
    coordinates the quotient's rounding decides ``r``, not an exact fmod); coordinates inside stay as they are."""
    if x_min == x_max:
        return _c(b, 0.0, v) if v.type.rank == 0 else b.broadcast(_c(b, 0.0, v), v.type.shape)
    w = b.cast(v, F64)
    lo, hi, span = _c(b, x_min, w), _c(b, x_max, w), _c(b, x_max - x_min, w)
    below, above = b.binary("Less", w, lo), b.binary("Less", hi, w)
    d = b.where(below, b.sub(lo, w), b.sub(w, hi))
    n = b.unary("Floor", b.div(d, span))  # d > 0 where it is used: floor is trunc
    r = b.sub(d, b.mul(n, span))
    even = b.binary("Equal", b.emit1("Mod", [n, _c(b, 2.0, w)], fmod=True), _c(b, 0.0, w))
    from_lo, from_hi = b.add(lo, r), b.sub(hi, r)
    out = b.where(below, b.where(even, from_lo, from_hi), b.where(above, b.where(even, from_hi, from_lo), w))
    return b.cast(out, v.type.elem)


def _pad_coord(b: Builder, v: Value, size: int, padding: str, align: bool) -> Value:
    """Map a source coordinate into the image for border / reflection padding."""
    if padding == "border":
        return _clip(b, v, 0, size - 1)
    if padding == "reflection":
        v = _reflect(b, v, 0, size - 1) if align else _reflect(b, v, -0.5, size - 0.5)
        return _clip(b, v, 0, size - 1)
    return v


def _map_outside(b: Builder, v: Value, size: int, padding: str, align: bool) -> Value:
    """What onnx.reference does to a coordinate outside the sampling borders before any mode takes its taps:
    border clamps it into the image, reflection reflects it; a coordinate inside stays as it is."""
    lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    if padding == "reflection":
        return _reflect(b, v, lo, hi)
    if padding == "border":
        return b.where(b.binary("Equal", _clip(b, v, lo, hi), v), v, _clip(b, v, 0, size - 1))
    return v


def _cubic_weights(b: Builder, t: Value) -> list[Value]:
    a = -0.75

    def k(v: float) -> Value:
        return _c(b, v, t)

    def near(s: Value) -> Value:  # |s| <= 1
        return b.add(b.mul(b.mul(b.sub(b.mul(k(a + 2), s), k(a + 3)), s), s), k(1))

    def far(s: Value) -> Value:  # 1 < |s| < 2
        inner = b.add(b.mul(b.sub(b.mul(k(a), s), k(5 * a)), s), k(8 * a))
        return b.sub(b.mul(inner, s), k(4 * a))

    return [far(b.add(t, k(1))), near(t), near(b.sub(k(1), t)), far(b.sub(k(2), t))]


def _grid_taps(b: Builder, v: Value, size: int, mode: str, padding: str, align: bool) -> list[Tap]:
    if mode == "cubic":
        v = _map_outside(b, v, size, padding, align)
        base = b.unary("Floor", v)
        ws = _cubic_weights(b, b.sub(v, base))
        taps = [(b.add(base, _c(b, j - 1, base)), w) for j, w in enumerate(ws)]
        if padding != "zeros":
            taps = [(_pad_coord(b, t, size, padding, align), w) for t, w in taps]
        return taps
    if mode == "nearest" and padding == "reflection":  # the reference rounds, reflects, then truncates
        v = _pad_coord(b, b.unary("Round", v), size, padding, align)
        return [(b.unary("Floor", v), _c(b, 1.0, v))]
    v = _pad_coord(b, v, size, padding, align)
    if mode == "nearest":
        return [(b.unary("Round", v), _c(b, 1.0, v))]
    base = b.unary("Floor", v)
    frac = b.sub(v, base)
    return [(base, b.sub(_c(b, 1.0, frac), frac)), (b.add(base, _c(b, 1.0, base)), frac)]


@lowering("GridSample")
def _grid_sample(b: Builder, node: Node) -> list[Value]:
    x, grid = b.input(0), b.input(1)
    ct = F64 if x.type.elem == F64 else F32
    n, _, *sizes = x.type.shape
    r = len(sizes)
    s = math.prod(sizes)
    mode, padding, align = node.attrs["mode"], node.attrs["padding_mode"], node.attrs["align_corners"]
    rows = _rows(b, x, 1, ct)  # N*S, C
    npos = math.prod(grid.type.shape[1:-1])
    g = b.reshape(b.cast(grid, ct), (n, npos, r))
    per_axis = []
    for i, size in enumerate(sizes):
        v = b.reshape(last(b, g, r - 1 - i, 1), (n, npos))  # the grid lists the innermost axis first
        if align:
            v = b.mul(b.div(b.add(v, _c(b, 1, v)), _c(b, 2, v)), _c(b, size - 1, v))
        else:
            v = b.div(b.sub(b.mul(b.add(v, _c(b, 1, v)), _c(b, size, v)), _c(b, 1, v)), _c(b, 2, v))
        per_axis.append(_grid_taps(b, v, size, mode, padding, align))
    batch = b.const((np.arange(n, dtype=np.int64) * s).reshape(n, 1))

    def pixel(combo: list[Tap]) -> Value:
        flat, _, within = _tap_index(b, combo, sizes, ct)
        # a tap outside the input reads the padding's 0 (never 0 times the clipped pixel: NaN where it is inf)
        return b.where(b.reshape(within, (n, npos, 1)), gather_rows(b, rows, b.add(flat, batch)),
                       b.scalar(0.0, ct, 3))  # N, P, C

    def level(axis: int, chosen: list[Tap]) -> Value:
        """sum_j w_j * value(tap j) over ``axis``, the inner axes summed first (the reference's order: each row
        interpolated along x, then the rows along y), so that sums near the float range overflow alike."""
        acc: Value | None = None
        for idx, w in per_axis[axis]:
            inner = pixel(chosen + [(idx, w)]) if axis == r - 1 else level(axis + 1, chosen + [(idx, w)])
            shape = (n, npos, 1) if w.type.size == n * npos else (1, 1, 1)  # nearest: one weight of 1
            term = b.mul(b.reshape(w, shape), inner)
            acc = term if acc is None else b.add(acc, term)
        assert acc is not None
        return acc

    y = b.reshape(b.transpose(level(0, []), (0, 2, 1)), b.out_type().shape)
    return [b.cast(y, b.out_type().elem)]


# -- RoiAlign ---------------------------------------------------------------------------------------------------

def _sample_counts(node: Node, rois: Value, ct: ElemKind) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-RoI sample grid sizes (gh, gw), or None when they depend on run-time RoI values."""
    a = node.attrs
    r = rois.type.shape[0]
    sr = a["sampling_ratio"]
    if sr > 0:
        return np.full(r, sr, np.int64), np.full(r, sr, np.int64)
    if not isinstance(rois, Constant):
        return None
    dt = ct.dtype.type
    roi = rois.payload.astype(ct.dtype) * dt(a["spatial_scale"]) - dt(0.5 if a["half_pixel"] else 0.0)
    w, h = roi[:, 2] - roi[:, 0], roi[:, 3] - roi[:, 1]
    if not a["half_pixel"]:
        w, h = np.maximum(w, dt(1)), np.maximum(h, dt(1))
    if not (np.isfinite(w).all() and np.isfinite(h).all()):
        return None  # the kernel cannot size the sample grid of a non-finite RoI either
    with np.errstate(all="ignore"):
        gh = [math.ceil(v / a["output_height"]) for v in h]
        gw = [math.ceil(v / a["output_width"]) for v in w]
    return np.array(gh, np.int64), np.array(gw, np.int64)


def _bilinear_taps(b: Builder, pos: Value, size: int) -> tuple[Value, Value, Value, Value, Value]:
    """onnxruntime's RoiAlign interpolation along one axis: low/high index, weights, validity.

    As in the kernel, the weights come out in float64 (its int64 indices promote them).
    """
    valid = b.emit1("And", [b.binary("LessOrEqual", _c(b, -1.0, pos), pos),
                            b.binary("LessOrEqual", pos, _c(b, size, pos))])
    p = b.maximum(pos, _c(b, 0.0, pos))
    low = b.unary("Floor", p)
    at_end = b.binary("LessOrEqual", _c(b, size - 1, low), low)
    low = b.where(at_end, _c(b, size - 1, low), low)
    high = b.where(at_end, _c(b, size - 1, low), b.add(low, _c(b, 1.0, low)))
    low64 = b.cast(low, F64)
    frac = b.sub(b.where(at_end, low64, b.cast(p, F64)), low64)
    return b.cast(low, E.INT64), b.cast(high, E.INT64), b.sub(_c(b, 1.0, frac), frac), frac, valid


@lowering("RoiAlign")
def _roi_align(b: Builder, node: Node) -> list[Value] | None:
    x, rois, batch = b.input(0), b.input(1), b.input(2)
    ct = F64 if x.type.elem == F64 else F32
    counts = _sample_counts(node, rois, ct)
    if counts is None:
        # sampling_ratio 0 with run-time RoIs: the number of samples per bin depends on the RoI values,
        # so the sampled tensor has no static shape
        return None
    gh_np, gw_np = counts
    h, w = x.type.shape[2:]
    nr = rois.type.shape[0]
    oh, ow = node.attrs["output_height"], node.attrs["output_width"]
    gmh, gmw = max(int(gh_np.max(initial=0)), 1), max(int(gw_np.max(initial=0)), 1)
    roi = b.sub(b.mul(b.cast(rois, ct), b.scalar(node.attrs["spatial_scale"], ct, 2)),
                b.scalar(0.5 if node.attrs["half_pixel"] else 0.0, ct, 2))
    x1, y1, x2, y2 = (last(b, roi, i, 1) for i in range(4))  # R, 1
    roi_w, roi_h = b.sub(x2, x1), b.sub(y2, y1)
    if not node.attrs["half_pixel"]:
        roi_w, roi_h = b.maximum(roi_w, _c(b, 1.0, roi_w)), b.maximum(roi_h, _c(b, 1.0, roi_h))

    def samples(start: Value, extent: Value, bins: int, counts_np: np.ndarray, gmax: int) -> Value:
        """start + p * bin + (i + 0.5) * bin / count: [R, bins, gmax]."""
        binsz = b.reshape(b.div(extent, b.scalar(bins, ct, 2)), (nr, 1, 1))
        head = b.add(b.reshape(start, (nr, 1, 1)),
                     b.mul(b.const(np.arange(bins, dtype=ct.dtype).reshape(1, bins, 1)), binsz))
        frac = b.mul(b.const((np.arange(gmax, dtype=ct.dtype) + ct.dtype.type(0.5)).reshape(1, 1, gmax)), binsz)
        return b.add(head, b.div(frac, b.const(counts_np.astype(ct.dtype).reshape(nr, 1, 1))))

    yl, yh, wyl, wyh, vy = _bilinear_taps(b, samples(y1, roi_h, oh, gh_np, gmh), h)  # R, oh, G
    xl, xh, wxl, wxh, vx = _bilinear_taps(b, samples(x1, roi_w, ow, gw_np, gmw), w)  # R, ow, G
    ys_shape, xs_shape = (nr, oh, gmh, 1, 1), (nr, 1, 1, ow, gmw)
    valid = b.cast(b.cast(b.emit1("And", [b.reshape(vy, ys_shape), b.reshape(vx, xs_shape)]), ct), F64)
    rows = b.cast(_rows(b, x, 1, ct), F64)  # N*H*W, C: taps times float64 weights, as the kernel
    base = b.reshape(b.mul(batch, b.scalar(h * w, E.INT64, 1)), (nr, 1, 1, 1, 1))
    terms = []
    for yi, wy in ((yl, wyl), (yh, wyh)):
        for xi, wx in ((xl, wxl), (xh, wxh)):
            index = b.add(b.add(base, b.mul(b.reshape(yi, ys_shape), b.scalar(w, E.INT64, 5))),
                          b.reshape(xi, xs_shape))
            weight = b.mul(b.mul(b.reshape(wy, ys_shape), b.reshape(wx, xs_shape)), valid)
            terms.append(b.mul(gather_rows(b, rows, index), b.reshape(weight, weight.type.shape + (1,))))
    # samples beyond a RoI's own count (when counts differ between RoIs) take no part
    used = (np.arange(gmh).reshape(1, 1, gmh, 1, 1, 1) < gh_np.reshape(nr, 1, 1, 1, 1, 1)) & \
           (np.arange(gmw).reshape(1, 1, 1, 1, gmw, 1) < gw_np.reshape(nr, 1, 1, 1, 1, 1))
    ragged = not used.all()
    if node.attrs["mode"] == "avg":
        total = b.add(b.add(b.add(terms[0], terms[1]), terms[2]), terms[3])
        if ragged:
            total = b.where(b.const(used), total, _c(b, 0.0, total))
        total = b.reduce("ReduceSum", total, (2, 4), keepdims=False)  # R, oh, ow, C
        n_samples = np.maximum(gh_np * gw_np, 1).astype(ct.dtype).astype(np.float64).reshape(nr, 1, 1, 1)
        res = b.div(total, b.const(n_samples))
    else:
        best = b.maximum(b.maximum(terms[0], terms[1]), b.maximum(terms[2], terms[3]))
        if ragged:
            best = b.where(b.const(used), best, _c(b, -np.inf, best))
        res = b.reduce("ReduceMax", best, (2, 4), keepdims=False)
        empty = ((gh_np <= 0) | (gw_np <= 0)).reshape(nr, 1, 1, 1)  # no samples: 0
        if empty.any():
            res = b.where(b.const(empty), _c(b, 0.0, res), res)
    res = b.cast(b.transpose(res, (0, 3, 1, 2)), ct)  # the kernel's result array, then the result kind
    return [b.cast(res, b.out_type().elem)]


# -- DeformConv ---------------------------------------------------------------------------------------------------

@lowering("DeformConv")
def _deform_conv(b: Builder, node: Node) -> list[Value]:
    x, w, offset, bias, mask = (b.opt_input(i) for i in range(5))
    assert x is not None and w is not None and offset is not None
    ct = compute_elem(x.type.elem)
    n, c, *sizes = x.type.shape
    nd = len(sizes)
    kernel = w.type.shape[2:]
    m = w.type.shape[0]
    kp = math.prod(kernel)
    out = b.out_type().shape
    o_shape = out[2:]
    op = math.prod(o_shape)
    og, g = node.attrs["offset_group"], node.attrs["group"]
    cg_off = c // og
    strides, pads, dil = node.attrs["strides"], node.attrs["pads"], node.attrs["dilations"]
    s = math.prod(sizes)
    off = b.reshape(b.cast(offset, ct), (n, og, kp, nd, op))
    k_idx = np.indices(kernel).reshape(nd, kp)
    o_idx = np.indices(o_shape).reshape(nd, op)
    # one row per (n, offset group, position): [N*og*S, C/og]
    rows = b.reshape(b.transpose(b.reshape(b.cast(x, ct), (n, og, cg_off, s)), (0, 1, 3, 2)), (n * og * s, cg_off))
    per_axis = []
    for i in range(nd):
        start = o_idx[i][None, :] * strides[i] - pads[i] + k_idx[i][:, None] * dil[i]  # kp, op
        # int64 base + offset: float64 in the kernel (numpy promotion), so the taps and weights are too
        pos = b.add(b.const(start.astype(np.float64)), b.cast(b.reshape(b.slice(off, 3, i, 1), (n, og, kp, op)), F64))
        base = b.unary("Floor", pos)
        frac = b.sub(pos, base)
        per_axis.append([(base, b.sub(_c(b, 1.0, frac), frac)), (b.add(base, _c(b, 1.0, base)), frac)])
    group_base = b.const((np.arange(n * og, dtype=np.int64) * s).reshape(n, og, 1, 1))
    mask_v = None if mask is None else b.cast(b.reshape(b.cast(mask, ct), (n, og, kp, op)), F64)
    cols: Value | None = None
    for combo in itertools.product(*per_axis):
        flat, weight, _ = _tap_index(b, combo, sizes, F64)
        if mask_v is not None:
            weight = b.mul(weight, mask_v)
        gathered = b.cast(gather_rows(b, rows, b.add(flat, group_base)), F64)
        term = b.cast(b.mul(gathered, b.reshape(weight, (n, og, kp, op, 1))), ct)  # rounded into the ct columns
        cols = term if cols is None else b.add(cols, term)  # N, og, kp, op, C/og
    assert cols is not None
    cols = b.reshape(b.transpose(cols, (0, 1, 4, 2, 3)), (n, g, (c // g) * kp, op))
    res = matmul(b, b.reshape(b.cast(w, ct), (1, g, m // g, (c // g) * kp)), cols)  # N, G, M/g, O
    res = b.reshape(res, out)
    if bias is not None:
        res = b.add(res, per_channel(b, b.cast(bias, ct), len(out)))
    return [b.cast(res, b.out_type().elem)]
