"""Element-wise loops: one instruction, or a fused chain of them (operator stacking).

A chain is a list of :class:`Step` s; each step applies an operation of
``ew_ops.EW_OPS`` to *external* operands (memory: activations, weights,
inputs) and to results of earlier steps (registers). Only the last step's
result is stored. The code generator fuses consecutive element-wise
instructions where each result feeds the next and dies there
(``codegen.find_chains``); a single instruction is a chain of one step.

The loop nest is specialized at compile time:

- the output shape and every operand's broadcast strides are coalesced into
  the fewest dimensions (``[C, H*W]`` for a per-channel bias on NCHW);
- the innermost dimension runs in vectors of ``target.vector_lanes``, with a
  masked tail; an operand that is constant along it is loaded once per row and
  splat; a constant operand whose elements are all equal becomes an immediate;
- rows (and, when there are few, blocks of the innermost dimension) are the
  work items, partitioned over the threads.

Symbolic dims (``Operand.valid``): when the output's valid entries are a leading prefix of its elements
(its first axis that is not 1 is the only symbolic one, ``symdims.valid_rows``), only the work items that
start inside that prefix run (the last may run on into padding); otherwise the loop runs over the valid rows
and columns of the output (``ew_symbolic``). Padding entries of the output are left as they are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from llvmlite import ir

from glow_backend_cpu.emit.context import EmitContext, Instr, Operand, register_emitter
from glow_backend_cpu.emit.dtypes import compute_type, round_trip, to_compute, to_storage
from glow_backend_cpu.emit.ew_ops import EW_ELEMS, EW_OPS
from glow_backend_cpu.emit.ew_symbolic import emit_rows, wants_rows
from glow_backend_cpu.emit.symdims import valid_rows
from glow_backend_cpu.helpers import (
    I64,
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

#: below this many elements a loop is one work item (one thread; no point in splitting)
MIN_PARALLEL_ELEMS = 4096
#: aim for at least this many work items so threads balance
TARGET_ITEMS = 64


@dataclass
class Step:
    """One operation of a chain: ``args`` are ``("ext", k)`` (external operand k) or ``("step", j)``."""

    kind: str
    attrs: Mapping[str, Any]
    out_elem: ElemKind
    args: list[tuple[str, int]]


@dataclass
class _Dim:
    size: int
    strides: list[int] = field(default_factory=list)  # per operand: [out, ext0, ext1, ...]


def broadcast_strides(shape: Sequence[int], out_shape: Sequence[int]) -> list[int]:
    """Element strides of a contiguous ``shape`` read broadcast to ``out_shape`` (0 on broadcast axes)."""
    rank = len(out_shape)
    full = [1] * (rank - len(shape)) + list(shape)
    strides = [0] * rank
    acc = 1
    for d in reversed(range(rank)):
        strides[d] = acc if full[d] != 1 else 0
        acc *= full[d]
    return strides


def coalesce(shape: Sequence[int], strides: Sequence[Sequence[int]]) -> list[_Dim]:
    """Drop unit dimensions and merge neighbours that every operand walks contiguously."""
    dims = [_Dim(s, [st[d] for st in strides]) for d, s in enumerate(shape) if s != 1]
    out: list[_Dim] = []
    for d in dims:
        if out and all(p == c * d.size for p, c in zip(out[-1].strides, d.strides)):
            out[-1] = _Dim(out[-1].size * d.size, list(d.strides))
        else:
            out.append(d)
    return out or [_Dim(1, [0] * len(strides))]


def splat_value(op: Operand) -> Any | None:
    """The single value of a constant operand whose elements are all equal (None otherwise)."""
    v = op.const_value
    if v is None or v.size == 0 or v.size > 1 << 16:
        return None
    flat = np.asarray(v).reshape(-1)
    first = flat[0]
    if flat.dtype.kind == "f" or flat.dtype.name == "bfloat16":
        f = flat.astype(np.float64)
        if np.isnan(f[0]):
            return None
        if not np.all(f == f[0]) or not np.all(np.signbit(f) == np.signbit(f[0])):
            return None
        return float(f[0])
    if not np.all(flat == first):
        return None
    return bool(first) if flat.dtype == np.bool_ else int(first)


def _immediate(value: Any, elem: ElemKind) -> ir.Constant:
    t = compute_type(elem)
    if isinstance(t, ir.IntType):
        return ir.Constant(t, int(value) & ((1 << t.width) - 1))
    return ir.Constant(t, float(value))


@dataclass
class _Layout:
    """How a chain's loop nest is cut: the coalesced dimensions and the work items (rows x blocks)."""

    inner: _Dim  #: the innermost dimension (vectorized)
    outer: list[_Dim]  #: the others, outermost first
    chunk: int  #: elements of the innermost dimension per work item
    nblk: int  #: work items per row
    items: int  #: work items: rows x blocks
    groups: int  #: what the threads share: the items (1 for a small loop)

    @property
    def per(self) -> int:
        """Work items per group."""
        return self.items // self.groups


@dataclass
class _Row:
    """One work item of a chain: its operands' row offsets (``[out, ext0, ...]``) and the values of the
    externals that are constant along the row (immediates or one load; None for the others)."""

    steps: Sequence[Step]
    externals: Sequence[Operand]
    out: Operand
    offs: list[ir.Value]
    row_vals: list[ir.Value | None]


def _layout(out_shape: Sequence[int], externals: Sequence[Operand], lanes: int) -> _Layout:
    """Coalesce the loop nest and cut it into work items (see the module doc)."""
    total = math.prod(out_shape)
    strides = [broadcast_strides(out_shape, out_shape)] + [broadcast_strides(e.type.shape, out_shape)
                                                            for e in externals]
    dims = coalesce(out_shape, strides)
    inner, outer = dims[-1], dims[:-1]
    length = inner.size
    rows = math.prod(d.size for d in outer)
    if total < MIN_PARALLEL_ELEMS:
        nblk, chunk = 1, length
    else:
        want = max(1, -(-TARGET_ITEMS // rows))
        chunk = max(lanes * 4, -(-length // want))
        chunk = -(-chunk // lanes) * lanes
        nblk = -(-length // chunk)
    items = rows * nblk
    groups = items if total >= MIN_PARALLEL_ELEMS else 1
    return _Layout(inner, outer, chunk, nblk, items, groups)


def emit_chain(ctx: EmitContext, steps: Sequence[Step], externals: Sequence[Operand], out: Operand) -> None:
    """Emit the loop of a chain whose last step writes ``out`` (see the module doc)."""
    b = ctx.builder
    if math.prod(out.type.shape) == 0:
        return
    lanes = ctx.target.vector_lanes
    lay = _layout(out.type.shape, externals, lanes)
    length = lay.inner.size
    immediates = [splat_value(e) for e in externals]

    valid = valid_rows(b, out, out.type.rank)  # the output's valid elements when they are a prefix
    if valid is None and wants_rows(out):
        _emit_valid_rows(ctx, steps, externals, out, immediates)
        return
    start, end = _item_range(b, ctx, lay, valid)
    with for_range(b, start, end, name="item") as w:
        if lay.items == 1:
            r, blk = i64(0), i64(0)
        else:
            r, blk = b.udiv(w, i64(lay.nblk)), b.urem(w, i64(lay.nblk))
        offs = _row_offsets(b, lay.outer, r, 1 + len(externals))
        c0 = b.mul(blk, i64(lay.chunk))
        c1 = smin(b, b.add(c0, i64(lay.chunk)), i64(length)) if lay.nblk > 1 else i64(length)
        if lay.items == 1 and valid is not None:  # one row: stop at the valid prefix
            c1 = smin(b, c1, valid)
        row_vals = _row_values(b, externals, immediates, lay.inner, offs)
        row = _Row(steps, externals, out, offs, row_vals)
        n_lanes = lanes if length > 1 else 1
        span = b.sub(c1, c0)
        nfull = b.udiv(span, i64(n_lanes))
        with for_range(b, 0, nfull, name="vec") as j:
            _emit_vector(b, row, b.add(c0, b.mul(j, i64(n_lanes))), n_lanes, None)
        if n_lanes > 1 and (lay.nblk > 1 or length % n_lanes or valid is not None):  # (a run-time prefix)
            tail = b.sub(span, b.mul(nfull, i64(n_lanes)))
            with b.if_then(b.icmp_signed(">", tail, i64(0))):
                _emit_vector(b, row, b.add(c0, b.mul(nfull, i64(n_lanes))), n_lanes, lane_mask(b, tail, n_lanes))


def _emit_valid_rows(ctx: EmitContext, steps: Sequence[Step], externals: Sequence[Operand], out: Operand,
                     immediates: Sequence[Any | None]) -> None:
    """The chain over the valid rows and columns of an output whose valid entries are no prefix."""
    shape = out.type.shape
    strides = [broadcast_strides(shape, shape)] + [broadcast_strides(e.type.shape, shape) for e in externals]
    inner = _Dim(shape[-1], [st[-1] for st in strides])

    def row_values(b: ir.IRBuilder, offs: list[ir.Value]) -> list[ir.Value | None]:
        return _row_values(b, externals, immediates, inner, offs)

    def vector(b: ir.IRBuilder, offs: list[ir.Value], c: ir.Value, n_lanes: int, mask: ir.Value | None,
               vals: list[ir.Value | None]) -> None:
        _emit_vector(b, _Row(steps, externals, out, offs, vals), c, n_lanes, mask)

    emit_rows(ctx, out, strides, ctx.target.vector_lanes, vector, row_values)


def _item_range(b: ir.IRBuilder, ctx: EmitContext, lay: _Layout, valid: ir.Value | None) -> tuple[ir.Value, ir.Value]:
    """This thread's work items ``[start, end)``; with ``valid`` (the output's valid prefix, in elements),
    only the items that start inside it (items run in the output's element order)."""
    if valid is None:
        start, end = partition(b, lay.groups, ctx.tid, ctx.nthreads)
        return b.mul(start, i64(lay.per)), b.mul(end, i64(lay.per))
    length = lay.inner.size
    rows = b.udiv(valid, i64(length))
    rest = b.urem(valid, i64(length))
    items = b.add(b.mul(rows, i64(lay.nblk)), b.udiv(b.add(rest, i64(lay.chunk - 1)), i64(lay.chunk)))
    items = smin(b, items, i64(lay.items))
    if lay.groups == 1:
        start, end = partition(b, 1, ctx.tid, ctx.nthreads)
        return b.mul(start, items), b.mul(end, items)
    return partition(b, items, ctx.tid, ctx.nthreads)


def _row_offsets(b: ir.IRBuilder, outer: Sequence[_Dim], r: ir.Value, n_operands: int) -> list[ir.Value]:
    """The element offset of row ``r`` in every operand (``[out, ext0, ...]``; outer dims, innermost last)."""
    offs = [i64(0)] * n_operands
    rem = r
    for d in reversed(outer):
        idx = b.urem(rem, i64(d.size)) if d is not outer[0] else rem
        rem = b.udiv(rem, i64(d.size))
        offs = [o if s == 0 else b.add(o, b.mul(idx, i64(s))) for o, s in zip(offs, d.strides)]
    return offs


def _row_values(b: ir.IRBuilder, externals: Sequence[Operand], immediates: Sequence[Any | None], inner: _Dim,
                offs: Sequence[ir.Value]) -> list[ir.Value | None]:
    """The externals constant along the row: an immediate, or one load (splat later); None for the others."""
    row_vals: list[ir.Value | None] = []
    for k, e in enumerate(externals):
        if immediates[k] is not None:
            row_vals.append(_immediate(immediates[k], e.type.elem))
        elif inner.strides[k + 1] == 0:
            v = b.load(elem_ptr(b, e.ptr, offs[k + 1]), align=e.type.elem.itemsize)
            row_vals.append(to_compute(b, v, e.type.elem))
        else:
            row_vals.append(None)
    return row_vals


def _emit_vector(b: ir.IRBuilder, row: _Row, c: ir.Value, n_lanes: int, mask: ir.Value | None) -> None:
    """Load ``n_lanes`` elements at column ``c`` of every external (``mask``: the tail), apply the steps in
    registers and store the last step's result."""
    vals: list[ir.Value] = []
    for k, e in enumerate(row.externals):
        rv = row.row_vals[k]
        if rv is not None:
            vals.append(splat(b, rv, n_lanes))
            continue
        idx = b.add(row.offs[k + 1], c)
        if mask is not None:
            raw = masked_vload(b, e.ptr, idx, mask, n_lanes, e.type.elem.itemsize)
        else:
            raw = vload(b, e.ptr, idx, n_lanes, e.type.elem.itemsize)
        vals.append(to_compute(b, raw, e.type.elem))
    results: list[ir.Value] = []
    steps = row.steps
    for st in steps:
        args = [vals[i] if src == "ext" else results[i] for src, i in st.args]
        elems = [row.externals[i].type.elem if src == "ext" else steps[i].out_elem for src, i in st.args]
        res = EW_OPS[st.kind](b, args, elems, st.out_elem, st.attrs)
        results.append(round_trip(b, res, st.out_elem))
    value = to_storage(b, results[-1], steps[-1].out_elem)
    idx = b.add(row.offs[0], c)
    out = row.out
    if mask is not None:
        masked_vstore(b, value, out.ptr, idx, mask, out.type.elem.itemsize)
    else:
        vstore(b, value, out.ptr, idx, out.type.elem.itemsize)


def emit_single(ctx: EmitContext, instr: Instr) -> None:
    """The emitter of one element-wise instruction: a chain of one step."""
    ins = [op for op in instr.ins if op is not None]
    step = Step(instr.kind, instr.attrs, instr.outs[0].type.elem, [("ext", k) for k in range(len(ins))])
    emit_chain(ctx, [step], ins, instr.outs[0])


for _kind, _elems in EW_ELEMS.items():
    register_emitter(_kind, elems=_elems)(emit_single)

__all__ = ["I64", "Step", "broadcast_strides", "coalesce", "emit_chain", "emit_single"]
