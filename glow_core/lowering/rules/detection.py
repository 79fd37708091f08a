"""Lowerings of the data-dependent kinds (``glow_core.ir.defs.detection``) onto primitives.

Unique is vectorized over all pairs of slices: an equality matrix (NaN equals
NaN) and a lexicographic order matrix (NaN last) give each slice its group's
first occurrence (ArgMax), its count and its rank among the groups (sorted, or
by first occurrence); ScatterND with distinct targets (unused entries go to a
discarded tail) places the groups. NonMaxSuppression sorts each class by score
(TopK keeps the lower index first on ties), computes the pairwise suppression
matrix with the reference's arithmetic, and runs the greedy selection unrolled
over the N ranks; the rows are placed with ScatterND at their prefix-sum
positions. Both decline (a backend without the kind then reports it) past
:data:`MAX_PAIRWISE` pair entries or, for NMS, :data:`MAX_UNROLLED` boxes.
"""

from __future__ import annotations

import math

import numpy as np

from glow_core.ir.graph import Node, Value
from glow_core.ir.types import ElemKind
from glow_core.lowering.builder import Builder
from glow_core.lowering.table import lowering

E = ElemKind
I64, BOOL = E.INT64, E.BOOL
#: largest pairwise matrix (entries) the lowerings build
MAX_PAIRWISE = 1 << 22
#: most boxes NonMaxSuppression's greedy loop is unrolled over
MAX_UNROLLED = 128


def _i64(b: Builder, v: Value) -> Value:
    return b.cast(v, I64)


def _and(b: Builder, x: Value, y: Value) -> Value:
    return b.binary("And", x, y)


def _or(b: Builder, x: Value, y: Value) -> Value:
    return b.binary("Or", x, y)


def _not(b: Builder, x: Value) -> Value:
    return b.unary("Not", x)


def _eq_lt(b: Builder, u: Value, v: Value) -> tuple[Value, Value]:
    """(u == v, u < v) elementwise, NaN equal to NaN and above every number."""
    eq, lt = b.binary("Equal", u, v), b.binary("Less", u, v)
    if u.type.elem.is_float:
        un, vn = b.unary("IsNaN", u), b.unary("IsNaN", v)
        eq = _or(b, eq, _and(b, un, vn))
        lt = _or(b, lt, _and(b, _not(b, un), vn))
    return eq, lt


def _scatter(b: Builder, n: int, fill: int, targets: Value, updates: Value) -> Value:
    """[n] int64: updates[i] at targets[i] (distinct, in [0, 2n)), fill elsewhere; the tail [n, 2n) dropped."""
    data = b.const(np.full(2 * n, fill, np.int64))
    out = b.emit1("ScatterND", [data, b.reshape(targets, (n, 1)), updates], reduction="none")
    return b.slice(out, 0, 0, n)


@lowering("Unique")
def _unique(b: Builder, node: Node) -> list[Value] | None:
    x = b.input(0)
    axis = int(b.attrs["axis"])
    n = b.out_type(1).shape[0]
    s = 1 if axis == -1 else x.type.size // max(n, 1)
    if n * n * max(s, 1) > MAX_PAIRWISE or n == 0:
        return None
    perm = [axis] + [d for d in range(x.type.rank) if d != axis] if axis != -1 else list(range(x.type.rank))
    rows = b.reshape(b.transpose(x, perm) if axis != -1 else x, (n, s))
    eqk, ltk = _eq_lt(b, b.reshape(rows, (1, n, s)), b.reshape(rows, (n, 1, s)))  # [i, j, k]: row j vs row i
    eq = b.reduce("ReduceMin", eqk, [2], keepdims=False)                         # rows i and j equal
    if s == 1:
        lt = b.reshape(ltk, (n, n))
    else:  # lexicographic: the first differing element decides
        diff = b.cast(_not(b, eqk), I64)
        before = b.binary("Equal", b.emit1("CumSum", [diff], axis=2, exclusive=True, reverse=False),
                          b.scalar(0, I64, 3))
        lt = b.reduce("ReduceMax", _and(b, ltk, before), [2], keepdims=False)     # row j < row i
    first = b.emit1("ArgMax", [b.cast(eq, E.INT8)], axis=1, keepdims=False)      # first occurrence of i's group
    iota = b.const(np.arange(n, dtype=np.int64))
    is_first = b.binary("Equal", first, iota)
    counts = b.reduce("ReduceSum", _i64(b, eq), [1], keepdims=False)
    if int(b.attrs["sorted"]):
        before_i = lt
    else:
        before_i = b.binary("Less", b.reshape(iota, (1, n)), b.reshape(first, (n, 1)))
    rank = b.reduce("ReduceSum", _i64(b, _and(b, before_i, b.reshape(is_first, (1, n)))), [1], keepdims=False)
    total = b.reduce("ReduceSum", _i64(b, is_first), [0], keepdims=False)
    targets = b.where(is_first, rank, b.add(iota, b.scalar(n, I64, 1)))
    indices = _scatter(b, n, -1, targets, iota)
    out_counts = _scatter(b, n, 0, targets, counts)
    valid = b.binary("Less", b.scalar(-1, I64, 1), indices)
    picked = b.emit1("Gather", [rows, b.maximum(indices, b.scalar(0, I64, 1))], axis=0)  # [n, s]
    picked = b.where(b.reshape(valid, (n, 1)), picked, b.scalar(0, x.type.elem, 2))
    if axis == -1:
        values = b.reshape(picked, (n,))
    else:
        moved = b.reshape(picked, tuple(x.type.shape[d] for d in perm))
        values = b.transpose(moved, list(np.argsort(perm)))
    return [values, indices, rank, out_counts, total]


def _corners(b: Builder, boxes: Value, center: bool) -> list[Value]:
    """(y_min, x_min, y_max, x_max), each [B, N], as the reference computes them."""
    bn = boxes.type.shape[:2]
    c = [b.reshape(b.slice(boxes, 2, j, 1), bn) for j in range(4)]
    if center:
        two = b.scalar(2, boxes, 2)
        hw, hh = b.div(c[2], two), b.div(c[3], two)
        return [b.sub(c[1], hh), b.sub(c[0], hw), b.add(c[1], hh), b.add(c[0], hw)]
    return [b.minimum(c[0], c[2]), b.minimum(c[1], c[3]), b.maximum(c[0], c[2]), b.maximum(c[1], c[3])]


def _suppression(b: Builder, corners: list[Value], iou: Value) -> Value:
    """[B, N, N] bool: IoU(box i, box j) > iou, false without overlap or for degenerate boxes."""
    bsz, n = corners[0].type.shape
    ci = [b.reshape(v, (bsz, n, 1)) for v in corners]   # candidate i
    cj = [b.reshape(v, (bsz, 1, n)) for v in corners]   # kept j
    zero = b.scalar(0, corners[0], 3)

    def gt(u: Value, v: Value) -> Value:
        return b.binary("Less", v, u)

    ix_min, ix_max = b.maximum(ci[1], cj[1]), b.minimum(ci[3], cj[3])
    iy_min, iy_max = b.maximum(ci[0], cj[0]), b.minimum(ci[2], cj[2])
    inter = b.mul(b.sub(ix_max, ix_min), b.sub(iy_max, iy_min))
    area_i = b.mul(b.sub(ci[3], ci[1]), b.sub(ci[2], ci[0]))
    area_j = b.mul(b.sub(cj[3], cj[1]), b.sub(cj[2], cj[0]))
    union = b.sub(b.add(area_i, area_j), inter)
    ok = _and(b, gt(ix_max, ix_min), gt(iy_max, iy_min))
    ok = _and(b, ok, gt(inter, zero))
    ok = _and(b, ok, _and(b, gt(area_i, zero), gt(area_j, zero)))
    ok = _and(b, ok, gt(union, zero))
    ratio = b.div(inter, b.where(ok, union, b.scalar(1, corners[0], 3)))
    return _and(b, ok, gt(ratio, iou))


@lowering("NonMaxSuppression")
def _nms(b: Builder, node: Node) -> list[Value] | None:
    boxes, scores = b.input(0), b.input(1)
    iou_op, score_op = b.opt_input(2), b.opt_input(3)
    bsz, ncls, n = scores.type.shape
    k = int(b.attrs["max_per_class"])
    total = bsz * ncls * k
    if n > MAX_UNROLLED or bsz * ncls * n * n > MAX_PAIRWISE:
        return None
    elem = boxes.type.elem
    iou = b.reshape(iou_op, (1, 1, 1)) if iou_op is not None else b.scalar(0, elem, 3)
    supp = _suppression(b, _corners(b, boxes, bool(b.attrs["center_point_box"])), iou)   # [B, N, N]
    sorted_scores, order = b.emit("TopK", [scores], k=n, axis=2, largest=True)          # [B, C, N]
    full = (bsz, ncls, n, n)
    s4 = b.broadcast(b.reshape(supp, (bsz, 1, n, n)), full)
    s4 = b.emit1("GatherElements", [s4, b.broadcast(b.reshape(order, (bsz, ncls, n, 1)), full)], axis=2)
    s4 = b.emit1("GatherElements", [s4, b.broadcast(b.reshape(order, (bsz, ncls, 1, n)), full)], axis=3)
    valid = b.const(np.ones((bsz, ncls, n), np.bool_))
    if score_op is not None:
        valid = b.binary("Less", b.reshape(score_op, (1, 1, 1)), sorted_scores)
    suppressed = b.const(np.zeros((bsz, ncls, n), np.bool_))
    count = b.const(np.zeros((bsz, ncls, 1), np.int64))
    kept = []
    for r in range(n):
        keep = _and(b, _and(b, b.slice(valid, 2, r, 1), _not(b, b.slice(suppressed, 2, r, 1))),
                    b.binary("Less", count, b.scalar(k, I64, 3)))                          # [B, C, 1]
        row = b.reshape(b.slice(s4, 2, r, 1), (bsz, ncls, n))
        suppressed = _or(b, suppressed, _and(b, keep, row))
        count = b.add(count, _i64(b, keep))
        kept.append(keep)
    keep_all = b.reshape(b.concat(kept, 2), (bsz * ncls * n,))
    flat = bsz * ncls * n
    pos = b.emit1("CumSum", [_i64(b, keep_all)], axis=0, exclusive=True, reverse=False)
    targets = b.where(keep_all, pos, b.const(np.arange(total, total + flat, dtype=np.int64)))
    grid = np.stack(np.meshgrid(np.arange(bsz), np.arange(ncls), indexing="ij"), -1).reshape(bsz, ncls, 1, 2)
    bc = b.const(np.broadcast_to(grid, (bsz, ncls, n, 2)).reshape(flat, 2).astype(np.int64))
    rows = b.concat([bc, b.reshape(order, (flat, 1))], 1)                                  # [flat, 3]
    data = b.const(np.full((total + flat, 3), -1, np.int64))
    out = b.emit1("ScatterND", [data, b.reshape(targets, (flat, 1)), rows], reduction="none")
    selected = b.slice(out, 0, 0, total) if total + flat > total else out
    return [selected, b.reduce("ReduceSum", _i64(b, keep_all), [0], keepdims=False)]
