"""MaxPool / AvgPool emitters.

float32 with 1 or 2 spatial axes is vectorized:

- **over the output width** (the usual case): each thread takes whole output
  rows; per window tap (kh, kw) one masked, possibly strided, vector load of
  the input row feeds a vector max / add. Taps outside the input (padding,
  the ceil_mode overhang) are masked off, so they never win a max and add
  nothing to a sum;
- **along the window** when the output is narrower than half a vector and the
  window is wide (global pooling): each output element reduces its window
  rows with vector loads, then across lanes.

The average divides by the per-position count, the product of the row count
and the column count (compile-time tables), with a true division, so it
matches the interpreter's ``total / counts``. The max is numpy's
``maximum(acc, x)`` in window order: NaN propagates, of two equal elements
(+0 and -0) the later one is kept. The rows path takes one vector max per tap
and checks for NaN once per chunk (``_PoolChunk.max_fast``). int8 / uint8
MaxPool with 1 or 2 spatial axes takes the same rows path on bytes
(``emit_maxpool_q8``). Other element kinds and 3+ spatial axes use a scalar loop.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from llvmlite import ir

from glow_backend_cpu.emit import dtypes
from glow_backend_cpu.emit.context import EmitContext, Instr, register_emitter
from glow_backend_cpu.emit.vecops import F32P, c64, gep, masked_store, strided_masked_load, vty
from glow_backend_cpu.emit.qvec import lane_range, masked_store_int, strided_load_i8, vec
from glow_backend_cpu.helpers import (I8, carried_loop, for_range, if_unlikely, iota, partition, smax, smin, splat,
                                     unravel, window_tap)
from glow_core.ir.defs.nn import MAXPOOL_KINDS
from glow_core.ir.types import FLOAT_KINDS, ElemKind

#: window widths above this take the scalar path, whose code size does not grow with the window
MAX_UNROLLED_TAPS = 256
#: vectors (accumulators) per step of the window path's loop over a window row longer than MAX_UNROLLED_TAPS
LOOP_VECTORS = 4


def axis_counts(size: int, out: int, k: int, s: int, d: int, pb: int, pe: int, include_pad: bool) -> np.ndarray:
    """Per output position along one axis: how many window taps the average's divisor counts."""
    lo, hi = (-pb, size + pe) if include_pad else (0, size)
    start = np.arange(out, dtype=np.int64) * s - pb  # tap j of output o sits at start[o] + j * d
    first = np.clip(-((start - lo) // d), 0, k)  # ceil((lo - start) / d): the first tap at or past lo
    end = np.clip(-((start - hi) // d), 0, k)  # ceil((hi - start) / d): the first tap at or past hi
    # in closed form: a window of 2**32 taps (kernel_shape from a hostile model) made a [out, k] table
    return np.maximum(end - first, 0).astype(np.float32)


def col_range(size: int, out: int, s: int, off: int) -> tuple[int, int]:
    """Output positions ``[lo, hi)`` whose tap at input offset ``o * s + off`` lies in ``[0, size)``.

    In closed form (stride ``s`` > 0): constant time, whatever the padding (a pad of 2**31-1 made a
    loop over every output column).
    """
    lo = min(out, max(0, -(off // s)))
    hi = max(lo, min(out, (size - 1 - off) // s + 1))
    return lo, hi


def np_max(b: ir.IRBuilder, acc: ir.Value, v: ir.Value) -> ir.Value:
    """numpy ``maximum(acc, v)``: ``acc`` when ``acc > v`` or ``acc`` is NaN, else ``v`` (of two equal
    elements, +0 and -0 among them, the later one, as numpy's ``maximum`` returns)."""
    keep = b.or_(b.fcmp_ordered(">", acc, v), b.fcmp_unordered("uno", acc, acc))
    return b.select(keep, acc, v)


@register_emitter("MaxPool", elems=MAXPOOL_KINDS)
@register_emitter("AvgPool", elems=FLOAT_KINDS)
def emit_pool(ctx: EmitContext, instr: Instr) -> None:
    y, x = instr.outs[0], instr.ins[0]
    assert x is not None
    if y.type.size == 0:
        return
    nd = x.type.rank - 2
    if instr.kind == "MaxPool" and y.type.elem in Q8 and nd in (1, 2) and ctx.target.vector_lanes >= 4:
        g = _geometry(x.type.shape, y.type.shape, instr.attrs)
        if g["KW"] <= MAX_UNROLLED_TAPS:
            emit_maxpool_q8(ctx, instr, g)
            return
    if y.type.elem is not ElemKind.FLOAT32 or nd not in (1, 2) or ctx.target.vector_lanes < 4:
        emit_pool_scalar(ctx, instr)
        return
    g = _geometry(x.type.shape, y.type.shape, instr.attrs)
    W = ctx.target.vector_lanes
    if g["OW"] * 2 <= W and g["KW"] * 2 >= W:  # long windows loop over their columns' vectors
        emit_pool_window(ctx, instr, g)
    elif g["KW"] > MAX_UNROLLED_TAPS:  # the rows path unrolls the window's columns: loop over them instead
        emit_pool_scalar(ctx, instr)
    else:
        emit_pool_rows(ctx, instr, g)


def _geometry(xs: Sequence[int], ys: Sequence[int], a: Mapping[str, Any]) -> dict[str, int]:
    """The pooling as 2-D (a 1-D one has H = OH = KH = 1): sizes, strides, dilations, begin/end pads."""
    k, st, dl, p = a["kernel_shape"], a["strides"], a["dilations"], a["pads"]
    names = ("NC", "H", "W", "OH", "OW", "KH", "KW", "sh", "sw", "dh", "dw", "ph", "pw", "peh", "pew")
    if len(xs) == 3:
        vals = (xs[0] * xs[1], 1, xs[2], 1, ys[2], 1, k[0], 1, st[0], 1, dl[0], 0, p[0], 0, p[1])
    else:
        vals = (xs[0] * xs[1], xs[2], xs[3], ys[2], ys[3], k[0], k[1], st[0], st[1], dl[0], dl[1], p[0], p[1],
                p[2], p[3])
    return dict(zip(names, vals))


def _count_tables(ctx: EmitContext, instr: Instr, g: dict[str, int], pad_w: int) -> tuple[ir.Value, ir.Value]:
    inc = bool(instr.attrs.get("count_include_pad", False))
    ch = axis_counts(g["H"], g["OH"], g["KH"], g["sh"], g["dh"], g["ph"], g["peh"], inc)
    cw = axis_counts(g["W"], g["OW"], g["KW"], g["sw"], g["dw"], g["pw"], g["pew"], inc)
    cw = np.concatenate([cw, np.ones(pad_w - len(cw), np.float32)])
    b = ctx.builder
    return (b.bitcast(ctx.add_constant(ch, f"{instr.name or 'pool'}.count_h"), F32P),
            b.bitcast(ctx.add_constant(cw, f"{instr.name or 'pool'}.count_w"), F32P))


def rows_clamp_exact(g: dict[str, int]) -> bool:
    """A MaxPool window row outside the image may read the nearest image row instead: with no row dilation,
    that row is inside the same window whenever the window holds an image row at all, which every output
    row's window does here (the windows' first rows rise with ``oh``: the first and last decide)."""
    first_ok = g["KH"] - 1 - g["ph"] >= 0
    last_ok = (g["OH"] - 1) * g["sh"] - g["ph"] <= g["H"] - 1
    return g["dh"] == 1 and first_ok and last_ok


def emit_pool_rows(ctx: EmitContext, instr: Instr, g: dict[str, int]) -> None:
    b = ctx.builder
    is_max = instr.kind == "MaxPool"
    W = ctx.target.vector_lanes
    y, x = instr.outs[0], instr.ins[0]
    assert x is not None
    OW, OH, KH, KW = g["OW"], g["OH"], g["KH"], g["KW"]
    nvo = -(-OW // W)
    CH = min(nvo, 4)
    nchunks = -(-nvo // CH)
    if not is_max:
        cnt_h, cnt_w = _count_tables(ctx, instr, g, nchunks * CH * W)
    ranges = [col_range(g["W"], OW, g["sw"], kw * g["dw"] - g["pw"]) for kw in range(KW)]
    unroll_kh = KH * KW * CH <= 96
    fast = is_max and rows_clamp_exact(g)
    rows = g["NC"] * OH
    r0, r1 = partition(b, rows, ctx.tid, ctx.nthreads)
    with for_range(b, r0, r1, name="row") as r:
        oh = b.urem(r, c64(OH))
        nc = b.udiv(r, c64(OH))
        xc = gep(b, x.ptr, b.mul(nc, c64(g["H"] * g["W"])))
        yrow = gep(b, y.ptr, b.mul(r, c64(OW)))
        ih0 = b.sub(b.mul(oh, c64(g["sh"])), c64(g["ph"]))
        with for_range(b, 0, nchunks, name="chunk") as ch:
            ow0 = b.mul(ch, c64(CH * W))
            owv = [b.add(splat(b, b.add(ow0, c64(v * W)), W), iota(W)) for v in range(CH)]
            lmask = [[b.and_(b.icmp_signed(">=", owv[v], splat(b, c64(lo), W)),
                             b.icmp_signed("<", owv[v], splat(b, c64(hi), W))) for v in range(CH)]
                     for lo, hi in ranges]
            chunk = _PoolChunk(g, is_max, W, CH, xc, ih0, b.sub(b.mul(ow0, c64(g["sw"])), c64(g["pw"])), lmask)
            if fast:
                acc = chunk.max_fast(b, unroll_kh)
            else:
                acc = chunk.reduce(b, unroll_kh)
            for v in range(CH):
                val = acc[v]
                if not is_max:
                    div = b.fmul(splat(b, b.load(gep(b, cnt_h, oh), align=4), W),
                                 b.load(b.bitcast(gep(b, cnt_w, b.add(ow0, c64(v * W))), vty(W).as_pointer()),
                                        align=4))
                    val = b.fdiv(val, div)
                smask = b.icmp_signed("<", owv[v], splat(b, c64(OW), W))
                masked_store(b, val, gep(b, yrow, b.add(ow0, c64(v * W))), smask)


class _PoolChunk:
    """The window taps of one chunk of ``CH`` output vectors of one output row (``emit_pool_rows``)."""

    def __init__(self, g: dict[str, int], is_max: bool, lanes: int, vectors: int, xc: ir.Value, ih0: ir.Value,
                 src_col: ir.Value, lmask: list[list[ir.Value]]) -> None:
        self.g, self.is_max, self.W, self.CH = g, is_max, lanes, vectors
        self.xc, self.ih0, self.src_col, self.lmask = xc, ih0, src_col, lmask

    def _loop(self, b: ir.IRBuilder, unroll: bool, init: list[ir.Value],
              body: Any) -> list[ir.Value]:
        if not unroll:
            return carried_loop(b, 0, self.g["KH"], init, body)
        acc = init
        for kh in range(self.g["KH"]):
            acc = body(b, c64(kh), acc)
        return acc

    def reduce(self, b: ir.IRBuilder, unroll: bool) -> list[ir.Value]:
        """The exact reduction: numpy's ``maximum`` (or the sum) in window order, rows outside the image masked."""
        g, W, CH = self.g, self.W, self.CH
        init = ir.Constant(vty(W), [-math.inf if self.is_max else 0.0] * W)

        def taps(b: ir.IRBuilder, kh: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            vmask, src_row = tap_row(b, g, self.xc, self.ih0, kh, self.src_col, W)
            out = list(acc)
            for kw in range(g["KW"]):
                for v in range(CH):
                    m = b.and_(self.lmask[kw][v], vmask)
                    val = strided_masked_load(b, gep(b, src_row, v * W * g["sw"] + kw * g["dw"]), m, g["sw"])
                    out[v] = b.select(m, np_max(b, out[v], val), out[v]) if self.is_max else b.fadd(out[v], val)
            return out

        return self._loop(b, unroll, [init] * CH, taps)

    def max_fast(self, b: ir.IRBuilder, unroll: bool) -> list[ir.Value]:
        """The max as ``acc > v ? acc : v`` (one vector max; of two equal elements the later one, as numpy's
        ``maximum``), rows outside the image clamped to the nearest one (``rows_clamp_exact``: a row read
        twice changes nothing), columns outside it loaded as -inf. That loses a NaN once a later tap is
        not NaN, so a sum of the taps rides along: when it holds a NaN (a NaN tap, or +inf and -inf taps)
        the chunk is reduced again by :meth:`reduce`."""
        g, W, CH = self.g, self.W, self.CH
        lowest = ir.Constant(vty(W), [-math.inf] * W)

        def taps(b: ir.IRBuilder, kh: ir.Value, carry: list[ir.Value]) -> list[ir.Value]:
            ih = smin(b, smax(b, b.add(self.ih0, kh), c64(0)), c64(g["H"] - 1))
            src_row = gep(b, self.xc, b.add(b.mul(ih, c64(g["W"])), self.src_col))
            acc, total = carry[:CH], carry[CH:]
            for kw in range(g["KW"]):
                for v in range(CH):
                    val = strided_masked_load(b, gep(b, src_row, v * W * g["sw"] + kw * g["dw"]),
                                              self.lmask[kw][v], g["sw"], fill=-math.inf)
                    acc[v] = b.select(b.fcmp_ordered(">", acc[v], val), acc[v], val)
                    total[v] = b.fadd(total[v], val)
            return acc + total

        carry = self._loop(b, unroll, [lowest] * CH + [ir.Constant(vty(W), None)] * CH, taps)
        fast, total = carry[:CH], carry[CH:]
        nan = b.fcmp_unordered("uno", total[0], total[0])
        for v in range(1, CH):
            nan = b.or_(nan, b.fcmp_unordered("uno", total[v], total[v]))
        any_nan = b.icmp_unsigned("!=", b.bitcast(nan, ir.IntType(W)), ir.Constant(ir.IntType(W), 0))
        before = b.block
        with if_unlikely(b, any_nan):
            exact = self.reduce(b, unroll)
            exact_end = b.block
        out = []
        for v in range(CH):
            phi = b.phi(vty(W))
            phi.add_incoming(fast[v], before)
            phi.add_incoming(exact[v], exact_end)
            out.append(phi)
        return out


def tap_row(b: ir.IRBuilder, g: dict[str, int], xc: ir.Value, ih0: ir.Value, kh: ir.Value, col: ir.Value,
            lanes: int) -> tuple[ir.Value, ir.Value]:
    """Window row ``kh``: (all lanes set when its input row lies inside the image, pointer to its column ``col``)."""
    ih = b.add(ih0, b.mul(kh, c64(g["dh"])))
    return splat(b, b.icmp_unsigned("<", ih, c64(g["H"])), lanes), gep(b, xc, b.add(b.mul(ih, c64(g["W"])), col))


def emit_pool_window(ctx: EmitContext, instr: Instr, g: dict[str, int]) -> None:
    """Narrow output, wide window: reduce each window with vectors along its rows, then across lanes."""
    b = ctx.builder
    is_max = instr.kind == "MaxPool"
    W = ctx.target.vector_lanes
    y, x = instr.outs[0], instr.ins[0]
    assert x is not None
    OW, OH, KH, KW = g["OW"], g["OH"], g["KH"], g["KW"]
    sw, dw = g["sw"], g["dw"]
    nv = -(-KW // W)
    looped = KW > MAX_UNROLLED_TAPS  # a global pooling of a long 1-D signal (Magika: 508 columns)
    if not is_max:
        cnt_h, cnt_w = _count_tables(ctx, instr, g, OW)
    init = ir.Constant(vty(W), [-math.inf if is_max else 0.0] * W)
    total = g["NC"] * OH * OW
    e0, e1 = partition(b, total, ctx.tid, ctx.nthreads)
    with for_range(b, e0, e1, name="o") as e:
        ow = b.urem(e, c64(OW))
        r = b.udiv(e, c64(OW))
        oh = b.urem(r, c64(OH))
        nc = b.udiv(r, c64(OH))
        xc = gep(b, x.ptr, b.mul(nc, c64(g["H"] * g["W"])))
        ih0 = b.sub(b.mul(oh, c64(g["sh"])), c64(g["ph"]))
        iw0 = b.sub(b.mul(ow, c64(sw)), c64(g["pw"]))
        # tap kw is inside the row when 0 <= iw0 + kw*dw < W
        masks = []
        for v in range(0 if looped else nv):
            kwv = b.add(splat(b, c64(v * W), W), iota(W))
            iw = b.add(splat(b, iw0, W), b.mul(kwv, splat(b, c64(dw), W)))
            m = b.and_(b.icmp_signed("<", kwv, splat(b, c64(KW), W)), b.icmp_unsigned("<", iw, splat(b, c64(g["W"]), W)))
            masks.append(m)

        def row(b: ir.IRBuilder, kh: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            vm, src = tap_row(b, g, xc, ih0, kh, iw0, W)
            if looped:
                return _window_chunks(b, g, src, vm, iw0, acc, is_max)
            out = list(acc)
            for v in range(nv):
                m = b.and_(masks[v], vm)
                val = strided_masked_load(b, gep(b, src, v * W * dw), m, dw)
                out[v] = b.select(m, np_max(b, out[v], val), out[v]) if is_max else b.fadd(out[v], val)
            return out

        acc = carried_loop(b, 0, KH, [init] * (LOOP_VECTORS if looped else nv), row)
        tot = acc[0]
        for v in acc[1:]:
            tot = np_max(b, tot, v) if is_max else b.fadd(tot, v)
        s = b.extract_element(tot, ir.Constant(ir.IntType(32), 0))
        for i in range(1, W):
            lane = b.extract_element(tot, ir.Constant(ir.IntType(32), i))
            s = np_max(b, s, lane) if is_max else b.fadd(s, lane)
        if not is_max:
            s = b.fdiv(s, b.fmul(b.load(gep(b, cnt_h, oh), align=4), b.load(gep(b, cnt_w, ow), align=4)))
        b.store(s, gep(b, y.ptr, e), align=4)


def _window_chunks(b: ir.IRBuilder, g: dict[str, int], src: ir.Value, vm: ir.Value, iw0: ir.Value,
                   acc: list[ir.Value], is_max: bool) -> list[ir.Value]:
    """One window row of a long window: a loop over chunks of ``len(acc)`` vectors of its columns, one
    accumulator per vector; column ``kw`` counts when ``kw < KW`` and ``0 <= iw0 + kw * dw < W``."""
    W = vm.type.count
    U, KW, dw = len(acc), g["KW"], g["dw"]

    def chunk(b: ir.IRBuilder, kw0: ir.Value, cur: list[ir.Value]) -> list[ir.Value]:
        out = list(cur)
        for v in range(U):
            kwv = b.add(splat(b, b.add(kw0, c64(v * W)), W), iota(W))
            iw = b.add(splat(b, iw0, W), b.mul(kwv, splat(b, c64(dw), W)))
            m = b.and_(b.and_(b.icmp_signed("<", kwv, splat(b, c64(KW), W)),
                              b.icmp_unsigned("<", iw, splat(b, c64(g["W"]), W))), vm)
            val = strided_masked_load(b, gep(b, src, b.mul(b.add(kw0, c64(v * W)), c64(dw))), m, dw)
            out[v] = b.select(m, np_max(b, out[v], val), out[v]) if is_max else b.fadd(out[v], val)
        return out

    return carried_loop(b, 0, KW, acc, chunk, step=U * W, name="kwc")


# -- 8-bit integer MaxPool ---------------------------------------------------------------------------------------

Q8 = frozenset({ElemKind.INT8, ElemKind.UINT8})


def emit_maxpool_q8(ctx: EmitContext, instr: Instr, g: dict[str, int]) -> None:
    """int8 / uint8 MaxPool over the output width in bytes (4 float vectors' worth of lanes), no float round trip.

    As the float rows path, per window tap one masked, possibly strided, byte load of the input row; lanes
    outside the input read the type's minimum, which never wins (and is the interpreter's empty-window value).
    """
    b = ctx.builder
    L = min(64, 4 * ctx.target.vector_lanes)
    y, x = instr.outs[0], instr.ins[0]
    assert x is not None
    signed = y.type.elem is ElemKind.INT8
    OW, OH, KH, KW = g["OW"], g["OH"], g["KH"], g["KW"]
    nvo = -(-OW // L)
    CH = min(nvo, 2)
    nchunks = -(-nvo // CH)
    ranges = [col_range(g["W"], OW, g["sw"], kw * g["dw"] - g["pw"]) for kw in range(KW)]
    lowest = ir.Constant(vec(L, I8), [int(np.iinfo(y.type.elem.dtype).min)] * L)
    cmp = b.icmp_signed if signed else b.icmp_unsigned
    r0, r1 = partition(b, g["NC"] * OH, ctx.tid, ctx.nthreads)
    with for_range(b, r0, r1, name="row") as r:
        oh = b.urem(r, c64(OH))
        xc = gep(b, x.ptr, b.mul(b.udiv(r, c64(OH)), c64(g["H"] * g["W"])))
        yrow = gep(b, y.ptr, b.mul(r, c64(OW)))
        ih0 = b.sub(b.mul(oh, c64(g["sh"])), c64(g["ph"]))
        with for_range(b, 0, nchunks, name="chunk") as ch:
            ow0 = b.mul(ch, c64(CH * L))
            firsts = [b.add(ow0, c64(v * L)) for v in range(CH)]
            lmask = [[lane_range(b, f, L, lo, hi) for f in firsts] for lo, hi in ranges]
            src_col = b.sub(b.mul(ow0, c64(g["sw"])), c64(g["pw"]))

            def taps(b: ir.IRBuilder, kh: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
                vmask, src_row = tap_row(b, g, xc, ih0, kh, src_col, L)
                out = list(acc)
                for kw in range(KW):
                    for v in range(CH):
                        val = strided_load_i8(b, gep(b, src_row, v * L * g["sw"] + kw * g["dw"]),
                                              b.and_(lmask[kw][v], vmask), g["sw"], lowest)
                        out[v] = b.select(cmp(">", val, out[v]), val, out[v])
                return out

            acc = carried_loop(b, 0, KH, [lowest] * CH, taps)
            for v in range(CH):
                masked_store_int(b, acc[v], gep(b, yrow, firsts[v]), lane_range(b, firsts[v], L, 0, OW))


# -- scalar path ------------------------------------------------------------------------------------------------

def emit_pool_scalar(ctx: EmitContext, instr: Instr) -> None:
    b = ctx.builder
    is_max = instr.kind == "MaxPool"
    y, x = instr.outs[0], instr.ins[0]
    assert x is not None
    elem = y.type.elem
    ct = dtypes.compute_type(elem)
    a = instr.attrs
    xs, ys = x.type.shape, y.type.shape
    nd = len(xs) - 2
    sp_in, sp_out, kern = xs[2:], ys[2:], a["kernel_shape"]
    st, dl, pads = a["strides"], a["dilations"], a["pads"]
    OP, IP, KP = math.prod(sp_out), math.prod(sp_in), math.prod(kern)
    is_f = dtypes.is_float(elem)
    signed = dtypes.is_signed(elem)
    if is_max:
        if is_f:
            init: ir.Constant = ir.Constant(ct, -math.inf)
        else:
            init = ir.Constant(ct, int(np.iinfo(elem.dtype).min))
    else:
        init = ir.Constant(ct, 0.0)
        inc = bool(a.get("count_include_pad", False))
        tables = [axis_counts(sp_in[d], sp_out[d], kern[d], st[d], dl[d], pads[d], pads[nd + d], inc)
                  for d in range(nd)]
        counts = np.ones(sp_out, np.float64)
        for d in range(nd):
            counts = counts * tables[d].astype(np.float64).reshape((-1,) + (1,) * (nd - 1 - d))
        cnt = b.bitcast(ctx.add_constant(counts.astype(np.float32).reshape(-1), f"{instr.name or 'pool'}.counts"),
                        F32P)
    total = xs[0] * xs[1] * OP
    e0, e1 = partition(b, total, ctx.tid, ctx.nthreads)
    with for_range(b, e0, e1, name="o") as e:
        o = b.urem(e, c64(OP))
        nc = b.udiv(e, c64(OP))
        oc = unravel(b, o, sp_out)
        accp = b.alloca(ct)
        b.store(init, accp)
        with for_range(b, 0, KP, name="kk") as kk:
            inb, flat = window_tap(b, oc, unravel(b, kk, kern), sp_in, st, pads, dl)
            with b.if_then(inb):
                v = dtypes.to_compute(b, b.load(gep(b, x.ptr, b.add(b.mul(nc, c64(IP)), flat))), elem)
                acc = b.load(accp)
                if not is_max:
                    r = b.fadd(acc, v)
                elif is_f:
                    r = np_max(b, acc, v)
                else:
                    cmp = b.icmp_signed if signed else b.icmp_unsigned
                    r = b.select(cmp(">=", acc, v), acc, v)
                b.store(r, accp)
        r = b.load(accp)
        if not is_max:
            c = b.load(gep(b, cnt, o), align=4)
            r = b.fdiv(r, c if isinstance(ct, ir.FloatType) else b.fpext(c, ct))
        b.store(dtypes.to_storage(b, r, elem), gep(b, y.ptr, e))
