"""FusedLayerNorm and FusedAttention emitters (float32): the transformer blocks in one kernel each.

FusedLayerNorm, per row of the last axis (rows split over the threads): a
vector pass for the mean, a second pass over the row (in cache by then) for the
biased variance of ``x - mean``, then one pass writing
``(x - mean) * (1 / sqrt(var + eps)) * scale + bias``.

FusedAttention, per row of the scores (the rows of every (batch, head) block
split over the threads):

1. the scores row ``q_i . KT[:, j]`` (*|/ scale, + mask) into a per-thread
   scratch row of N floats (it stays in L1): blocks of up to 4 vectors of
   columns, each accumulated over D in registers with FMAs;
2. its maximum, then ``exp(s - max)`` in place and their sum;
3. ``y_i = sum_j p_j V[j, :]`` accumulated in registers (blocks of up to 4
   vectors of Dv), scaled by ``1 / sum`` once, stored.

No score tensor is written to the arena. A row whose every score is -inf
gives NaN (``-inf - -inf``), as Softmax does; NaNs propagate the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from llvmlite import ir

from glow_backend_cpu.emit import ew_math
from glow_backend_cpu.emit.context import EmitContext, Instr, Operand, register_emitter
from glow_backend_cpu.emit.reduce import hreduce
from glow_backend_cpu.helpers import F32, call_intrinsic, carried_loop, const_like, for_range, i64, lane_mask
from glow_backend_cpu.helpers import masked_vload, masked_vstore, partition, splat, strided_offset, vload, vstore

MIN_PARALLEL = 8192
#: vectors of columns accumulated together in registers
UNROLL = 4


def _fadd(b: ir.IRBuilder, p: ir.Value, q: ir.Value) -> ir.Value:
    return b.fadd(p, q)


def _fmax(b: ir.IRBuilder, p: ir.Value, q: ir.Value) -> ir.Value:
    """max that keeps a NaN (as numpy's max, so a NaN score makes the row NaN)."""
    bigger = b.fcmp_unordered("ugt", p, q)  # true when p > q or either is NaN
    return b.select(bigger, b.select(b.fcmp_unordered("uno", q, q), q, p), q)


def _vectors(n: int, lanes: int) -> list[int]:
    """The widths of the vectors covering ``n`` elements (the last one may be partial)."""
    return [min(lanes, n - j) for j in range(0, n, lanes)]


def _load(b: ir.IRBuilder, ptr: ir.Value, index: ir.Value, width: int, lanes: int, fill: float = 0.0) -> ir.Value:
    """``width`` (<= lanes) elements from ``ptr[index]``, the other lanes ``fill``."""
    if width == lanes:
        return vload(b, ptr, index, lanes, 4)
    mask = lane_mask(b, i64(width), lanes)
    v = masked_vload(b, ptr, index, mask, lanes, 4)
    return v if fill == 0.0 else b.select(mask, v, const_like(v.type, fill))


def _store(b: ir.IRBuilder, v: ir.Value, ptr: ir.Value, index: ir.Value, width: int, lanes: int) -> None:
    if width == lanes:
        vstore(b, v, ptr, index, 4)
    else:
        masked_vstore(b, v, ptr, index, lane_mask(b, i64(width), lanes), 4)


def _blocked(b: ir.IRBuilder, n: int, lanes: int, body: Callable[[ir.Value, list[int]], None]) -> None:
    """Call ``body(first column, vector widths)`` over ``n`` columns: a loop over blocks of UNROLL full
    vectors, then the rest (the last vector possibly partial) once."""
    widths = _vectors(n, lanes)
    full = len(widths) // UNROLL if widths and widths[-1] == lanes else (len(widths) - 1) // UNROLL
    if full:
        with for_range(b, 0, full, name="blk") as blk:
            body(b.mul(blk, i64(UNROLL * lanes)), [lanes] * UNROLL)
    rest = widths[full * UNROLL:]
    if rest:
        body(i64(full * UNROLL * lanes), rest)


def _rows(ctx: EmitContext, rows: int, size: int) -> tuple[ir.Value, ir.Value]:
    """This thread's rows (every row on thread 0 when the tensor is small)."""
    b = ctx.builder
    if size >= MIN_PARALLEL:
        return partition(b, rows, ctx.tid, ctx.nthreads)
    first = b.icmp_signed("==", ctx.tid, i64(0))
    return i64(0), b.select(first, i64(rows), i64(0))


# -- FusedLayerNorm -----------------------------------------------------------------------------------------

def _row_param(b: ir.IRBuilder, p: Operand | None, j: ir.Value, width: int, lanes: int) -> ir.Value | None:
    if p is None:
        return None
    if p.type.size == 1:
        return splat(b, b.load(p.ptr), lanes)
    return _load(b, p.ptr, j, width, lanes)


def _row_sum(b: ir.IRBuilder, n: int, lanes: int, term: Callable[[ir.Value, int], ir.Value]) -> ir.Value:
    """The sum over a row of ``term(column, width)`` (zero in unused lanes) as a scalar."""
    vt = ir.VectorType(F32, lanes)
    nfull = n // lanes
    (acc,) = carried_loop(b, 0, nfull, [const_like(vt, 0.0)],
                          lambda bb, j, a: [bb.fadd(a[0], term(bb.mul(j, i64(lanes)), lanes))], name="sum")
    if n % lanes:
        acc = b.fadd(acc, term(i64(nfull * lanes), n % lanes))
    return hreduce(b, acc, _fadd)


@register_emitter("FusedLayerNorm")
def _layernorm(ctx: EmitContext, instr: Instr) -> None:
    x, scale = instr.ins[0], instr.ins[1]
    bias = instr.ins[2] if len(instr.ins) > 2 else None
    out = instr.outs[0]
    assert x is not None and scale is not None
    n = x.type.shape[-1]
    rows = x.type.size // n if n else 0
    if rows == 0:
        return
    b = ctx.builder
    lanes = ctx.target.vector_lanes
    vt = ir.VectorType(F32, lanes)
    start, end = _rows(ctx, rows, x.type.size)
    with for_range(b, start, end, name="row") as row:
        base = b.mul(row, i64(n))

        def xs(j: ir.Value, w: int) -> ir.Value:
            return _load(b, x.ptr, b.add(base, j), w, lanes)

        mean = splat(b, b.fdiv(_row_sum(b, n, lanes, xs), ir.Constant(F32, float(n))), lanes)

        def sq(j: ir.Value, w: int) -> ir.Value:
            d = b.fsub(xs(j, w), mean)
            if w < lanes:
                d = b.select(lane_mask(b, i64(w), lanes), d, const_like(vt, 0.0))
            return b.fmul(d, d)

        var = b.fdiv(_row_sum(b, n, lanes, sq), ir.Constant(F32, float(n)))
        std = call_intrinsic(b, "sqrt", [b.fadd(var, ir.Constant(F32, float(instr.attrs["epsilon"])))])
        inv = splat(b, b.fdiv(ir.Constant(F32, 1.0), std), lanes)

        def write(j: ir.Value, w: int) -> None:
            y = b.fmul(b.fmul(b.fsub(xs(j, w), mean), inv), _row_param(b, scale, j, w, lanes))
            shift = _row_param(b, bias, j, w, lanes)
            _store(b, b.fadd(y, shift) if shift is not None else y, out.ptr, b.add(base, j), w, lanes)

        with for_range(b, 0, n // lanes, name="ln") as j:
            write(b.mul(j, i64(lanes)), lanes)
        if n % lanes:
            write(i64(n // lanes * lanes), n % lanes)


# -- FusedAttention -----------------------------------------------------------------------------------------

def _mask_offsets(instr: Instr) -> tuple[list[int], list[int], int] | None:
    """(score dims but the last, the mask's strides along them, its stride along the last)."""
    mask = instr.ins[3] if len(instr.ins) > 3 else None
    if mask is None:
        return None
    scores = instr.ins[0].type.shape[:-1] + (instr.ins[1].type.shape[-1],)  # type: ignore[union-attr]
    shape = (1,) * (len(scores) - mask.type.rank) + mask.type.shape
    strides, acc = [0] * len(shape), 1
    for k in range(len(shape) - 1, -1, -1):
        strides[k] = 0 if shape[k] == 1 else acc
        acc *= shape[k]
    return list(scores[:-1]), strides[:-1], strides[-1]


class _Attention:
    """The code of one FusedAttention instruction (its shapes are compile-time constants)."""

    def __init__(self, ctx: EmitContext, instr: Instr) -> None:
        self.ctx, self.b = ctx, ctx.builder
        self.q, self.kt, self.v = (instr.ins[i] for i in range(3))
        self.mask = instr.ins[3] if len(instr.ins) > 3 else None
        self.out = instr.outs[0]
        assert self.q is not None and self.kt is not None and self.v is not None
        self.m, self.d = self.q.type.shape[-2:]
        self.n, self.dv = self.kt.type.shape[-1], self.v.type.shape[-1]
        self.lanes = ctx.target.vector_lanes
        self.vt = ir.VectorType(F32, self.lanes)
        self.scale = ir.Constant(F32, float(instr.attrs["scale"]))
        self.div = instr.attrs["scale_op"] == "div"
        self.mask_at = _mask_offsets(instr)

    def scores(self, row: ir.Value, bh: ir.Value, s: ir.Value) -> None:
        """The scaled, masked scores of ``row`` into the scratch row ``s``."""
        b, lanes, n = self.b, self.lanes, self.n
        qbase, kbase = b.mul(row, i64(self.d)), b.mul(bh, i64(self.d * n))
        mbase = strided_offset(b, row, self.mask_at[0], self.mask_at[1]) if self.mask_at else None

        def block(col: ir.Value, widths: list[int]) -> None:
            def step(bb: ir.IRBuilder, k: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
                qk = splat(bb, bb.load(bb.gep(self.q.ptr, [bb.add(qbase, k)])), lanes)  # type: ignore[union-attr]
                krow = bb.add(kbase, bb.add(bb.mul(k, i64(n)), col))
                return [ew_math.fmul_add(bb, qk, _load(bb, self.kt.ptr, bb.add(krow, i64(u * lanes)), w, lanes), a)
                        for u, (w, a) in enumerate(zip(widths, accs))]

            accs = carried_loop(b, 0, self.d, [const_like(self.vt, 0.0)] * len(widths), step, name="qk")
            for u, (w, a) in enumerate(zip(widths, accs)):
                j = b.add(col, i64(u * lanes))
                a = b.fdiv(a, splat(b, self.scale, lanes)) if self.div else b.fmul(a, splat(b, self.scale, lanes))
                if mbase is not None:
                    a = b.fadd(a, self.mask_row(mbase, j, w))
                if w < lanes:  # the padding lanes of the scratch row: -inf adds nothing to max or sum
                    a = b.select(lane_mask(b, i64(w), lanes), a, const_like(self.vt, float("-inf")))
                vstore(b, a, s, j, 4)

        _blocked(b, n, lanes, block)

    def mask_row(self, mbase: ir.Value, j: ir.Value, w: int) -> ir.Value:
        b = self.b
        assert self.mask is not None and self.mask_at is not None
        last = self.mask_at[2]
        if last == 0:
            return splat(b, b.load(b.gep(self.mask.ptr, [mbase])), self.lanes)
        return _load(b, self.mask.ptr, b.add(mbase, j), w, self.lanes)

    def softmax(self, s: ir.Value) -> ir.Value:
        """exp(s - max) in place over the padded row; returns 1 / their sum (a vector)."""
        b, lanes = self.b, self.lanes
        nvec = -(-self.n // lanes)
        (top,) = carried_loop(b, 0, nvec, [const_like(self.vt, float("-inf"))],
                              lambda bb, j, a: [_fmax(bb, a[0], vload(bb, s, bb.mul(j, i64(lanes)), lanes, 4))],
                              name="max")
        m = splat(b, hreduce(b, top, _fmax), lanes)

        def expo(bb: ir.IRBuilder, j: ir.Value, a: list[ir.Value]) -> list[ir.Value]:
            pos = bb.mul(j, i64(lanes))
            e = ew_math.exp(bb, bb.fsub(vload(bb, s, pos, lanes, 4), m))
            vstore(bb, e, s, pos, 4)
            return [bb.fadd(a[0], e)]

        (total,) = carried_loop(b, 0, nvec, [const_like(self.vt, 0.0)], expo, name="exp")
        return splat(b, b.fdiv(ir.Constant(F32, 1.0), hreduce(b, total, _fadd)), lanes)

    def weighted(self, row: ir.Value, bh: ir.Value, s: ir.Value, inv: ir.Value) -> None:
        """out[row, :] = inv * sum_j s[j] V[j, :]."""
        b, lanes, dv = self.b, self.lanes, self.dv
        vbase, obase = b.mul(bh, i64(self.n * dv)), b.mul(row, i64(dv))

        def block(col: ir.Value, widths: list[int]) -> None:
            def step(bb: ir.IRBuilder, j: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
                p = splat(bb, bb.load(bb.gep(s, [j])), lanes)
                vrow = bb.add(vbase, bb.add(bb.mul(j, i64(dv)), col))
                return [ew_math.fmul_add(bb, p, _load(bb, self.v.ptr, bb.add(vrow, i64(u * lanes)), w, lanes), a)  # type: ignore[union-attr]
                        for u, (w, a) in enumerate(zip(widths, accs))]

            accs = carried_loop(b, 0, self.n, [const_like(self.vt, 0.0)] * len(widths), step, name="pv")
            for u, (w, a) in enumerate(zip(widths, accs)):
                _store(b, b.fmul(a, inv), self.out.ptr, b.add(obase, b.add(col, i64(u * lanes))), w, lanes)

        _blocked(b, dv, lanes, block)

    def emit(self) -> None:
        rows = self.q.type.size // self.d if self.d else self.out.type.size // max(self.dv, 1)  # type: ignore[union-attr]
        if rows == 0 or self.dv == 0:
            return
        b = self.b
        padded = -(-self.n // self.lanes) * self.lanes
        s = b.bitcast(self.ctx.scratch(max(padded, 1) * 4), F32.as_pointer())
        start, end = _rows(self.ctx, rows, rows * max(self.n, 1) * max(self.d + self.dv, 1))
        with for_range(b, start, end, name="arow") as row:
            bh = b.udiv(row, i64(self.m))
            self.scores(row, bh, s)
            self.weighted(row, bh, s, self.softmax(s))


def _attention_ok(node: object) -> bool:
    n = node.inputs[1].type.shape[-1]  # type: ignore[attr-defined]
    return n > 0 and math.prod(node.inputs[0].type.shape[-1:]) > 0  # type: ignore[attr-defined]


@register_emitter("FusedAttention", when=_attention_ok, why="at least one key and a non-empty head size")
def _attention(ctx: EmitContext, instr: Instr) -> None:
    _Attention(ctx, instr).emit()
