"""Reductions: ReduceSum / ReduceMax / ReduceMin / ReduceProd (vectorized), ArgMax / ArgMin.

The input's axes are coalesced into alternating groups of kept and reduced
axes (``[kept, reduced, kept, ...]``). Two loop shapes, both vectorized:

- the innermost group is reduced (a row reduction, e.g. over the last axis):
  each output element accumulates its rows in a vector, lanes reduced at the
  end (a tree of shuffles); the output elements are partitioned over threads;
- the innermost group is kept (e.g. a reduction over channels of NCHW): a
  vector of neighbouring output elements accumulates over every reduced
  index; blocks of outputs are partitioned over threads.

Accumulation happens in the compute type (float32 for the 16-bit floats,
rounded once at the end; integers wrap in their own width); Max / Min
propagate NaN like numpy; an empty reduction gives the identity (0, 1, the
lowest or the highest value).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llvmlite import ir

from glow_backend_cpu.emit.context import EmitContext, Instr, Operand, register_emitter
from glow_backend_cpu.emit.dtypes import FLOATS, UNSIGNED, compute_type, is_float, to_compute, to_storage
from glow_backend_cpu.emit.ew_ops import INTS
from glow_backend_cpu.emit.symdims import valid_rows
from glow_backend_cpu.helpers import (
    I32,
    I64,
    const_like,
    elem_ptr,
    for_range,
    i64,
    lane_mask,
    masked_vload,
    masked_vstore,
    partition,
    smin,
    splat,
    vload,
    vstore,
)
from glow_core.ir.types import ElemKind

E = ElemKind
Combine = Callable[[ir.IRBuilder, ir.Value, ir.Value], ir.Value]

MIN_PARALLEL = 8192


@dataclass(frozen=True)
class Reducer:
    combine: Callable[[ElemKind], Combine]
    identity: Callable[[ElemKind], float | int | bool]


def _sum(e: ElemKind) -> Combine:
    if e is E.BOOL:
        return lambda b, x, y: b.or_(x, y)
    return (lambda b, x, y: b.fadd(x, y)) if is_float(e) else (lambda b, x, y: b.add(x, y))


def _prod(e: ElemKind) -> Combine:
    if e is E.BOOL:
        return lambda b, x, y: b.and_(x, y)
    return (lambda b, x, y: b.fmul(x, y)) if is_float(e) else (lambda b, x, y: b.mul(x, y))


def _minmax(greater: bool) -> Callable[[ElemKind], Combine]:
    def make(e: ElemKind) -> Combine:
        if e is E.BOOL:
            return (lambda b, x, y: b.or_(x, y)) if greater else (lambda b, x, y: b.and_(x, y))
        if is_float(e):
            def f(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
                r = b.select(b.fcmp_ordered(">=" if greater else "<=", x, y), x, y)
                return b.select(b.fcmp_unordered("uno", x, x), x, r)
            return f
        cmp = "icmp_unsigned" if e in UNSIGNED else "icmp_signed"
        return lambda b, x, y: b.select(getattr(b, cmp)(">" if greater else "<", x, y), x, y)
    return make


def lowest(e: ElemKind) -> float | int | bool:
    if e is E.BOOL:
        return False
    if is_float(e):
        return float("-inf")
    bits = 8 * e.itemsize
    return 0 if e in UNSIGNED else -(1 << (bits - 1))


def highest(e: ElemKind) -> float | int | bool:
    if e is E.BOOL:
        return True
    if is_float(e):
        return float("inf")
    bits = 8 * e.itemsize
    return (1 << bits) - 1 if e in UNSIGNED else (1 << (bits - 1)) - 1


REDUCERS: dict[str, Reducer] = {
    "ReduceSum": Reducer(_sum, lambda e: 0),
    "ReduceProd": Reducer(_prod, lambda e: 1),
    "ReduceMax": Reducer(_minmax(True), lowest),
    "ReduceMin": Reducer(_minmax(False), highest),
}


def groups(shape: Sequence[int], axes: Sequence[int]) -> list[tuple[int, bool, int]]:
    """(size, reduced, element stride) of the coalesced groups of a contiguous input."""
    dims = [(s, d in axes) for d, s in enumerate(shape) if s != 1]
    merged: list[list] = []
    for s, red in dims:
        if merged and merged[-1][1] == red:
            merged[-1][0] *= s
        else:
            merged.append([s, red])
    out: list[tuple[int, bool, int]] = []
    stride = 1
    for s, red in reversed(merged):
        out.append((s, red, stride))
        stride *= s
    return list(reversed(out))


def sym_groups(b: ir.IRBuilder, x: Operand, axes: Sequence[int]) -> list[tuple[int | ir.Value, bool, int]]:
    """:func:`groups` of an operand with symbolic axes: a symbolic axis is a group of its own, whose size is
    the run's extent (a reduction then only combines valid entries; a kept symbolic axis is visited whole)."""
    shape, sym = x.type.shape, x.type.sym or (None,) * x.type.rank
    merged: list[list] = []
    for d, size in enumerate(shape):
        if size == 1:
            continue
        red, symbolic = d in axes, sym[d] is not None and x.valid is not None
        if merged and merged[-1][1] == red and not symbolic and merged[-1][3] is None:
            merged[-1][0] *= size
        else:
            merged.append([size, red, 1, d if symbolic else None])
    out: list[tuple[int | ir.Value, bool, int]] = []
    stride = 1
    for size, red, _, axis in reversed(merged):
        valid = size
        if axis is not None and red:
            v = x.extent(axis)
            valid = v if isinstance(v, int) else b.select(b.icmp_signed("<", v, i64(size)), v, i64(size))
        out.append((valid, red, stride))
        stride *= size
    return list(reversed(out))


def hreduce(b: ir.IRBuilder, v: ir.Value, combine: Combine) -> ir.Value:
    """Combine the lanes of a vector into a scalar (a tree of shuffles)."""
    n = v.type.count
    while n > 1:
        half = n // 2
        lo = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, half), list(range(half))))
        hi = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, half), list(range(half, n))))
        v = combine(b, lo, hi)
        n = half
    return b.extract_element(v, ir.Constant(I32, 0))


def _offset(b: ir.IRBuilder, index: ir.Value, dims: Sequence[tuple[int, int]]) -> ir.Value:
    """Element offset of flat index ``index`` over ``dims`` = [(size, stride)], innermost last."""
    off = i64(0)
    rem = index
    for n, (size, stride) in enumerate(reversed(dims)):
        last = n == len(dims) - 1
        idx = rem if last else b.urem(rem, i64(size))
        if not last:
            rem = b.udiv(rem, i64(size))
        off = b.add(off, b.mul(idx, i64(stride)))
    return off


def _nested(b: ir.IRBuilder, dims: Sequence[tuple[int | ir.Value, int]], base: ir.Value,
            body: Callable[[ir.Value], None]) -> None:
    """Call ``body(offset)`` for every index of ``dims`` = [(size, stride)] from ``base``."""
    if not dims:
        body(base)
        return
    size, stride = dims[0]
    with for_range(b, 0, size, name="red") as k:
        _nested(b, dims[1:], b.add(base, b.mul(k, i64(stride))), body)


def emit_reduce(ctx: EmitContext, instr: Instr) -> None:
    """Symbolic dims: a reduced symbolic axis combines only its valid entries (:func:`sym_groups`); of kept
    symbolic axes only the outputs that hold data are computed when they are a prefix of the output, else
    all (``_share``)."""
    x, out = instr.ins[0], instr.outs[0]
    assert x is not None
    red = REDUCERS[instr.kind]
    elem = x.type.elem
    n_out = out.type.size
    if n_out == 0:
        return
    b = ctx.builder
    combine = red.combine(elem)
    ct = compute_type(elem)
    ident = const_like(ct, red.identity(elem))
    axes = [a % max(x.type.rank, 1) for a in instr.attrs["axes"]]
    symbolic = any(x.type.sym[a] is not None for a in axes) if x.valid is not None and x.type.sym else False
    gs: list[tuple[int | ir.Value, bool, int]] = []
    if x.type.size:
        gs = sym_groups(b, x, axes) if symbolic else list(groups(x.type.shape, axes))
    kept = [(s, st) for s, r, st in gs if not r]  # (sizes: ints, a kept axis is never a run's extent)
    reduced = [(s, st) for s, r, st in gs if r]
    lanes = ctx.target.vector_lanes
    work = x.type.size
    if x.type.size == 0 or not reduced:
        # nothing to reduce over (empty input: the identity; no reduced axes: a copy through combine)
        _scalar_reduce(ctx, x.ptr, out.ptr, elem, out.type.elem, kept, reduced, combine, ident, n_out, work)
        return
    valid = valid_rows(b, out, out.type.rank)  # the outputs that hold data, when a prefix
    if gs[-1][1]:  # innermost group reduced: rows
        inner_n, _, _ = gs[-1]
        outer_red = reduced[:-1]
        start, end = _share(ctx, n_out, work >= MIN_PARALLEL, valid)
        vt = ir.VectorType(ct, lanes)
        with for_range(b, start, end, name="o") as o:
            base = _offset(b, o, kept) if kept else i64(0)
            acc = _accumulate_rows(ctx, x, elem, outer_red, base, inner_n, combine, ident, vt)
            r = hreduce(b, acc, combine)
            b.store(to_storage(b, r, out.type.elem), elem_ptr(b, out.ptr, o))
        return
    _reduce_kept_inner(ctx, x, out, gs, kept, reduced, combine, ident, valid)


def _share(ctx: EmitContext, items: int, parallel: bool, valid: ir.Value | None) -> tuple[ir.Value, ir.Value]:
    """This thread's items ``[start, end)`` of ``items`` (all on thread 0 unless ``parallel``); with
    ``valid``, only the first ``valid`` of them."""
    b = ctx.builder
    total = i64(items) if valid is None else smin(b, valid, i64(items))
    if parallel:
        return partition(b, total, ctx.tid, ctx.nthreads)
    start, end = partition(b, 1, ctx.tid, ctx.nthreads)
    return b.mul(start, total), b.mul(end, total)


def _reduce_kept_inner(ctx: EmitContext, x: Operand, out: Operand, gs: Sequence[tuple[int | ir.Value, bool, int]],
                       kept: list, reduced: list, combine: Combine, ident: ir.Value,  # type: ignore[type-arg]
                       valid: ir.Value | None) -> None:
    """The innermost group kept: a vector of neighbouring outputs accumulates over every reduced index
    (``valid``: the outputs that hold data, a prefix)."""
    b, elem, lanes = ctx.builder, x.type.elem, ctx.target.vector_lanes
    inner_n, _, _ = gs[-1]
    assert isinstance(inner_n, int)
    outer_kept = kept[:-1]
    rows = math.prod(s for s, _ in outer_kept)
    nblk = -(-inner_n // lanes)
    blocks = None
    if valid is not None:  # the vectors that start inside the prefix
        rest = b.udiv(b.add(b.urem(valid, i64(inner_n)), i64(lanes - 1)), i64(lanes))
        blocks = b.add(b.mul(b.udiv(valid, i64(inner_n)), i64(nblk)), rest)
    start, end = _share(ctx, rows * nblk, x.type.size >= MIN_PARALLEL, blocks)
    vt = ir.VectorType(compute_type(elem), lanes)
    with for_range(b, start, end, name="w") as w:
        r = b.udiv(w, i64(nblk))
        c = b.mul(b.urem(w, i64(nblk)), i64(lanes))
        base = _offset(b, r, outer_kept) if outer_kept else i64(0)
        n_left = b.sub(i64(inner_n), c)
        mask = lane_mask(b, n_left, lanes)
        full = b.icmp_signed(">=", n_left, i64(lanes))
        with b.goto_entry_block():
            slot = b.alloca(vt)
        b.store(splat(b, ident, lanes), slot)

        def body(off: ir.Value) -> None:
            idx = b.add(b.add(base, off), c)
            with b.if_else(full, likely=True) as (then, other):
                with then:
                    v = to_compute(b, vload(b, x.ptr, idx, lanes, x.type.elem.itemsize), elem)
                    b.store(combine(b, b.load(slot), v), slot)
                with other:
                    v = to_compute(b, masked_vload(b, x.ptr, idx, mask, lanes, x.type.elem.itemsize), elem)
                    v = b.select(mask, v, splat(b, ident, lanes))
                    b.store(combine(b, b.load(slot), v), slot)

        _nested(b, reduced, i64(0), body)
        res = to_storage(b, b.load(slot), out.type.elem)
        oidx = b.add(b.mul(r, i64(inner_n)), c)
        with b.if_else(full, likely=True) as (then, other):
            with then:
                vstore(b, res, out.ptr, oidx, out.type.elem.itemsize)
            with other:
                masked_vstore(b, res, out.ptr, oidx, mask, out.type.elem.itemsize)


def _accumulate_rows(ctx: EmitContext, x, elem: ElemKind, outer_red, base: ir.Value,  # type: ignore[no-untyped-def]
                     n: int | ir.Value, combine: Combine, ident: ir.Value, vt: ir.VectorType) -> ir.Value:
    """A vector accumulator over the rows of one output element (memory slot, promoted by LLVM); a run-time
    ``n`` (a symbolic axis) always takes the masked tail (no lane on when it is empty)."""
    b = ctx.builder
    lanes = vt.count
    with b.goto_entry_block():
        slot = b.alloca(vt)
    b.store(splat(b, ident, lanes), slot)
    nfull: int | ir.Value
    tail: int | ir.Value
    if isinstance(n, int):
        nfull = n // lanes
        tail = n - nfull * lanes
    else:
        nfull, tail = b.udiv(n, i64(lanes)), b.urem(n, i64(lanes))

    def row(off: ir.Value) -> None:
        start = b.add(base, off)
        with for_range(b, 0, nfull, name="v") as j:
            v = to_compute(b, vload(b, x.ptr, b.add(start, b.mul(j, i64(lanes))), lanes, elem.itemsize), elem)
            b.store(combine(b, b.load(slot), v), slot)
        if not isinstance(tail, int) or tail:
            mask = lane_mask(b, i64(tail) if isinstance(tail, int) else tail, lanes)
            at = i64(nfull * lanes) if isinstance(nfull, int) else b.mul(nfull, i64(lanes))
            v = to_compute(b, masked_vload(b, x.ptr, b.add(start, at), mask, lanes, elem.itemsize), elem)
            v = b.select(mask, v, splat(b, ident, lanes))
            b.store(combine(b, b.load(slot), v), slot)

    _nested(b, outer_red, i64(0), row)
    return b.load(slot)


def _scalar_reduce(ctx: EmitContext, xp: ir.Value, op: ir.Value, elem: ElemKind, out_elem: ElemKind,
                   kept, reduced, combine: Combine, ident: ir.Value, n_out: int, work: int) -> None:  # type: ignore[no-untyped-def]
    b = ctx.builder
    items = n_out if work >= MIN_PARALLEL else 1
    start, end = partition(b, items, ctx.tid, ctx.nthreads)
    per = n_out // items
    with for_range(b, b.mul(start, i64(per)), b.mul(end, i64(per)), name="o") as o:
        base = _offset(b, o, kept) if kept else i64(0)
        with b.goto_entry_block():
            slot = b.alloca(ident.type)
        b.store(ident, slot)

        def body(off: ir.Value) -> None:
            v = to_compute(b, b.load(elem_ptr(b, xp, b.add(base, off))), elem)
            b.store(combine(b, b.load(slot), v), slot)

        if work:
            _nested(b, reduced, i64(0), body)
        b.store(to_storage(b, b.load(slot), out_elem), elem_ptr(b, op, o))


NUM = FLOATS | INTS
for _k in ("ReduceSum", "ReduceProd"):
    register_emitter(_k, elems=NUM, symbolic=True)(emit_reduce)
for _k in ("ReduceMax", "ReduceMin"):
    register_emitter(_k, elems=NUM | {E.BOOL}, symbolic=True)(emit_reduce)


# -- ArgMax / ArgMin ---------------------------------------------------------------------------------

def emit_arg(ctx: EmitContext, instr: Instr) -> None:
    """First (or last) index of the largest / smallest value along ``axis``; NaN counts as the extreme."""
    x, out = instr.ins[0], instr.outs[0]
    assert x is not None
    b = ctx.builder
    elem = x.type.elem
    shape = x.type.shape
    axis = instr.attrs["axis"] % max(len(shape), 1)
    n = shape[axis] if shape else 1
    inner = math.prod(shape[axis + 1:])
    outer = math.prod(shape[:axis])
    n_out = outer * inner
    if n_out == 0 or n == 0:
        return
    greater = instr.kind == "ArgMax"
    last = bool(instr.attrs["select_last_index"])
    count: int | ir.Value = n
    if x.valid is not None and x.type.sym is not None and x.type.sym[axis] is not None:
        v = x.extent(axis)  # a symbolic axis: only its valid entries compete
        count = v if isinstance(v, int) else b.select(b.icmp_signed("<", v, i64(n)), v, i64(n))
    items = n_out if x.type.size >= MIN_PARALLEL else 1
    start, end = partition(b, items, ctx.tid, ctx.nthreads)
    per = n_out // items
    with for_range(b, b.mul(start, i64(per)), b.mul(end, i64(per)), name="o") as o:
        base = b.add(b.mul(b.udiv(o, i64(inner)), i64(n * inner)), b.urem(o, i64(inner)))
        with b.goto_entry_block():
            best = b.alloca(compute_type(elem))
            best_i = b.alloca(I64)
        b.store(to_compute(b, b.load(elem_ptr(b, x.ptr, base)), elem), best)
        b.store(i64(0), best_i)
        with for_range(b, 1, count, name="k") as k:
            v = to_compute(b, b.load(elem_ptr(b, x.ptr, b.add(base, b.mul(k, i64(inner))))), elem)
            cur = b.load(best)
            if is_float(elem):
                cur_nan = b.fcmp_unordered("uno", cur, cur)
                v_nan = b.fcmp_unordered("uno", v, v)
                pred = (">=" if last else ">") if greater else ("<=" if last else "<")
                better = b.fcmp_ordered(pred, v, cur)
                take = b.or_(b.and_(v_nan, b.not_(cur_nan)), b.and_(better, b.not_(cur_nan)))
                if last:
                    take = b.or_(take, b.and_(v_nan, cur_nan))
            else:
                cmp = b.icmp_unsigned if elem in UNSIGNED or elem is E.BOOL else b.icmp_signed
                pred = (">=" if last else ">") if greater else ("<=" if last else "<")
                take = cmp(pred, v, cur)
            b.store(b.select(take, v, cur), best)
            b.store(b.select(take, k, b.load(best_i)), best_i)
        b.store(b.load(best_i), elem_ptr(b, out.ptr, o))


register_emitter("ArgMax", "ArgMin", elems=NUM | {E.INT64}, symbolic=True)(emit_arg)

__all__ = ["REDUCERS", "emit_arg", "emit_reduce", "groups", "hreduce"]
