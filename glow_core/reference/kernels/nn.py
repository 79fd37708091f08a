"""Neural-network kernels: convolution (im2col + matmul), pooling, matrix products, no-ops.

Windows over the spatial axes come from ``sliding_window_view`` (no copies);
convolution gathers them once into a column matrix and multiplies with BLAS.
float16 / bfloat16 are computed in float32 and rounded back once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from glow_core import budget
from glow_core.ir.types import TensorType
from glow_core.reference.kernels import KERNELS

Attrs = Mapping[str, Any]
Types = Sequence[TensorType]

#: pooling over more window offsets than this reduces the window view directly
_LOOP_OFFSETS = 256


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype arithmetic runs in: float32 for the half-precision kinds."""
    if dtype.kind == "f" and dtype.itemsize >= 4:
        return dtype
    if dtype.kind in "iub":
        return dtype
    return np.dtype(np.float32)  # float16, bfloat16


# -- windows ----------------------------------------------------------------------

def pad_spatial(x: np.ndarray, begins: Sequence[int], ends: Sequence[int], value: Any = 0) -> np.ndarray:
    if not any(begins) and not any(ends):
        return x
    widths = [(0, 0)] * (x.ndim - len(begins)) + list(zip(begins, ends))
    return np.pad(x, widths, constant_values=value)


def windows(x: np.ndarray, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
            pads: Sequence[int], out: Sequence[int], fill: Any = 0) -> np.ndarray:
    """View ``(lead..., O..., K...)`` of the padded input: element ``[o, k]`` is at ``o*s + k*d - pad``.

    The input is padded with ``fill`` on both sides by ``pads`` and, at the
    end, by whatever a ceil_mode window needs beyond that.
    """
    nd = len(kernel)
    sp = x.shape[x.ndim - nd:]
    ends = []
    for i in range(nd):
        need = (out[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1
        ends.append(max(pads[nd + i], need - sp[i] - pads[i]))
    padded = x.shape[:x.ndim - nd] + tuple(sp[i] + pads[i] + ends[i] for i in range(nd))
    budget.current().check_tensor(padded, x.dtype.itemsize, f"a window of {list(kernel)}", "the padded input")
    xp = pad_spatial(x, pads[:nd], ends, fill)
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    axes = tuple(range(x.ndim - nd, x.ndim))
    v = sliding_window_view(xp, eff, axis=axes)
    lead = (slice(None),) * (x.ndim - nd)
    sel_o = tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(out, strides))
    sel_k = tuple(slice(None, None, d) for d in dilations)
    return v[lead + sel_o + sel_k]


def offsets(kernel: Sequence[int]) -> Iterator[tuple[int, ...]]:
    return iter(np.ndindex(*kernel))


# -- convolution --------------------------------------------------------------------

def conv_nd(x: np.ndarray, w: np.ndarray, strides: Sequence[int], pads: Sequence[int],
            dilations: Sequence[int], group: int, out: Sequence[int]) -> np.ndarray:
    """Grouped N-d convolution (no bias) in the dtype of ``x``/``w`` by im2col + matmul."""
    n, c = x.shape[:2]
    m = w.shape[0]
    kernel = w.shape[2:]
    nd = len(kernel)
    g = group
    cg, mg = c // g, m // g
    win = windows(x, kernel, strides, dilations, pads, out)  # N, C, O..., K...
    win = win.reshape((n, g, cg) + win.shape[2:])
    # -> G, Cg, K..., N, O...
    perm = (1, 2) + tuple(range(3 + nd, 3 + 2 * nd)) + (0,) + tuple(range(3, 3 + nd))
    op = math.prod(out)
    kp = math.prod(kernel)
    cols = win.transpose(perm).reshape(g, cg * kp, n * op)
    res = np.matmul(w.reshape(g, mg, cg * kp), cols)  # G, Mg, N*O
    res = res.reshape(g, mg, n, op).transpose(2, 0, 1, 3)
    return res.reshape((n, m) + tuple(out))


def _spatial_out(attrs: Attrs, out: Types) -> tuple[int, ...]:
    return tuple(out[0].shape[2:])


@KERNELS.register("Conv")
def _conv(attrs: Attrs, out: Types, x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    ct = compute_dtype(x.dtype)
    y = conv_nd(x.astype(ct, copy=False), w.astype(ct, copy=False), attrs["strides"], attrs["pads"],
                attrs["dilations"], attrs["group"], _spatial_out(attrs, out))
    if b is not None:
        y += b.astype(ct).reshape((1, -1) + (1,) * (y.ndim - 2))
    return y.astype(out[0].dtype, copy=False)


def conv_transpose_nd(x: np.ndarray, w: np.ndarray, strides: Sequence[int], pads: Sequence[int],
                      dilations: Sequence[int], group: int, out: Sequence[int]) -> np.ndarray:
    """Grouped N-d transposed convolution (no bias): matmul, then scatter-add per kernel offset."""
    n, c = x.shape[:2]
    sp = x.shape[2:]
    kernel = w.shape[2:]
    nd = len(kernel)
    g = group
    cg, mg = c // g, w.shape[1]
    dp, kp = math.prod(sp), math.prod(kernel)
    xs = x.reshape(n, g, cg, dp).transpose(1, 2, 0, 3).reshape(g, cg, n * dp)
    ws = w.reshape(g, cg, mg * kp).transpose(0, 2, 1)
    cols = np.matmul(ws, xs).reshape((g, mg) + tuple(kernel) + (n,) + tuple(sp))
    # -> N, G, Mg, K..., D...
    perm = (2 + nd, 0, 1) + tuple(range(2, 2 + nd)) + tuple(range(3 + nd, 3 + 2 * nd))
    cols = cols.transpose(perm)
    # output position o is full-result position o + pads[i] (zero outside [0, full)): only the positions
    # [lo, hi) the output reads are summed (a stride of 2**32 made an 8-gigaelement full result for 80 outputs)
    full_shape = [s * (d - 1) + (k - 1) * dl + 1 for s, d, k, dl in zip(strides, sp, kernel, dilations)]
    lo = [min(max(pads[i], 0), full_shape[i]) for i in range(nd)]
    hi = [max(min(pads[i] + out[i], full_shape[i]), lo[i]) for i in range(nd)]
    part = np.zeros((n, g, mg) + tuple(h - low for low, h in zip(lo, hi)), dtype=cols.dtype)
    lead = (slice(None),) * 3
    for k in offsets(kernel):
        src, dst = [], []
        for i in range(nd):
            first = k[i] * dilations[i]  # taps of input j land at first + strides[i] * j
            j0 = min(max(-(-(lo[i] - first) // strides[i]), 0), sp[i])
            j1 = min(max(-(-(hi[i] - first) // strides[i]), j0), sp[i])
            src.append(slice(j0, j1))
            start = first + strides[i] * j0 - lo[i]
            dst.append(slice(start, start + strides[i] * (j1 - j0 - 1) + 1 if j1 > j0 else start, strides[i]))
        part[lead + tuple(dst)] += cols[lead + k][lead + tuple(src)]
    y = np.zeros((n, g, mg) + tuple(out), dtype=cols.dtype)
    y[lead + tuple(slice(lo[i] - pads[i], hi[i] - pads[i]) for i in range(nd))] = part
    return y.reshape((n, g * mg) + tuple(out))


@KERNELS.register("ConvTranspose")
def _conv_transpose(attrs: Attrs, out: Types, x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    ct = compute_dtype(x.dtype)
    y = conv_transpose_nd(x.astype(ct, copy=False), w.astype(ct, copy=False), attrs["strides"], attrs["pads"],
                          attrs["dilations"], attrs["group"], _spatial_out(attrs, out))
    if b is not None:
        y = y + b.astype(ct).reshape((1, -1) + (1,) * (y.ndim - 2))
    return np.ascontiguousarray(y).astype(out[0].dtype, copy=False)


# -- pooling ------------------------------------------------------------------------

def _pool_windows(x: np.ndarray, attrs: Attrs, out: Types, fill: Any) -> np.ndarray:
    return windows(x, attrs["kernel_shape"], attrs["strides"], attrs["dilations"], attrs["pads"],
                   _spatial_out(attrs, out), fill)


def _reduce_windows(win: np.ndarray, nd: int, ufunc: np.ufunc, dtype: np.dtype) -> np.ndarray:
    """Reduce the last ``nd`` axes of a window view with ``ufunc`` (add or maximum)."""
    kernel = win.shape[win.ndim - nd:]
    if math.prod(kernel) > _LOOP_OFFSETS:
        axes = tuple(range(win.ndim - nd, win.ndim))
        return ufunc.reduce(win, axis=axes, dtype=dtype)
    lead = (Ellipsis,)
    acc: np.ndarray | None = None
    for k in offsets(kernel):
        v = win[lead + k]
        acc = v.astype(dtype, copy=True) if acc is None else ufunc(acc, v, out=acc, dtype=dtype)
    assert acc is not None
    return acc


def _lowest(dtype: np.dtype) -> Any:
    return -np.inf if dtype.kind == "f" or dtype.kind == "V" else np.iinfo(dtype).min


@KERNELS.register("MaxPool")
def _maxpool(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    nd = x.ndim - 2
    if x.dtype.kind not in "fiu":  # bfloat16: compare in float32 (exact)
        xx = x.astype(np.float32)
        win = _pool_windows(xx, attrs, out, -np.inf)
        return _reduce_windows(win, nd, np.maximum, np.dtype(np.float32)).astype(out[0].dtype)
    win = _pool_windows(x, attrs, out, _lowest(x.dtype))
    return _reduce_windows(win, nd, np.maximum, x.dtype)


@KERNELS.register("MaxPoolWithArgmax")
def _maxpool_argmax(attrs: Attrs, out: Types, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    nd = x.ndim - 2
    xx = x if x.dtype.kind in "fiu" else x.astype(np.float32)
    win = _pool_windows(xx, attrs, out, _lowest(xx.dtype))
    kernel = win.shape[win.ndim - nd:]
    flat = win.reshape(win.shape[:win.ndim - nd] + (-1,))
    best_k = np.argmax(flat, axis=-1)  # first maximum in window order
    values = np.take_along_axis(flat, best_k[..., None], axis=-1)[..., 0]
    ks = np.unravel_index(best_k, kernel)
    spatial = x.shape[2:]
    o_grids = np.indices(out[0].shape[2:], sparse=True)
    coords = [o_grids[i] * attrs["strides"][i] + ks[i] * attrs["dilations"][i] - attrs["pads"][i]
              for i in range(nd)]
    order = range(nd) if attrs["storage_order"] == 0 else reversed(range(nd))
    idx = np.zeros(values.shape, dtype=np.int64)
    for i in order:
        idx = idx * spatial[i] + coords[i]
    n, c = x.shape[:2]
    base = (np.arange(n * c, dtype=np.int64) * math.prod(spatial)).reshape((n, c) + (1,) * nd)
    return values.astype(out[0].dtype, copy=False), idx + base


def _window_counts(attrs: Attrs, out: Types, spatial: Sequence[int], include_pad: bool) -> np.ndarray:
    """How many elements the divisor of each average counts (shape O...)."""
    nd = len(spatial)
    pads = attrs["pads"]
    if include_pad:
        ones = np.ones(tuple(s + pads[i] + pads[nd + i] for i, s in enumerate(spatial)), dtype=np.float64)
        no_pad = (0,) * (2 * nd)
        win = windows(ones, attrs["kernel_shape"], attrs["strides"], attrs["dilations"], no_pad,
                      _spatial_out(attrs, out))
    else:
        ones = np.ones(tuple(spatial), dtype=np.float64)
        win = windows(ones, attrs["kernel_shape"], attrs["strides"], attrs["dilations"], pads,
                      _spatial_out(attrs, out))
    return win.sum(axis=tuple(range(nd, 2 * nd)))


@KERNELS.register("AvgPool")
def _avgpool(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    nd = x.ndim - 2
    ct = compute_dtype(x.dtype)
    win = _pool_windows(x.astype(ct, copy=False), attrs, out, 0)
    total = _reduce_windows(win, nd, np.add, ct)
    counts = _window_counts(attrs, out, x.shape[2:], attrs["count_include_pad"]).astype(ct)
    return (total / counts).astype(out[0].dtype, copy=False)


@KERNELS.register("LpPool")
def _lppool(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    nd = x.ndim - 2
    ct = compute_dtype(x.dtype)
    p = attrs["p"]
    xa = np.abs(x.astype(ct, copy=False))
    powered = xa * xa if p == 2 else xa ** p
    total = _reduce_windows(_pool_windows(powered, attrs, out, 0), nd, np.add, ct)
    res = np.sqrt(total) if p == 2 else total ** (1.0 / p)
    return res.astype(out[0].dtype, copy=False)


# -- matrix products ------------------------------------------------------------------

@KERNELS.register("MatMul")
def _matmul(attrs: Attrs, out: Types, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ct = compute_dtype(a.dtype)
    return np.matmul(a.astype(ct, copy=False), b.astype(ct, copy=False)).astype(out[0].dtype, copy=False)


@KERNELS.register("Gemm")
def _gemm(attrs: Attrs, out: Types, a: np.ndarray, b: np.ndarray, c: np.ndarray | None) -> np.ndarray:
    ct = compute_dtype(a.dtype)
    a = a.astype(ct, copy=False)
    b = b.astype(ct, copy=False)
    y = np.matmul(a.T if attrs["trans_a"] else a, b.T if attrs["trans_b"] else b)
    alpha, beta = attrs["alpha"], attrs["beta"]
    if ct.kind in "iu":  # the importer admits only alpha == 1 and beta in {0, 1} for integers
        if c is not None and beta != 0:
            y = y + c.astype(ct)
        return np.broadcast_to(y, out[0].shape).astype(out[0].dtype)
    if alpha != 1.0:
        y = y * ct.type(alpha)
    if c is not None and beta != 0.0:
        cc = c.astype(ct, copy=False)
        y = y + (cc if beta == 1.0 else cc * ct.type(beta))
    return np.broadcast_to(y, out[0].shape).astype(out[0].dtype)


@KERNELS.register("Einsum")
def _einsum(attrs: Attrs, out: Types, *xs: np.ndarray) -> np.ndarray:
    ct = compute_dtype(xs[0].dtype)
    res = np.einsum(attrs["equation"], *(x.astype(ct, copy=False) for x in xs), dtype=ct)
    return np.asarray(res).astype(out[0].dtype, copy=False)


# -- no-ops -----------------------------------------------------------------------------

@KERNELS.register("Identity", "Dropout")
def _identity(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    return x
