"""Lowerings of the neural-network compute kinds onto primitives (``glow_core.ir.defs.nn``).

In: Gemm, ConvTranspose, LpPool, MaxPoolWithArgmax, Einsum, Identity, Dropout.
Out: MatMul, Conv, Gather, ArgMax, ReduceSum / ReduceMax, element-wise
arithmetic, Cast and data movement (Reshape, Transpose, Slice, Concat,
Broadcast).

Each rule repeats its interpreter kernel (``kernels/nn.py``): float16 and
bfloat16 operands are cast to float32 first and the result is rounded back
once; integers compute in their own kind (wrapping). Window positions are
compile-time constants: a kernel's padding becomes either a Conv's own zero
padding or an index table that points padded positions at one extra fill
element.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from glow_core.ir.defs.nn import parse_einsum
from glow_core.ir.graph import Constant, Node, Value
from glow_core.ir.types import ElemKind
from glow_core.lowering.builder import Builder
from glow_core.lowering.rules.reduce import compute_elem, finish, full, widen
from glow_core.lowering.table import lowering

E = ElemKind
#: integer kinds MatMul does not take: computed in int64 (exact modulo 2**bits, like the wrapping kernel)
_NARROW_INTS = frozenset({E.INT8, E.UINT8, E.INT16, E.UINT16})


# -- helpers shared with nn_quant, nn_seq and nn_spatial --------------------------------------------------

def slice_nd(b: Builder, x: Value, starts: Sequence[int], sizes: Sequence[int],
             steps: Sequence[int] | None = None) -> Value:
    """One Slice over every axis (none when it selects all of ``x``)."""
    steps = tuple(steps) if steps is not None else (1,) * x.type.rank
    if tuple(starts) == (0,) * x.type.rank and tuple(sizes) == x.type.shape and steps == (1,) * x.type.rank:
        return x
    return b.emit1("Slice", [x], starts=tuple(starts), sizes=tuple(sizes), steps=steps)


def last(b: Builder, x: Value, start: int, size: int, step: int = 1) -> Value:
    """A slice of the last axis."""
    return b.slice(x, x.type.rank - 1, start, size, step)


def zeros(b: Builder, elem: ElemKind, shape: Sequence[int]) -> Value:
    return full(b, 0, elem, shape)


def per_channel(b: Builder, v: Value, rank: int) -> Value:
    """A [C] vector shaped [1, C, 1, ...] to broadcast against [N, C, spatial...]."""
    return b.reshape(v, (1, v.type.size) + (1,) * (rank - 2))


def flip_spatial(b: Builder, w: Value, first: int = 2) -> Value:
    """``w`` reversed along every axis from ``first`` on (negative-step Slice)."""
    shape = w.type.shape
    starts = [0] * first + [max(d - 1, 0) for d in shape[first:]]
    steps = [1] * first + [-1] * (len(shape) - first)
    if all(d <= 1 for d in shape[first:]):
        return w
    return slice_nd(b, w, starts, shape, steps)


def zero_insert(b: Builder, x: Value, axis: int, stride: int) -> Value:
    """``stride - 1`` zeros between consecutive elements along ``axis``: length s * (d - 1) + 1."""
    shape = x.type.shape
    d = shape[axis]
    if stride == 1 or d == 0:
        return x
    x1 = b.reshape(x, shape[:axis + 1] + (1,) + shape[axis + 1:])
    z = zeros(b, x.type.elem, shape[:axis + 1] + (stride - 1,) + shape[axis + 1:])
    y = b.reshape(b.concat([x1, z], axis + 1), shape[:axis] + (d * stride,) + shape[axis + 1:])
    return b.slice(y, axis, 0, stride * (d - 1) + 1)


def gather_rows(b: Builder, x: Value, index: Value) -> Value:
    """``x`` [rows, ...] gathered along axis 0 by an index tensor of any shape."""
    return b.emit1("Gather", [x, index], axis=0)


def matmul(b: Builder, a: Value, c: Value) -> Value:
    return b.emit1("MatMul", [a, c])


# -- Gemm --------------------------------------------------------------------------------------------------

@lowering("Gemm")
def _gemm(b: Builder, node: Node) -> list[Value]:
    a, w = widen(b, b.input(0)), widen(b, b.input(1))
    c = b.opt_input(2)
    ct = a.type.elem
    if node.attrs["trans_a"]:
        a = b.transpose(a, (1, 0))
    if node.attrs["trans_b"]:
        w = b.transpose(w, (1, 0))
    y = matmul(b, a, w)
    alpha, beta = node.attrs["alpha"], node.attrs["beta"]
    if ct.is_int:  # the importer admits only alpha == 1 and beta in {0, 1} for integers
        if c is not None and beta != 0:
            y = b.add(y, b.cast(c, ct))
    else:
        if alpha != 1.0:
            y = b.mul(y, b.scalar(alpha, ct))
        if c is not None and beta != 0.0:
            cc = b.cast(c, ct)
            y = b.add(y, cc if beta == 1.0 else b.mul(cc, b.scalar(beta, ct)))
    return [finish(b, node, b.broadcast(y, b.out_type().shape))]


# -- ConvTranspose: Conv over the zero-inserted input with the flipped, transposed filter -------------------

@lowering("ConvTranspose")
def _conv_transpose(b: Builder, node: Node) -> list[Value]:
    x, w = widen(b, b.input(0)), widen(b, b.input(1))
    bias = b.opt_input(2)
    ct = x.type.elem
    out = b.out_type().shape
    nd = x.type.rank - 2
    strides, pads, dil, g = node.attrs["strides"], node.attrs["pads"], node.attrs["dilations"], node.attrs["group"]
    kernel = w.type.shape[2:]
    c, mg = w.type.shape[:2]
    cg = c // g
    bias_c = b.cast(bias, ct) if bias is not None else None
    w_in = b.input(1)
    if _patches_apply(x, kernel, strides, pads, dil, g, out):
        return [finish(b, node, _conv_transpose_patches(b, x, w, bias_c, kernel, out))]
    if ct.is_float and not (isinstance(w_in, Constant) and np.isfinite(w_in.payload).all()):
        # the zeros of the Conv form meet every weight: 0 * inf would be NaN where the result is +-inf
        return [finish(b, node, _conv_transpose_taps(b, node, x, w, bias_c, out))]
    # filter [C, M/g, k...] -> [M, C/g, k...] per group, flipped along the spatial axes
    wt = b.reshape(w, (g, cg, mg) + kernel)
    wt = b.transpose(wt, (0, 2, 1) + tuple(range(3, 3 + nd)))
    wt = flip_spatial(b, b.reshape(wt, (g * mg, cg) + kernel))
    # full result position j = sum_k x_up[j - k*d] w[k]; output o reads full[o + pad_begin]:
    # a Conv over x_up from position pad_begin - (k-1)*d, padded with zeros where that leaves x_up
    conv_pads_begin, conv_pads_end = [], []
    for i in range(nd):
        x = zero_insert(b, x, 2 + i, strides[i])
        length = x.type.shape[2 + i]
        reach = (kernel[i] - 1) * dil[i]
        start, need = pads[i] - reach, out[2 + i] + reach
        lo, hi = max(start, 0), min(start + need, length)
        if hi <= lo or out[2 + i] == 0:  # every tap reads zeros: the result is the bias alone
            y = zeros(b, ct, out)
            if bias_c is not None:
                y = b.add(y, per_channel(b, bias_c, len(out)))
            return [finish(b, node, y)]
        x = b.slice(x, 2 + i, lo, hi - lo)
        conv_pads_begin.append(lo - start)
        conv_pads_end.append(start + need - hi)
    y = b.emit1("Conv", [x, wt, bias_c], strides=(1,) * nd, pads=tuple(conv_pads_begin + conv_pads_end),
                dilations=tuple(dil), group=g)
    return [finish(b, node, y)]


def _patches_apply(x: Value, kernel: Sequence[int], strides: Sequence[int], pads: Sequence[int],
                   dil: Sequence[int], g: int, out: Sequence[int]) -> bool:
    """The kernel tiles the output exactly (stride = kernel, no padding or dilation, one group): every output
    element is one tap of one input position, so the layer is a matrix product (an upsampling ``2x2 / 2``)."""
    nd = len(kernel)
    return (g == 1 and tuple(strides) == tuple(kernel) and not any(pads) and all(d == 1 for d in dil)
            and tuple(out[2:]) == tuple(x.type.shape[2 + i] * kernel[i] for i in range(nd))
            and x.type.size > 0 and math.prod(kernel) > 0)


def _conv_transpose_patches(b: Builder, x: Value, w: Value, bias: Value | None, kernel: Sequence[int],
                            out: Sequence[int]) -> Value:
    """``Y[n, m, s*k + t] = sum_c X[n, c, s] W[c, m, t]``: ``W^T [M*K, C] @ X [N, C, S]``, then each input
    position's ``M x K`` patch moved into place (a reshape and one transpose); no zero-inserted input."""
    nd = len(kernel)
    n, c = x.type.shape[:2]
    m = w.type.shape[1]
    spatial = x.type.shape[2:]
    wm = b.transpose(b.reshape(w, (c, m * math.prod(kernel))), (1, 0))
    y = matmul(b, wm, b.reshape(x, (n, c, math.prod(spatial))))  # N, M*K, S
    y = b.reshape(y, (n, m) + tuple(kernel) + tuple(spatial))
    perm = (0, 1) + tuple(p for i in range(nd) for p in (2 + nd + i, 2 + i))
    y = b.reshape(b.transpose(y, perm), tuple(out))
    if bias is not None:
        y = b.add(y, per_channel(b, bias, len(out)))
    return y


def _place(b: Builder, t: Value, axis: int, shift: int, length: int) -> Value:
    """``t`` moved by ``shift`` along ``axis`` inside a zero tensor of ``length`` there (cut where it leaves)."""
    d = t.type.shape[axis]
    lo, hi = max(0, -shift), min(d, length - shift)
    if hi <= lo:
        return zeros(b, t.type.elem, t.type.shape[:axis] + (length,) + t.type.shape[axis + 1:])
    t = b.slice(t, axis, lo, hi - lo)

    def pad(n: int) -> list[Value]:
        return [zeros(b, t.type.elem, t.type.shape[:axis] + (n,) + t.type.shape[axis + 1:])] if n else []

    return b.concat(pad(shift + lo) + [t] + pad(length - (shift + hi)), axis)


def _conv_transpose_taps(b: Builder, node: Node, x: Value, w: Value, bias_c: Value | None,
                         out: Sequence[int]) -> Value:
    """ConvTranspose as a sum over kernel taps: each tap's product x * w[..., k] is moved to its output
    positions (i * s + k * d - pad_begin) by zero insertion and padding, so padding zeros are only ever
    added, never multiplied by a weight (an infinite weight gives +-inf, as in the ONNX reference)."""
    strides, pads, dil, g = node.attrs["strides"], node.attrs["pads"], node.attrs["dilations"], node.attrs["group"]
    n, c, *sp = x.type.shape
    mg, kernel = w.type.shape[1], w.type.shape[2:]
    cg, nd, size = c // g, len(sp), math.prod(sp)
    # x as [g, cg, n * positions]: one batched MatMul per tap, [g, mg, cg] @ [g, cg, n * positions]
    xg = b.reshape(b.transpose(b.reshape(x, (n, g, cg, size)), (1, 2, 0, 3)), (g, cg, n * size))
    acc = zeros(b, x.type.elem, out)
    for k in np.ndindex(*kernel):
        wk = b.transpose(b.reshape(slice_nd(b, w, (0, 0) + k, (c, mg) + (1,) * nd), (g, cg, mg)), (0, 2, 1))
        t = b.reshape(matmul(b, wk, xg), (g, mg, n, size))
        t = b.reshape(b.transpose(t, (2, 0, 1, 3)), (n, g * mg) + tuple(sp))
        for i in range(nd):
            t = zero_insert(b, t, 2 + i, strides[i])
            t = _place(b, t, 2 + i, k[i] * dil[i] - pads[i], out[2 + i])
        acc = b.add(acc, t)
    return acc if bias_c is None else b.add(acc, per_channel(b, bias_c, len(out)))


# -- pooling -----------------------------------------------------------------------------------------------

def window_end_pads(in_sp: Sequence[int], attrs: Mapping[str, Any], out_sp: Sequence[int]) -> list[int]:
    """End padding covering every window (the ceil_mode overhang too), as the kernels' ``windows``."""
    nd = len(in_sp)
    k, s, d, p = attrs["kernel_shape"], attrs["strides"], attrs["dilations"], attrs["pads"]
    return [max(p[nd + i], (out_sp[i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in_sp[i] - p[i]) for i in range(nd)]


@lowering("LpPool")
def _lppool(b: Builder, node: Node) -> list[Value]:
    x = widen(b, b.input(0))
    ct = x.type.elem
    out = b.out_type().shape
    c = x.type.shape[1]
    nd = x.type.rank - 2
    p = node.attrs["p"]
    xa = b.unary("Abs", x)
    powered = b.mul(xa, xa) if p == 2 else b.binary("Pow", xa, b.scalar(p, ct))
    # the window sums: a depthwise Conv with a ones filter (padding and the ceil_mode overhang add 0)
    ends = window_end_pads(x.type.shape[2:], node.attrs, out[2:])
    ones = b.const(np.ones((c, 1) + tuple(node.attrs["kernel_shape"]), dtype=ct.dtype))
    total = b.emit1("Conv", [powered, ones, None], strides=tuple(node.attrs["strides"]),
                    pads=tuple(node.attrs["pads"][:nd]) + tuple(ends), dilations=tuple(node.attrs["dilations"]),
                    group=c)
    total = slice_nd(b, total, (0,) * len(out), out)
    res = b.unary("Sqrt", total) if p == 2 else b.binary("Pow", total, b.scalar(1.0 / p, ct))
    return [finish(b, node, res)]


def _lowest(elem: ElemKind) -> float | int:
    return -math.inf if elem.is_float else int(np.iinfo(elem.dtype).min)


@lowering("MaxPoolWithArgmax")
def _maxpool_argmax(b: Builder, node: Node) -> list[Value]:
    x = b.input(0)
    elem = x.type.elem
    n, c, *sp = x.type.shape
    out = b.out_type().shape
    o_sp = out[2:]
    nd = len(sp)
    kernel, strides, dil, pads = (node.attrs[k] for k in ("kernel_shape", "strides", "dilations", "pads"))
    size = math.prod(sp)
    n_out, n_k = math.prod(o_sp), math.prod(kernel)
    # position of tap k of window o along each axis, [O..., K...] flattened to [n_out, n_k]
    o_grid = np.indices(tuple(o_sp)).reshape(nd, n_out, 1)
    k_grid = np.indices(tuple(kernel)).reshape(nd, 1, n_k)
    coords = [o_grid[i] * strides[i] + k_grid[i] * dil[i] - pads[i] for i in range(nd)]
    inside = np.ones((n_out, n_k), dtype=bool)
    flat = np.zeros((n_out, n_k), dtype=np.int64)
    for i in range(nd):
        inside &= (coords[i] >= 0) & (coords[i] < sp[i])
        flat = flat * sp[i] + coords[i]
    source = np.where(inside, flat, size)  # padding reads the fill element appended at index `size`
    xf = b.concat([b.reshape(x, (n, c, size)), full(b, _lowest(elem), elem, (n, c, 1))], 2)
    win = b.emit1("Gather", [xf, b.const(source.astype(np.int64))], axis=2)  # N, C, n_out, n_k
    best = b.emit1("ArgMax", [win], axis=3, keepdims=True, select_last_index=False)  # first maximum
    values = b.reshape(b.reduce("ReduceMax", win, (3,), keepdims=False), out)
    # the index of the chosen tap over the unpadded input, in storage order, N and C included
    order = range(nd) if node.attrs["storage_order"] == 0 else reversed(range(nd))
    index = np.zeros((n_out, n_k), dtype=np.int64)
    for i in order:
        index = index * sp[i] + coords[i]
    pick = b.add(best, b.const((np.arange(n_out, dtype=np.int64) * n_k).reshape(n_out, 1)))
    idx = b.reshape(gather_rows(b, b.const(index.reshape(-1)), pick), out)
    base = (np.arange(n * c, dtype=np.int64) * size).reshape((n, c) + (1,) * nd)
    return [values, b.add(idx, b.const(base))]


# -- Einsum: diagonals, then pairwise MatMul contractions, then the output order ---------------------------

def _diagonal(b: Builder, x: Value, labels: list[str]) -> tuple[Value, list[str]]:
    """Take the diagonal of every label an operand repeats (``ii->i``)."""
    while len(set(labels)) != len(labels):
        lab = next(lb for lb in labels if labels.count(lb) > 1)
        p = labels.index(lab)
        q = labels.index(lab, p + 1)
        others = [i for i in range(len(labels)) if i not in (p, q)]
        dim = x.type.shape[p]
        x = b.transpose(x, others + [p, q])
        x = b.reshape(x, x.type.shape[:-2] + (dim * dim,))
        x = b.emit1("Gather", [x, b.const(np.arange(dim, dtype=np.int64) * (dim + 1))], axis=x.type.rank - 1)
        labels = [labels[i] for i in others] + [lab]
    return x, labels


def _sum_out(b: Builder, x: Value, labels: list[str], keep: set[str]) -> tuple[Value, list[str]]:
    axes = [i for i, lb in enumerate(labels) if lb not in keep]
    if not axes:
        return x, labels
    return b.reduce("ReduceSum", x, axes, keepdims=False), [lb for lb in labels if lb in keep]


def _contract(b: Builder, a: Value, la: list[str], c: Value, lc: list[str],
              keep: set[str]) -> tuple[Value, list[str]]:
    """One MatMul: shared labels in ``keep`` are batch axes, the other shared labels are summed."""
    shared = [lb for lb in la if lb in lc]
    batch = [lb for lb in shared if lb in keep]
    summed = [lb for lb in shared if lb not in keep]
    a_only = [lb for lb in la if lb not in lc]
    c_only = [lb for lb in lc if lb not in la]
    size = {lb: max(a.type.shape[la.index(lb)], c.type.shape[lc.index(lb)]) for lb in shared}
    size.update({lb: a.type.shape[la.index(lb)] for lb in a_only})
    size.update({lb: c.type.shape[lc.index(lb)] for lb in c_only})
    a = b.broadcast(a, [size[lb] for lb in la])  # '...' axes of size 1 broadcast against the other operand
    c = b.broadcast(c, [size[lb] for lb in lc])
    bshape = [size[lb] for lb in batch]
    m, k, n = (math.prod(size[lb] for lb in part) for part in (a_only, summed, c_only))
    a = b.reshape(b.transpose(a, [la.index(lb) for lb in batch + a_only + summed]), bshape + [m, k])
    c = b.reshape(b.transpose(c, [lc.index(lb) for lb in batch + summed + c_only]), bshape + [k, n])
    labels = batch + a_only + c_only
    return b.reshape(matmul(b, a, c), [size[lb] for lb in labels]), labels


@lowering("Einsum")
def _einsum(b: Builder, node: Node) -> list[Value]:
    xs = [v for v in node.inputs if v is not None]
    labels, out_labels, sizes = parse_einsum(node.attrs["equation"], [v.type.shape for v in xs])
    ct = compute_elem(xs[0].type.elem)
    work = E.INT64 if ct in _NARROW_INTS else ct
    ops: list[tuple[Value, list[str]]] = []
    for i, v in enumerate(xs):
        x, labs = _diagonal(b, b.cast(v, work), list(labels[i]))
        later = set(out_labels).union(*(labels[j] for j in range(len(xs)) if j != i))
        ops.append(_sum_out(b, x, labs, later))
    cur, lc = ops[0]
    for j in range(1, len(ops)):
        keep = set(out_labels).union(*(ops[t][1] for t in range(j + 1, len(ops))))
        nxt, ln = ops[j]
        cur, lc = _sum_out(b, cur, lc, keep | set(ln))
        nxt, ln = _sum_out(b, nxt, ln, keep | set(lc))
        cur, lc = _contract(b, cur, lc, nxt, ln, keep)
    cur, lc = _sum_out(b, cur, lc, set(out_labels))
    y = b.transpose(cur, [lc.index(lb) for lb in out_labels])
    y = b.broadcast(y, [sizes[lb] for lb in out_labels])
    return [finish(b, node, y)]


# -- inference no-ops --------------------------------------------------------------------------------------

@lowering("Identity", "Dropout")
def _identity(b: Builder, node: Node) -> list[Value]:
    return [b.input(0)]
