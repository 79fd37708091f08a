"""Depthwise float32 convolutions with narrow output rows: one output plane at a time, rows in blocks.

The direct path (``conv.emit_conv_direct``) computes one output row at a time,
loading the input rows of every tap and broadcasting every filter tap again
for each row. A depthwise convolution (one input channel per group) whose
output row fits in a few vectors (MobileNet / PP-LCNet / PicoDet stages at
28x28, 14x14, 7x7) spends more on those loads and broadcasts than on its
multiply-adds, worst with stride 2, where each output vector reads twice its
width. Here each thread takes whole output planes; per plane the filter taps
are broadcast once, and output rows are computed in blocks of ``R``: every
input row the block touches is loaded once per tap column and feeds each
output row of the block that uses it. One block's code serves every block
of the plane: an input row outside the image reads 0.0 (its loads read row 0
and a select drops them), a row past the output is not stored; column masks
are constants.

Per output element the taps are summed in the same order as the direct path
(kh, then kw, from 0.0; then bias, residual, activation), so both give the
same bits; a tap over a padding row multiplies 0.0 as the direct path's
masked load does (an infinite weight still gives NaN there, as the spec's
zero padding does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llvmlite import ir

from glow_backend_cpu.emit.context import EmitContext, Operand
from glow_backend_cpu.emit.vecops import activation, c64, fma, gep, masked_load, masked_store, strided_masked_load, vty
from glow_backend_cpu.helpers import I1, for_range, partition, splat

if TYPE_CHECKING:
    from glow_backend_cpu.emit.conv import ConvShape

#: most multiply-add vectors one block of output rows may hold (code size and compile time)
MAX_BLOCK_FMAS = 512
#: most vectors an output row may span
MAX_ROW_VECTORS = 4


def _rows_per_block(nvo: int, oh: int) -> int:
    """At most 8 accumulators (R * nvo), and blocks of even size: 14 rows are two blocks of 7, not 8 + 6."""
    most = max(1, 8 // nvo)
    return -(-oh // -(-oh // most))


def depthwise_rows_fit(s: ConvShape, lanes: int) -> bool:
    """Does this convolution take the row-block path? (depthwise, rows of at most 4 vectors, bounded blocks)"""
    nvo = -(-s.OW // lanes)
    return s.Cg == 1 and 1 <= nvo <= MAX_ROW_VECTORS and \
        _rows_per_block(nvo, s.OH) * s.KH * s.KW * nvo <= MAX_BLOCK_FMAS


def _lane_mask(lanes: int, valid: list[bool]) -> ir.Constant:
    return ir.Constant(vty(lanes, I1), [1 if v else 0 for v in valid])


@dataclass(frozen=True)
class _Plane:
    """What every block of one output plane shares."""

    s: ConvShape
    L: int
    nvo: int
    R: int
    xc: ir.Value
    yp: ir.Value
    res: ir.Value | None
    taps: list[list[ir.Value]]
    bias: ir.Value | None
    cmask: list[list[list[bool]]]
    smask: list[ir.Constant]
    act: tuple[str, float, float]


def emit_conv_depthwise_rows(ctx: EmitContext, s: ConvShape, x: Operand, w: Operand, bias: Operand | None,
                             y: Operand, act: str, lo: float, hi: float, res: Operand | None = None) -> None:
    """Emit the plane-per-thread, row-block kernel (see the module doc)."""
    b = ctx.builder
    L = ctx.target.vector_lanes
    nvo = -(-s.OW // L)
    R = _rows_per_block(nvo, s.OH)
    # column masks: lane i of vector v of tap kw reads input column (v*L + i)*sw + kw*dw - pw
    cols = [s.col_range(kw) for kw in range(s.KW)]
    cmask = [[[cols[kw][0] <= v * L + i < cols[kw][1] for i in range(L)] for v in range(nvo)] for kw in range(s.KW)]
    smask = [_lane_mask(L, [v * L + i < s.OW for i in range(L)]) for v in range(nvo)]
    p0, p1 = partition(b, s.N * s.M, ctx.tid, ctx.nthreads)
    with for_range(b, p0, p1, name="plane") as pl:
        oc = b.urem(pl, c64(s.M))
        nb = b.udiv(pl, c64(s.M))
        ic = b.udiv(oc, c64(s.Mg))
        wc = gep(b, w.ptr, b.mul(oc, c64(s.KH * s.KW)))
        plane = _Plane(s, L, nvo, R, gep(b, x.ptr, b.mul(b.add(b.mul(nb, c64(s.C)), ic), c64(s.H * s.W))),
                       gep(b, y.ptr, b.mul(pl, c64(s.OH * s.OW))),
                       gep(b, res.ptr, b.mul(pl, c64(s.OH * s.OW))) if res is not None else None,
                       [[splat(b, b.load(gep(b, wc, kh * s.KW + kw), align=4), L) for kw in range(s.KW)]
                        for kh in range(s.KH)],
                       splat(b, b.load(gep(b, bias.ptr, oc), align=4), L) if bias is not None else None,
                       cmask, smask, (act, lo, hi))
        with for_range(b, 0, -(-s.OH // R), name="block") as k:
            _block(b, plane, b.mul(k, c64(R)))


def _block(b: ir.IRBuilder, p: _Plane, oh0: ir.Value) -> None:
    """Output rows ``oh0 .. oh0 + R - 1``: each input row they touch is loaded once per tap column (a row
    outside the input reads 0.0; a row past the output is computed and not stored)."""
    s, L = p.s, p.L
    rows = range(p.R)
    zero = ir.Constant(vty(L), None)
    acc: dict[tuple[int, int], ir.Value] = {(r, v): zero for r in rows for v in range(p.nvo)}
    uses: dict[int, list[tuple[int, int]]] = {}  # input row relative to oh0*sh - ph -> (row, kh) reading it
    for r in rows:
        for kh in range(s.KH):
            uses.setdefault(r * s.sh + kh * s.dh, []).append((r, kh))
    base = b.sub(b.mul(oh0, c64(s.sh)), c64(s.ph))
    last = (-(-s.OH // p.R) - 1) * p.R * s.sh - s.ph  # the last block's base row
    for j in sorted(uses):  # ascending input rows: each output row sees its taps in kh order
        ih = b.add(base, c64(j))
        keep = None
        if -s.ph + j < 0 or last + j >= s.H:  # outside the image for some block
            # such a row reads row 0 (always there) and then takes 0.0: the loads keep constant masks
            inside = b.icmp_unsigned("<", ih, c64(s.H))
            ih = b.select(inside, ih, c64(0))
            keep = splat(b, inside, L)
        xrow = gep(b, p.xc, b.mul(ih, c64(s.W)))
        for kw in range(s.KW):
            for v in range(p.nvo):
                if any(p.cmask[kw][v]):
                    col = v * L * s.sw + kw * s.dw - s.pw
                    val = strided_masked_load(b, gep(b, xrow, col), _lane_mask(L, p.cmask[kw][v]), s.sw)
                    if keep is not None:
                        val = b.select(keep, val, zero)
                else:
                    val = zero  # a padding column: 0.0, as the direct path's masked load gives
                for r, kh in uses[j]:
                    acc[(r, v)] = fma(b, p.taps[kh][kw], val, acc[(r, v)])
    for r in rows:
        oh = b.add(oh0, c64(r))
        real = splat(b, b.icmp_unsigned("<", oh, c64(s.OH)), L)
        off0 = b.mul(oh, c64(s.OW))
        for v in range(p.nvo):
            val = acc[(r, v)]
            if p.bias is not None:
                val = b.fadd(val, p.bias)
            off = b.add(off0, c64(v * L))
            mask = b.and_(p.smask[v], real)
            if p.res is not None:
                val = b.fadd(val, masked_load(b, gep(b, p.res, off), mask))
            masked_store(b, activation(b, val, *p.act), gep(b, p.yp, off), mask)
