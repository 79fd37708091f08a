"""Softmax over trailing axes, kept un-lowered: three vectorized passes over each row.

``y = exp(x - max(x)) / sum(exp(x - max(x)))`` per row (the trailing axes
flattened): a vector max, then the exponentials (the vectorized ``exp``,
stored into the output for float32 / float64) and their sum, then a division.
The 16-bit floats recompute the exponentials in the last pass so they are
rounded once. Rows are partitioned over the threads. Softmax over other axes
is lowered to primitives.
"""

from __future__ import annotations

import math

from llvmlite import ir

from glow_backend_cpu.emit import ew_math
from glow_backend_cpu.emit.context import EmitContext, Instr, Operand, register_emitter
from glow_backend_cpu.emit.dtypes import FLOATS, NARROW_FLOATS, compute_type, to_compute, to_storage
from glow_backend_cpu.emit.reduce import REDUCERS, hreduce
from glow_backend_cpu.emit.symdims import extent, row_space, sym_axes, unsupported
from glow_backend_cpu.helpers import (
    const_like,
    for_range,
    i64,
    lane_mask,
    masked_vload,
    masked_vstore,
    partition,
    splat,
    vload,
    vstore,
)
from glow_core.ir.graph import Node
from glow_core.ir.types import ElemKind

MIN_PARALLEL = 8192


def _row_axes(rank: int, shape: tuple[int, ...], axes: tuple[int, ...]) -> int | None:
    """The first axis of the rows when ``axes`` are consecutive and only unit axes follow them, else None."""
    ax = sorted(a % max(rank, 1) for a in axes)
    if not ax or ax != list(range(ax[0], ax[-1] + 1)) or math.prod(shape[ax[-1] + 1:]) != 1:
        return None
    return ax[0]


def _trailing(node: Node) -> bool:
    x = node.inputs[0]
    return x is not None and _row_axes(x.type.rank, x.type.shape, node.attrs["axes"]) is not None


def _symbolic_row(b: ir.IRBuilder, x: Operand, first: int) -> ir.Value | None:
    """The valid length of each row when the row's first axis is symbolic (the valid entries are then a
    prefix of the row); None when no row axis is; other symbolic row axes are unsupported."""
    axes = [k for k in sym_axes(x) if k >= first]
    if not axes:
        return None
    if axes != [first]:
        raise unsupported("Softmax", "a symbolic axis of the rows after their first one")
    inner = math.prod(x.type.shape[first + 1:])
    n = extent(b, x, first)
    return n if inner == 1 else b.mul(n, i64(inner))


@register_emitter("Softmax", elems=FLOATS, when=_trailing, symbolic=True,
                  why="softmax over consecutive axes followed by unit axes only")
def _softmax(ctx: EmitContext, instr: Instr) -> None:
    """Symbolic dims: a symbolic first axis of the rows leaves the entries past its valid length out of the
    max and the sum (and unwritten); symbolic leading axes: only the rows that hold data (``row_space``)."""
    x, out = instr.ins[0], instr.outs[0]
    assert x is not None
    b = ctx.builder
    elem = x.type.elem
    r = x.type.rank
    first = _row_axes(r, x.type.shape, instr.attrs["axes"])
    assert first is not None
    n = math.prod(x.type.shape[first:])
    rows = math.prod(x.type.shape[:first])
    if rows == 0 or n == 0:
        return
    nv = _symbolic_row(b, x, first)
    space = row_space(b, x, first)
    ct = compute_type(elem)
    lanes = ctx.target.vector_lanes
    vt = ir.VectorType(ct, lanes)
    size = elem.itemsize
    fmax = REDUCERS["ReduceMax"].combine(ElemKind.FLOAT32 if elem in NARROW_FLOATS else elem)
    nfull, tail_at, tail_mask = _vectors(b, n, nv, lanes)
    store_exp = elem not in NARROW_FLOATS
    with b.goto_entry_block():
        acc = b.alloca(vt)
    start, end = _row_range(ctx, rows if space is None else space.count, x.type.size >= MIN_PARALLEL)
    with for_range(b, start, end, name="row") as row:
        base = b.mul(row if space is None else space.row(b, row), i64(n))

        def load(j: ir.Value, fill: float, tail: bool = False) -> ir.Value:
            if tail:
                assert tail_mask is not None
                v = to_compute(b, masked_vload(b, x.ptr, b.add(base, j), tail_mask, lanes, size), elem)
                return b.select(tail_mask, v, const_like(vt, fill))
            return to_compute(b, vload(b, x.ptr, b.add(base, j), lanes, size), elem)

        # pass 1: the maximum
        b.store(const_like(vt, float("-inf")), acc)
        with for_range(b, 0, nfull, name="m") as j:
            b.store(fmax(b, b.load(acc), load(b.mul(j, i64(lanes)), float("-inf"))), acc)
        if tail_at is not None:
            b.store(fmax(b, b.load(acc), load(tail_at, float("-inf"), True)), acc)
        m = splat(b, hreduce(b, b.load(acc), fmax), lanes)
        # pass 2: the exponentials and their sum
        b.store(const_like(vt, 0.0), acc)
        with for_range(b, 0, nfull, name="e") as j:
            pos = b.mul(j, i64(lanes))
            e = ew_math.exp(b, b.fsub(load(pos, 0.0), m))
            if store_exp:
                vstore(b, e, out.ptr, b.add(base, pos), size)
            b.store(b.fadd(b.load(acc), e), acc)
        if tail_at is not None:
            assert tail_mask is not None
            e = ew_math.exp(b, b.fsub(load(tail_at, 0.0, True), m))
            e = b.select(tail_mask, e, const_like(vt, 0.0))
            if store_exp:
                masked_vstore(b, e, out.ptr, b.add(base, tail_at), tail_mask, size)
            b.store(b.fadd(b.load(acc), e), acc)
        s = splat(b, hreduce(b, b.load(acc), lambda bb, p, q: bb.fadd(p, q)), lanes)

        # pass 3: divide
        def final(pos: ir.Value, mask: ir.Value | None) -> None:
            if store_exp:
                src = masked_vload(b, out.ptr, pos, mask, lanes, size) if mask is not None else \
                    vload(b, out.ptr, pos, lanes, size)
                e = src
            else:
                v = to_compute(b, masked_vload(b, x.ptr, pos, mask, lanes, size) if mask is not None else
                               vload(b, x.ptr, pos, lanes, size), elem)
                e = ew_math.exp(b, b.fsub(v, m))
            y = to_storage(b, b.fdiv(e, s), elem)
            if mask is not None:
                masked_vstore(b, y, out.ptr, pos, mask, size)
            else:
                vstore(b, y, out.ptr, pos, size)

        with for_range(b, 0, nfull, name="d") as j:
            final(b.add(base, b.mul(j, i64(lanes))), None)
        if tail_at is not None:
            final(b.add(base, tail_at), tail_mask)


def _vectors(b: ir.IRBuilder, n: int, nv: ir.Value | None, lanes: int
             ) -> tuple[int | ir.Value, ir.Value | None, ir.Value | None]:
    """(full vectors of a row, where its partial tail starts, the tail's lane mask; both None without a tail)
    for rows of ``n`` entries, or ``nv`` valid ones (a run-time tail, possibly without a lane on)."""
    if nv is None:
        nfull, tail = divmod(n, lanes)
        return nfull, i64(nfull * lanes) if tail else None, lane_mask(b, i64(tail), lanes) if tail else None
    nfull_v = b.udiv(nv, i64(lanes))
    return nfull_v, b.mul(nfull_v, i64(lanes)), lane_mask(b, b.urem(nv, i64(lanes)), lanes)


def _row_range(ctx: EmitContext, rows: int | ir.Value, parallel: bool) -> tuple[ir.Value, ir.Value]:
    """This thread's rows: a share of them, or all on one thread when the tensor is small."""
    b = ctx.builder
    total = i64(rows) if isinstance(rows, int) else rows
    if parallel:
        return partition(b, total, ctx.tid, ctx.nthreads)
    start, end = partition(b, 1, ctx.tid, ctx.nthreads)
    return b.mul(start, total), b.mul(end, total)
