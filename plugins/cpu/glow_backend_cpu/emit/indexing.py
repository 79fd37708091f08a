"""Indexing kinds: Gather, ScatterND, TopK.

Indices are checked at run time: a negative index counts from the end of its
axis; one outside ``[-dim, dim)`` sets the module's error flag
(``sync.set_error``, with the kernel's code, which the layout maps to the node) and is
clamped, so the kernel never touches memory outside its operands, and the runtime raises an
IndexRangeError naming the node after the run (the interpreter raises for the same inputs).
"""

from __future__ import annotations

import math

from llvmlite import ir

from glow_backend_cpu.emit.context import EmitContext, Instr, Operand, register_emitter
from glow_backend_cpu.emit.dtypes import UNSIGNED, bits_type, compute_type, is_float, to_compute, to_storage
from glow_backend_cpu.emit.ew_ops import ALL, NUMERIC
from glow_backend_cpu.emit.gather_const import emit_gather_const
from glow_backend_cpu.emit.movement import contiguous_strides
from glow_backend_cpu.emit.reduce import REDUCERS
from glow_backend_cpu.emit.symdims import extent, is_sym, sym_axes, valid_rows
from glow_backend_cpu.helpers import I8P, I64, elem_ptr, for_range, i64, memcpy, partition, unravel
from glow_backend_cpu.sync import set_error
from glow_core.ir.graph import Node
from glow_core.ir.types import ALL_KINDS, ElemKind

E = ElemKind
MIN_PARALLEL = 8192


def load_index(ctx: EmitContext, ptr: ir.Value, pos: ir.Value, elem: ElemKind, dim: int | ir.Value,
               live: ir.Value | None = None) -> ir.Value:
    """``indices[pos]`` as an i64 in ``[0, dim)``: negatives wrap once; out of range -> error flag, 0.
    ``dim`` may be a run's extent (a symbolic axis); ``live`` false: a padding index, 0 and never flagged."""
    b = ctx.builder
    dimv = i64(dim) if isinstance(dim, int) else dim
    raw = b.load(elem_ptr(b, ptr, pos))
    v = b.zext(raw, I64) if elem in UNSIGNED else (b.sext(raw, I64) if raw.type.width < 64 else raw)
    if elem not in UNSIGNED:
        v = b.select(b.icmp_signed("<", v, i64(0)), b.add(v, dimv), v)
    bad = b.icmp_unsigned(">=", v, dimv)  # also negative after wrapping
    if live is not None:
        v = b.select(live, v, i64(0))
        bad = b.and_(bad, live)
    ctx.checks_indices = True
    with b.if_then(bad, likely=False):
        set_error(b, ctx.error_code)
    return b.select(bad, i64(0), v)


def _copy_elems(b: ir.IRBuilder, dst: ir.Value, src: ir.Value, n: int, size: int) -> None:
    if n * size >= 64:
        memcpy(b, dst, src, n * size)
        return
    for j in range(n):
        b.store(b.load(elem_ptr(b, src, j)), elem_ptr(b, dst, j))


def _live_index(b: ir.IRBuilder, idx: Operand, j: ir.Value) -> ir.Value | None:
    """Whether index ``j`` (flat, over the indices' bound layout) is one a run holds (None: every one is)."""
    axes = sym_axes(idx)
    if not axes:
        return None
    live: ir.Value = ir.Constant(ir.IntType(1), 1)
    coords = unravel(b, j, idx.type.shape)
    for k in axes:
        live = b.and_(live, b.icmp_signed("<", coords[k], extent(b, idx, k)))
    return live


@register_emitter("Gather", elems=frozenset(ALL_KINDS), symbolic=True)
def _gather(ctx: EmitContext, instr: Instr) -> None:
    """Symbolic dims: a symbolic gathered axis wraps and checks the indices against the run's extent; with
    symbolic indices only the output rows that hold data are copied when they are a prefix, and elsewhere a
    padding index is never checked (it copies row 0); other symbolic axes are copied whole."""
    data, idx = instr.ins[0], instr.ins[1]
    out = instr.outs[0]
    assert data is not None and idx is not None
    if emit_gather_const(ctx, instr):  # constant in-range indices on the last axis (Resize tables)
        return
    b = ctx.builder
    axis = instr.attrs["axis"] % max(data.type.rank, 1)
    shape = data.type.shape
    outer, dim, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    n_idx = idx.type.size
    rows = outer * n_idx
    if rows == 0 or inner == 0:
        return
    elem = data.type.elem
    bt = bits_type(elem)
    src = b.bitcast(data.ptr, bt.as_pointer())
    dst = b.bitcast(out.ptr, bt.as_pointer())
    items = rows if out.type.size >= MIN_PARALLEL else 1
    per = rows // items
    vrows = valid_rows(b, out, axis + idx.type.rank)
    if vrows is None:
        start, end = partition(b, items, ctx.tid, ctx.nthreads)
        start, end = b.mul(start, i64(per)), b.mul(end, i64(per))
    else:
        start, end = partition(b, vrows if items > 1 else i64(1), ctx.tid, ctx.nthreads)
        if items == 1:
            start, end = b.mul(start, vrows), b.mul(end, vrows)
    dimv = extent(b, data, axis) if is_sym(data, axis) else dim
    with for_range(b, start, end, name="row") as r:
        o = b.udiv(r, i64(n_idx))
        j = b.urem(r, i64(n_idx))
        k = load_index(ctx, idx.ptr, j, idx.type.elem, dimv, _live_index(b, idx, j))
        s = b.mul(b.add(b.mul(o, i64(dim)), k), i64(inner))
        _copy_elems(b, elem_ptr(b, dst, b.mul(r, i64(inner))), elem_ptr(b, src, s), inner, elem.itemsize)


def _scatter_ok(node: Node) -> bool:
    data = node.inputs[0]
    red = node.attrs["reduction"]
    if data is None or red not in ("none", "add", "mul", "max", "min"):
        return False
    return red == "none" or data.type.elem in NUMERIC


_SCATTER_KINDS = {"add": "ReduceSum", "mul": "ReduceProd", "max": "ReduceMax", "min": "ReduceMin"}


@register_emitter("ScatterND", elems=frozenset(ALL), when=_scatter_ok,
                  why="reduction none/add/mul/max/min (the reductions on numeric kinds)")
def _scatter_nd(ctx: EmitContext, instr: Instr) -> None:
    """Thread 0 copies Data (unless computed in place) and applies the updates in order."""
    data, idx, upd = instr.ins
    out = instr.outs[0]
    assert data is not None and idx is not None and upd is not None
    b = ctx.builder
    elem = data.type.elem
    k = idx.type.shape[-1] if idx.type.rank else 0
    m = math.prod(idx.type.shape[:-1]) if idx.type.rank else 1
    dshape = data.type.shape
    strides = contiguous_strides(dshape)
    slice_n = math.prod(dshape[k:])
    red = instr.attrs["reduction"]
    with b.if_then(b.icmp_signed("==", ctx.tid, i64(0))):
        if data.type.nbytes:
            same = b.icmp_unsigned("==", b.ptrtoint(out.ptr, I64), b.ptrtoint(data.ptr, I64))
            with b.if_then(b.not_(same)):
                memcpy(b, out.ptr, data.ptr, data.type.nbytes)
        if m == 0 or slice_n == 0:
            return
        with for_range(b, 0, m, name="u") as j:
            off = i64(0)
            for t in range(k):
                it = load_index(ctx, idx.ptr, b.add(b.mul(j, i64(k)), i64(t)), idx.type.elem, dshape[t])
                off = b.add(off, b.mul(it, i64(strides[t]) if t < len(strides) else i64(1)))
            with for_range(b, 0, slice_n, name="e") as e:
                up = b.load(elem_ptr(b, upd.ptr, b.add(b.mul(j, i64(slice_n)), e)))
                dp = elem_ptr(b, out.ptr, b.add(off, e))
                if red == "none":
                    b.store(up, dp)
                else:
                    combine = REDUCERS[_SCATTER_KINDS[red]].combine(elem)
                    v = combine(b, to_compute(b, b.load(dp), elem), to_compute(b, up, elem))
                    b.store(to_storage(b, v, elem), dp)


def _better(b: ir.IRBuilder, x: ir.Value, y: ir.Value, elem: ElemKind, largest: bool) -> ir.Value:
    """Does ``x`` come before ``y`` in TopK order (NaN is the largest value)?"""
    if not largest:
        x, y = y, x
    if is_float(elem):
        xn = b.fcmp_unordered("uno", x, x)
        yn = b.fcmp_unordered("uno", y, y)
        return b.or_(b.and_(xn, b.not_(yn)), b.fcmp_ordered(">", x, y))
    cmp = b.icmp_unsigned if elem in UNSIGNED or elem is E.BOOL else b.icmp_signed
    return cmp(">", x, y)


@register_emitter("TopK", elems=frozenset(NUMERIC | {E.INT64}))
def _topk(ctx: EmitContext, instr: Instr) -> None:
    """Per line: insertion into a sorted buffer of k (stable: equal values keep increasing indices)."""
    x = instr.ins[0]
    vals, inds = instr.outs
    assert x is not None
    b = ctx.builder
    elem = x.type.elem
    shape = x.type.shape
    axis = instr.attrs["axis"] % max(len(shape), 1)
    kk = instr.attrs["k"]
    largest = bool(instr.attrs["largest"])
    n, inner, outer = shape[axis], math.prod(shape[axis + 1:]), math.prod(shape[:axis])
    lines = outer * inner
    if lines == 0 or kk == 0:
        return
    ct = compute_type(elem)
    buf_v = b.bitcast(ctx.scratch(8 * kk), ct.as_pointer())
    buf_i = b.bitcast(ctx.scratch(8 * kk), I64.as_pointer())
    items = lines if x.type.size >= MIN_PARALLEL else 1
    per = lines // items
    start, end = partition(b, items, ctx.tid, ctx.nthreads)
    with b.goto_entry_block():
        cnt_p = b.alloca(I64)
        pos_p = b.alloca(I64)
    with for_range(b, b.mul(start, i64(per)), b.mul(end, i64(per)), name="line") as ln:
        base = b.add(b.mul(b.udiv(ln, i64(inner)), i64(n * inner)), b.urem(ln, i64(inner)))
        b.store(i64(0), cnt_p)
        with for_range(b, 0, n, name="i") as i:
            v = to_compute(b, b.load(elem_ptr(b, x.ptr, b.add(base, b.mul(i, i64(inner))))), elem)
            cnt = b.load(cnt_p)
            full = b.icmp_signed(">=", cnt, i64(kk))
            last = b.load(elem_ptr(b, buf_v, b.select(full, i64(kk - 1), i64(0))))
            enter = b.or_(b.not_(full), _better(b, v, last, elem, largest))
            with b.if_then(enter):
                b.store(b.select(full, i64(kk - 1), cnt), pos_p)
                # shift the worse entries one place down
                shift = b.append_basic_block("shift")
                place = b.append_basic_block("place")
                move = b.append_basic_block("move")
                b.branch(shift)
                b.position_at_end(shift)
                p = b.load(pos_p)
                has_prev = b.icmp_signed(">", p, i64(0))
                prev_i = b.select(has_prev, b.sub(p, i64(1)), i64(0))
                prev = b.load(elem_ptr(b, buf_v, prev_i))
                b.cbranch(b.and_(has_prev, _better(b, v, prev, elem, largest)), move, place)
                b.position_at_end(move)
                b.store(prev, elem_ptr(b, buf_v, p))
                b.store(b.load(elem_ptr(b, buf_i, prev_i)), elem_ptr(b, buf_i, p))
                b.store(prev_i, pos_p)
                b.branch(shift)
                b.position_at_end(place)
                p = b.load(pos_p)
                b.store(v, elem_ptr(b, buf_v, p))
                b.store(i, elem_ptr(b, buf_i, p))
                b.store(b.select(full, cnt, b.add(cnt, i64(1))), cnt_p)
        obase = b.add(b.mul(b.udiv(ln, i64(inner)), i64(kk * inner)), b.urem(ln, i64(inner)))
        with for_range(b, 0, min(kk, n), name="j") as j:
            o = b.add(obase, b.mul(j, i64(inner)))
            b.store(to_storage(b, b.load(elem_ptr(b, buf_v, j)), elem), elem_ptr(b, vals.ptr, o))
            b.store(b.load(elem_ptr(b, buf_i, j)), elem_ptr(b, inds.ptr, o))


__all__ = ["I8P", "load_index"]
