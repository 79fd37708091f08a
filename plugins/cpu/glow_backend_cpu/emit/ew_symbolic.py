"""Element-wise chains over the valid entries of an output whose valid entries are no prefix of its elements.

``elementwise.emit_chain`` handles a fixed output and one whose valid entries are a leading prefix. Here
(say ``[1, 12, s, s]`` or ``[1, 12, 1, past + 1]``) the loop runs over the output's rows (every axis but the
last) that hold data, enumerated densely (``symdims.row_space``), and along each row over the valid length
of the last axis, in vectors with a masked tail. Each operand's row offset comes from the row's coordinates
and the operand's broadcast strides (no coalescing: a few integer operations per row).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from llvmlite import ir

from glow_backend_cpu.emit.context import EmitContext, Operand
from glow_backend_cpu.emit.symdims import extent, row_space
from glow_backend_cpu.helpers import for_range, i64, lane_mask, partition, unravel

#: below this many (bound) output elements the rows run on one thread
MIN_PARALLEL_ELEMS = 4096

#: (builder, operands' row offsets) -> the per-row values of the externals constant along the row
RowFn = Callable[[ir.IRBuilder, list[ir.Value]], Any]


def wants_rows(out: Operand) -> bool:
    """True when ``out`` has symbolic axes, and more than one axis (the row loop then pays)."""
    return out.valid is not None and out.type.rank >= 2 and out.type.size > 0


def emit_rows(ctx: EmitContext, out: Operand, strides: Sequence[Sequence[int]], lanes: int,
              vector: Callable[[ir.IRBuilder, list[ir.Value], ir.Value, int, ir.Value | None, Any], None],
              row_values: RowFn) -> None:
    """Loop over the valid rows of ``out`` and the valid columns of each: ``strides`` per operand (``[out,
    ext0, ...]``, broadcast strides over the output's axes); ``row_values(builder, offsets)`` once per row,
    ``vector(builder, offsets, column, lanes, mask, row values)`` per vector (``mask``: a partial tail)."""
    b = ctx.builder
    rank = out.type.rank
    dims = out.type.shape[:-1]
    space = row_space(b, out, rank - 1)
    count = space.count if space is not None else i64(math.prod(dims))
    n = extent(b, out, -1)
    if out.type.size >= MIN_PARALLEL_ELEMS:
        start, end = partition(b, count, ctx.tid, ctx.nthreads)
    else:
        start, end = partition(b, 1, ctx.tid, ctx.nthreads)
        start, end = b.mul(start, count), b.mul(end, count)
    n_lanes = lanes if out.type.shape[-1] > 1 else 1
    with for_range(b, start, end, name="srow") as r:
        row = space.row(b, r) if space is not None else r
        coords = unravel(b, row, dims)
        offs: list[ir.Value] = []
        for st in strides:
            off: ir.Value = i64(0)
            for c, s in zip(coords, st[:-1]):
                if s:
                    off = b.add(off, b.mul(c, i64(s)))
            offs.append(off)
        vals = row_values(b, offs)
        nfull = b.udiv(n, i64(n_lanes))
        with for_range(b, 0, nfull, name="svec") as j:
            vector(b, offs, b.mul(j, i64(n_lanes)), n_lanes, None, vals)
        if n_lanes > 1:
            tail = b.sub(n, b.mul(nfull, i64(n_lanes)))
            with b.if_then(b.icmp_signed(">", tail, i64(0))):
                vector(b, offs, b.mul(nfull, i64(n_lanes)), n_lanes, lane_mask(b, tail, n_lanes), vals)


__all__ = ["emit_rows", "wants_rows"]
