"""Gather with compile-time constant indices (the tables the Resize lowering emits).

``glow_core.lowering.rules.movement_resize`` turns a Resize into one Gather per resized axis whose
indices are a constant table of source positions; the generic Gather (``emit/indexing.py``) reads and
checks an index and divides the row number for every output row, which for the last axis (one element
per row) is most of the cost of a nearest upsampling. Here the indices are wrapped and checked once, at
compile time (a table with an index out of range is left to the generic kernel, which flags it at run
time as the interpreter raises), and the kernel is, per row of the axes before ``axis``:

``dst[j] = src[table[j]]`` over the table, with no division and no check; a table that is a
whole-number repetition (``table[j] = j // r``: nearest upsampling by an integer factor with
asymmetric coordinates) reads each source element once and stores it ``r`` times. Only the last
gathered axis (``inner == 1``: one element per table entry) takes this path; with ``inner > 1`` the
generic kernel copies rows of ``inner`` elements, where the per-row index work does not count.

Rows are split between threads when the output has at least ``MIN_PARALLEL`` elements. With symbolic dims
only the rows that hold data run when they are a prefix of the rows (a symbolic gathered axis takes the
generic kernel, which checks the indices against the run's extent).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from glow_backend_cpu.emit.context import EmitContext, Instr
from glow_backend_cpu.emit.symdims import valid_rows
from glow_backend_cpu.emit.dtypes import bits_type
from glow_backend_cpu.helpers import elem_ptr, for_range, i64, partition

#: output elements from which the rows are split between threads (as the generic Gather)
MIN_PARALLEL = 8192


def constant_table(instr: Instr) -> np.ndarray | None:
    """The wrapped indices as int64 when they are a compile-time constant all inside the axis, else None."""
    data, idx = instr.ins[0], instr.ins[1]
    if data is None or idx is None or idx.const_value is None or data.type.rank == 0:
        return None
    axis = instr.attrs["axis"] % data.type.rank
    if data.valid is not None and data.type.sym is not None and data.type.sym[axis] is not None:
        return None  # a symbolic gathered axis: the generic kernel checks against the run's extent
    dim = data.type.shape[axis]
    table = np.asarray(idx.const_value).astype(np.int64).ravel()
    table = np.where(table < 0, table + dim, table)
    if table.size == 0 or table.min() < 0 or table.max() >= dim:
        return None
    return table


def repeat_factor(table: np.ndarray) -> int:
    """``r > 1`` when ``table[j] == j // r`` for every j (each source element repeated r times), else 0."""
    n = table.size
    if n < 2 or table[0] != 0:
        return 0
    r = int(np.argmax(table != 0)) if np.any(table != 0) else n
    if r < 2 or not np.array_equal(table, np.arange(n, dtype=np.int64) // r):
        return 0
    return r


def emit_gather_const(ctx: EmitContext, instr: Instr) -> bool:
    """Emit the kernel if the indices are a valid constant table; False leaves the instruction to the caller."""
    table = constant_table(instr)
    if table is None:
        return False
    data, out = instr.ins[0], instr.outs[0]
    assert data is not None
    axis = instr.attrs["axis"] % data.type.rank
    shape = data.type.shape
    outer, dim, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    if inner != 1:
        return False
    if outer == 0:
        return True
    b = ctx.builder
    bt = bits_type(data.type.elem)
    src = b.bitcast(data.ptr, bt.as_pointer())
    dst = b.bitcast(out.ptr, bt.as_pointer())
    n = table.size
    start, end = _outer_rows(ctx, outer, valid_rows(b, out, axis), out.type.size >= MIN_PARALLEL)
    r = repeat_factor(table)
    tab = None if r else ctx.add_constant(table.astype(np.int32), f"{instr.name or 'gather'}.table")
    with for_range(b, start, end, name="orow") as o:
        srow = elem_ptr(b, src, b.mul(o, i64(dim)))
        drow = elem_ptr(b, dst, b.mul(o, i64(n)))
        if r:
            _repeat_row(b, srow, drow, n, r)
        else:
            with for_range(b, 0, n, name="j") as j:
                k = b.sext(b.load(elem_ptr(b, tab, j)), ir.IntType(64))
                b.store(b.load(elem_ptr(b, srow, k)), elem_ptr(b, drow, j))
    return True


def _outer_rows(ctx: EmitContext, outer: int, valid: ir.Value | None, parallel: bool) -> tuple[ir.Value, ir.Value]:
    """This thread's rows of the axes before the gathered one: a share (``parallel``) or all on thread 0;
    with symbolic dims (``valid``: the rows that hold data, a prefix) only those."""
    b = ctx.builder
    total = i64(outer) if valid is None else valid
    if parallel:
        return partition(b, total, ctx.tid, ctx.nthreads)
    start, end = partition(b, 1, ctx.tid, ctx.nthreads)
    return b.mul(start, total), b.mul(end, total)


def _repeat_row(b: ir.IRBuilder, srow: ir.Value, drow: ir.Value, n: int, r: int) -> None:
    """``drow[j] = srow[j // r]`` for j < n: one load and r stores per source element, then the tail."""
    full = n // r
    with for_range(b, 0, full, name="s") as s:
        v = b.load(elem_ptr(b, srow, s))
        base = b.mul(s, i64(r))
        for t in range(r):
            b.store(v, elem_ptr(b, drow, b.add(base, i64(t))))
    if n % r:
        v = b.load(elem_ptr(b, srow, i64(full)))
        for t in range(n % r):
            b.store(v, elem_ptr(b, drow, i64(full * r + t)))
