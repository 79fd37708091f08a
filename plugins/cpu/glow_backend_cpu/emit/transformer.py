"""FusedLayerNorm and FusedAttention emitters (float32): the transformer blocks in one kernel each.

FusedLayerNorm, per row of the last axis (rows split over the threads): a
vector pass for the mean, a second pass over the row (in cache by then) for the
biased variance of ``x - mean``, then one pass writing
``(x - mean) * (1 / sqrt(var + eps)) * scale + bias``.

FusedAttention, per group of rows of the scores (4 with AVX-512, else 2; the
groups of every (batch, head) block split over the threads):

1. the scores rows ``q_i . KT[:, j]`` (*|/ scale, + mask) into per-thread
   scratch rows of N floats (they stay in L1): blocks of up to 4 vectors of
   columns for every row of the group, accumulated over D in registers with FMAs;
2. its maximum, then ``exp(s - max)`` in place and their sum, then the row
   divided by the sum in place (the probabilities Softmax gives: normalizing
   after the product with V overflowed where V holds values near the float
   range);
3. ``y_i = sum_j p_j V[j, :]`` accumulated in registers (blocks of up to 4
   vectors of Dv), stored.

No score tensor is written to the arena. A row whose every score is -inf
gives NaN (``-inf - -inf``), as Softmax does; NaNs propagate the same way.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from glow_backend_cpu.emit import ew_math
from glow_backend_cpu.emit.context import EmitContext, Instr, Operand, register_emitter
from glow_backend_cpu.emit.reduce import hreduce
from glow_backend_cpu.emit.symdims import extent, is_sym, row_space, unsupported, valid_rows
from glow_core.ir.graph import Node
from glow_backend_cpu.helpers import F32, call_intrinsic, carried_loop, const_like, for_range, i64, lane_mask
from glow_backend_cpu.helpers import masked_vload, masked_vstore, partition, smax, splat, strided_offset, vload, vstore

MIN_PARALLEL = 8192
#: vectors of columns accumulated together in registers
UNROLL = 4

#: a vector's width: a compile-time count of lanes, or (the valid tail of a symbolic row) a run-time one
Width = int | ir.Value


def _partial(w: Width, lanes: int) -> bool:
    """True when a vector of width ``w`` may leave lanes unused (every run-time width may)."""
    return not isinstance(w, int) or w < lanes


def _fadd(b: ir.IRBuilder, p: ir.Value, q: ir.Value) -> ir.Value:
    return b.fadd(p, q)


def _fmax(b: ir.IRBuilder, p: ir.Value, q: ir.Value) -> ir.Value:
    """max that keeps a NaN (as numpy's max, so a NaN score makes the row NaN)."""
    bigger = b.fcmp_unordered("ugt", p, q)  # true when p > q or either is NaN
    return b.select(bigger, b.select(b.fcmp_unordered("uno", q, q), q, p), q)


def _vectors(n: int, lanes: int) -> list[int]:
    """The widths of the vectors covering ``n`` elements (the last one may be partial)."""
    return [min(lanes, n - j) for j in range(0, n, lanes)]


def _load(b: ir.IRBuilder, ptr: ir.Value, index: ir.Value, width: Width, lanes: int, fill: float = 0.0) -> ir.Value:
    """``width`` (<= lanes) elements from ``ptr[index]``, the other lanes ``fill``."""
    if not _partial(width, lanes):
        return vload(b, ptr, index, lanes, 4)
    mask = lane_mask(b, i64(width) if isinstance(width, int) else width, lanes)
    v = masked_vload(b, ptr, index, mask, lanes, 4)
    return v if fill == 0.0 else b.select(mask, v, const_like(v.type, fill))


def _store(b: ir.IRBuilder, v: ir.Value, ptr: ir.Value, index: ir.Value, width: Width, lanes: int) -> None:
    if not _partial(width, lanes):
        vstore(b, v, ptr, index, 4)
    else:
        masked_vstore(b, v, ptr, index, lane_mask(b, i64(width) if isinstance(width, int) else width, lanes), 4)


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


def _blocked_dyn(b: ir.IRBuilder, n: ir.Value, lanes: int, body: Callable[[ir.Value, list[Width]], None]) -> None:
    """:func:`_blocked` over a run-time count ``n`` of columns: blocks of UNROLL full vectors, then full
    vectors one by one, then the partial vector (a run-time width) when ``n`` is no multiple of ``lanes``."""
    nfull = b.udiv(n, i64(lanes))
    nblk = b.udiv(nfull, i64(UNROLL))
    with for_range(b, 0, nblk, name="blk") as blk:
        body(b.mul(blk, i64(UNROLL * lanes)), [lanes] * UNROLL)
    with for_range(b, b.mul(nblk, i64(UNROLL)), nfull, name="vec") as j:
        body(b.mul(j, i64(lanes)), [lanes])
    rem = b.urem(n, i64(lanes))
    with b.if_then(b.icmp_signed(">", rem, i64(0))):
        body(b.mul(nfull, i64(lanes)), [rem])


def _rows(ctx: EmitContext, rows: int | ir.Value, size: int) -> tuple[ir.Value, ir.Value]:
    """This thread's rows (every row on thread 0 when the tensor is small)."""
    b = ctx.builder
    if size >= MIN_PARALLEL:
        return partition(b, rows, ctx.tid, ctx.nthreads)
    first = b.icmp_signed("==", ctx.tid, i64(0))
    return i64(0), b.select(first, i64(rows) if isinstance(rows, int) else rows, i64(0))


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


@register_emitter("FusedLayerNorm", symbolic=True)
def _layernorm(ctx: EmitContext, instr: Instr) -> None:
    """Symbolic dims: a symbolic normalized (last) axis is unsupported; symbolic leading axes: only the rows
    that hold data (:func:`row_space`)."""
    x, scale = instr.ins[0], instr.ins[1]
    bias = instr.ins[2] if len(instr.ins) > 2 else None
    out = instr.outs[0]
    assert x is not None and scale is not None
    if is_sym(x, -1) or any(is_sym(p, -1) for p in (scale, bias)):
        raise unsupported("FusedLayerNorm", "a symbolic normalized axis")
    n = x.type.shape[-1]
    rows = x.type.size // n if n else 0
    if rows == 0:
        return
    b = ctx.builder
    lanes = ctx.target.vector_lanes
    vt = ir.VectorType(F32, lanes)
    space = row_space(b, x, x.type.rank - 1)
    start, end = _rows(ctx, rows if space is None else space.count, x.type.size)
    with for_range(b, start, end, name="row") as row:
        base = b.mul(row if space is None else space.row(b, row), i64(n))

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
    """The code of one FusedAttention instruction (its shapes are compile-time constants).

    Rows of scores go by groups of one (batch, head) block (4 rows with AVX-512, else 2; the last
    group of a block may be shorter): each key vector and each row of V loaded serves every row of
    the group, and the rows' accumulators (up to group x UNROLL vectors) hide the FMA latency."""

    def __init__(self, ctx: EmitContext, instr: Instr) -> None:
        self.ctx, self.b = ctx, ctx.builder
        q, kt, v = (instr.ins[i] for i in range(3))
        assert q is not None and kt is not None and v is not None
        self.q, self.kt, self.v = q, kt, v
        self.mask = instr.ins[3] if len(instr.ins) > 3 else None
        self.out = instr.outs[0]
        self.m, self.d = q.type.shape[-2:]
        self.n, self.dv = kt.type.shape[-1], v.type.shape[-1]
        self.lanes = ctx.target.vector_lanes
        #: rows of scores per step: 4 with 32 vector registers (AVX-512), else 2
        self.group = 4 if self.lanes >= 16 else 2
        self.padded = -(-self.n // self.lanes) * self.lanes
        self.vt = ir.VectorType(F32, self.lanes)
        self.scale = ir.Constant(F32, float(instr.attrs["scale"]))
        self.div = instr.attrs["scale_op"] == "div"
        self.zero = instr.attrs["masked_rows"] == "zero"
        self.mask_at = _mask_offsets(instr)
        #: per row, the running maximum of its mask (masked_rows zero: a fully masked row gives zeros)
        self.mask_top: list[ir.Value] = []
        #: per row of a group, the running (vector) maximum of its stored scores
        self.row_top: list[ir.Value] = []
        self._symbolic(instr)

    def _symbolic(self, instr: Instr) -> None:
        """The run's key count ``nv`` (None: all N) and query rows ``mv`` (None: all M) when symbolic."""
        q, kt, v = self.q, self.kt, self.v
        if is_sym(q, -1) or is_sym(kt, -2):
            raise unsupported("FusedAttention", "a symbolic head size")
        keys = is_sym(kt, -1) or is_sym(v, -2) or is_sym(self.mask, -1)
        #: keys that hold data (only they enter the max, the sum and the product with V)
        self.nv: ir.Value | None = None
        if keys:
            self.nv = extent(self.b, kt, -1) if is_sym(kt, -1) else extent(self.b, v, -2)
        #: query rows that hold data (the others are not computed)
        self.mv: ir.Value | None = extent(self.b, q, -2) if is_sym(q, -2) else None

    def scores(self, rows: list[ir.Value], bh: ir.Value, s: list[ir.Value]) -> None:
        """The scaled, masked scores of each of ``rows`` into its scratch row."""
        b, lanes, n = self.b, self.lanes, self.n
        if self.zero and self.mask_at:
            self.mask_top = self._running_max(len(rows))
        self.row_top = self._running_max(len(rows))
        qbase, kbase = [b.mul(r, i64(self.d)) for r in rows], b.mul(bh, i64(self.d * n))
        mbase = [strided_offset(b, r, self.mask_at[0], self.mask_at[1]) for r in rows] if self.mask_at else None

        def block(col: ir.Value, widths: list[Width]) -> None:
            def step(bb: ir.IRBuilder, k: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
                krow = bb.add(kbase, bb.add(bb.mul(k, i64(n)), col))
                keys = [_load(bb, self.kt.ptr, bb.add(krow, i64(u * lanes)), w, lanes) for u, w in enumerate(widths)]
                qs = [splat(bb, bb.load(bb.gep(self.q.ptr, [bb.add(qb, k)])), lanes) for qb in qbase]
                return [ew_math.fmul_add(bb, qs[i // len(keys)], keys[i % len(keys)], a) for i, a in enumerate(accs)]

            zero = const_like(self.vt, 0.0)
            accs = carried_loop(b, 0, self.d, [zero] * (len(widths) * len(rows)), step, name="qk")
            for i, a in enumerate(accs):
                r, u = divmod(i, len(widths))
                self.store_score(a, s[r], b.add(col, i64(u * lanes)), widths[u], mbase[r] if mbase else None,
                                 self.mask_top[r] if self.mask_top else None, self.row_top[r])

        if self.nv is None:
            _blocked(b, n, lanes, block)
        else:
            _blocked_dyn(b, self.nv, lanes, block)

    def _running_max(self, count: int) -> list[ir.Value]:
        """``count`` vector slots set to -inf here, for running maxima (stack slots in the entry block, which LLVM
        promotes to registers)."""
        b = self.b
        with b.goto_entry_block():
            slots = [b.alloca(self.vt) for _ in range(count)]
        for t in slots:
            b.store(const_like(self.vt, float("-inf")), t)
        return slots

    def store_score(self, a: ir.Value, s: ir.Value, j: ir.Value, w: Width, mbase: ir.Value | None,
                    mask_top: ir.Value | None, row_top: ir.Value) -> None:
        b, lanes = self.b, self.lanes
        sc = splat(b, self.scale, lanes)
        a = b.fdiv(a, sc) if self.div else b.fmul(a, sc)
        if mbase is not None:
            mk = self.mask_row(mbase, j, w)
            a = b.fadd(a, mk)
            if mask_top is not None:
                if _partial(w, lanes):
                    mk = b.select(self.lanes_on(w), mk, const_like(self.vt, float("-inf")))
                b.store(_fmax(b, b.load(mask_top), mk), mask_top)
        if _partial(w, lanes):  # the padding lanes of the scratch row: -inf adds nothing to max or sum
            a = b.select(self.lanes_on(w), a, const_like(self.vt, float("-inf")))
        vstore(b, a, s, j, 4)
        b.store(_fmax(b, b.load(row_top), a), row_top)

    def lanes_on(self, w: Width) -> ir.Value:
        return lane_mask(self.b, i64(w) if isinstance(w, int) else w, self.lanes)

    def mask_row(self, mbase: ir.Value, j: ir.Value, w: Width) -> ir.Value:
        b = self.b
        assert self.mask is not None and self.mask_at is not None
        if self.mask_at[2] == 0:
            return splat(b, b.load(b.gep(self.mask.ptr, [mbase])), self.lanes)
        return _load(b, self.mask.ptr, b.add(mbase, j), w, self.lanes)

    def softmax(self, s: list[ir.Value]) -> None:
        """exp(s - max) / sum in place over the padded rows ``s`` of the group, the rows side by side in each
        pass (independent chains: the latency of one row's max, sum and division hides behind the others'); each
        row's vector maximum was kept as its scores were stored (``row_top``).

        masked_rows zero: a row whose scores (or whose mask) are all -inf gets zeros in place."""
        b, lanes = self.b, self.lanes
        nvec: int | ir.Value = self.padded // lanes
        if self.nv is not None:  # the vectors the valid keys fill (the scratch row's lanes past them are -inf)
            nvec = b.udiv(b.add(self.nv, i64(lanes - 1)), i64(lanes))
        tops, deads = [], []
        for r in range(len(s)):
            m = hreduce(b, b.load(self.row_top[r]), _fmax)
            dead = None
            if self.zero:
                ninf = ir.Constant(F32, float("-inf"))
                dead = b.fcmp_ordered("==", m, ninf)
                if self.mask_top:
                    dead = b.or_(dead, b.fcmp_ordered("==", hreduce(b, b.load(self.mask_top[r]), _fmax), ninf))
                m = b.select(dead, ir.Constant(F32, 0.0), m)
            tops.append(splat(b, m, lanes))
            deads.append(dead)

        def expo(bb: ir.IRBuilder, j: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            pos = bb.mul(j, i64(lanes))
            out = []
            for sr, mv, dead, a in zip(s, tops, deads, acc):
                e = ew_math.exp(bb, bb.fsub(vload(bb, sr, pos, lanes, 4), mv))
                if dead is not None:
                    e = bb.select(dead, const_like(self.vt, 0.0), e)
                vstore(bb, e, sr, pos, 4)
                out.append(bb.fadd(a, e))
            return out

        totals = carried_loop(b, 0, nvec, [const_like(self.vt, 0.0)] * len(s), expo, name="exp")
        dens = []
        for total, dead in zip(totals, deads):
            den = hreduce(b, total, _fadd)
            if dead is not None:
                den = b.select(dead, ir.Constant(F32, 1.0), den)
            dens.append(splat(b, den, lanes))

        # the probabilities before the product with V, as Softmax then MatMul give them: scaling the
        # product by 1 / sum afterwards overflowed (sum_j e_j V[j] past the float range with V of 3e38)
        with for_range(b, 0, nvec, name="norm") as j:
            pos = b.mul(j, i64(lanes))
            for sr, denv in zip(s, dens):
                vstore(b, b.fdiv(vload(b, sr, pos, lanes, 4), denv), sr, pos, 4)

    def weighted(self, rows: list[ir.Value], bh: ir.Value, s: list[ir.Value]) -> None:
        """out[row, :] = sum_j s[j] V[j, :] for each of ``rows``."""
        b, lanes, dv = self.b, self.lanes, self.dv
        vbase, obase = b.mul(bh, i64(self.n * dv)), [b.mul(r, i64(dv)) for r in rows]

        def block(col: ir.Value, widths: list[int]) -> None:
            def step(bb: ir.IRBuilder, j: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
                vrow = bb.add(vbase, bb.add(bb.mul(j, i64(dv)), col))
                vals = [_load(bb, self.v.ptr, bb.add(vrow, i64(u * lanes)), w, lanes) for u, w in enumerate(widths)]
                ps = [splat(bb, bb.load(bb.gep(sr, [j])), lanes) for sr in s]
                return [ew_math.fmul_add(bb, ps[i // len(vals)], vals[i % len(vals)], a) for i, a in enumerate(accs)]

            zero = const_like(self.vt, 0.0)
            keys = self.n if self.nv is None else self.nv
            accs = carried_loop(b, 0, keys, [zero] * (len(widths) * len(rows)), step, name="pv")
            for i, a in enumerate(accs):
                r, u = divmod(i, len(widths))
                dst = b.add(obase[r], b.add(col, i64(u * lanes)))
                _store(b, a, self.out.ptr, dst, widths[u], lanes)

        _blocked(b, dv, lanes, block)

    def rows(self, first: ir.Value, count: int, bh: ir.Value, scratch: ir.Value) -> None:
        """The ``count`` consecutive rows from ``first``, start to end."""
        rows = [self.b.add(first, i64(r)) for r in range(count)]
        s = [self.b.gep(scratch, [i64(r * self.padded)]) for r in range(count)]
        self.scores(rows, bh, s)
        self.softmax(s)
        self.weighted(rows, bh, s)

    def emit(self) -> None:
        """Symbolic query rows: the groups covering the valid rows of each block (a group may run past them
        into the padding rows, never past the block's last row); symbolic batch axes: the blocks that hold data
        when they are a prefix, else all."""
        b, m = self.b, self.m
        blocks = self.q.type.size // (m * self.d) if m * self.d else 0
        if blocks == 0 or self.dv == 0:
            return
        group = min(self.group, m)
        groups, rest = -(-m // group), m % group
        per_block: ir.Value = i64(groups)
        if self.mv is not None:
            per_block = b.udiv(b.add(self.mv, i64(group - 1)), i64(group))
        vblocks = valid_rows(b, self.q, self.q.type.rank - 2)  # symbolic batch axes: the blocks that hold data
        items: int | ir.Value = blocks * groups if self.mv is None and vblocks is None else \
            b.mul(per_block, i64(blocks) if vblocks is None else vblocks)
        scratch = b.bitcast(self.ctx.scratch(group * self.padded * 4), F32.as_pointer())
        start, end = _rows(self.ctx, items, blocks * m * self.n * (self.d + self.dv))
        divisor = per_block if self.mv is None else smax(b, per_block, i64(1))  # (no items when 0 rows)
        with for_range(b, start, end, name="group") as item:
            bh = b.udiv(item, divisor)
            g = b.urem(item, divisor)
            first = b.add(b.mul(bh, i64(m)), b.mul(g, i64(group)))
            if not rest:
                self.rows(first, group, bh, scratch)
            else:
                last = b.icmp_signed("==", g, i64(groups - 1))
                with b.if_else(last) as (tail, full):
                    with tail:
                        self.rows(first, rest, bh, scratch)
                    with full:
                        self.rows(first, group, bh, scratch)


#: most keys per row: the scratch rows (4 x N floats per thread) stay small; longer rows are lowered
MAX_KEYS = 1 << 16


def _attention_ok(node: Node) -> bool:
    kt, q = node.inputs[1], node.inputs[0]
    return kt is not None and q is not None and 0 < kt.type.shape[-1] <= MAX_KEYS and q.type.shape[-1] > 0


@register_emitter("FusedAttention", when=_attention_ok, symbolic=True,
                  why=f"1 to {MAX_KEYS} keys and a non-empty head size")
def _attention(ctx: EmitContext, instr: Instr) -> None:
    _Attention(ctx, instr).emit()
