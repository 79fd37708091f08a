"""IntConv with groups (depthwise and other narrow groups), vectorized over the output width.

The fused int8 kernels (``qconv.py``) take group-1 convolutions; a grouped one
(depthwise: group == channels) is lowered onto IntConv + Requantize, and IntConv
with 1 or 2 spatial axes and more than one group runs here, as the float
``conv.emit_conv_direct`` does: each thread takes whole output rows; per
filter tap, one masked (possibly strided) byte load of the input row, widened
to int32, minus the input zero point, times the broadcast ``W - FilterZero``,
added to int32 accumulators. Lanes outside the input (padding) read the input
zero point and so add 0. int32 arithmetic wraps exactly as the reference's
int64 sum truncated to int32; Requantize, an element-wise operation, follows.
"""

from __future__ import annotations

from llvmlite import ir

from glow_backend_cpu.emit.context import EmitContext, Instr
from glow_backend_cpu.emit.conv import ConvShape
from glow_backend_cpu.emit.conv_coords import conv_coords
from glow_backend_cpu.emit.dtypes import UNSIGNED
from glow_backend_cpu.emit.vecops import c64, gep
from glow_backend_cpu.emit.qvec import lane_range, masked_store_int, strided_load_i8, vec
from glow_backend_cpu.helpers import I32, carried_loop, for_range, partition, splat
from glow_core.ir.types import ElemKind


def _widen32(b: ir.IRBuilder, v: ir.Value, elem: ElemKind) -> ir.Value:
    t = vec(v.type.count, I32) if isinstance(v.type, ir.VectorType) else I32
    return b.zext(v, t) if elem in UNSIGNED else b.sext(v, t)


def emit_intconv_direct(ctx: EmitContext, instr: Instr, s: ConvShape) -> None:
    b = ctx.builder
    y = instr.outs[0]
    x, w, xz, wz = instr.ins[:4]
    bias = instr.ins[4] if len(instr.ins) > 4 else None
    L = ctx.target.vector_lanes  # int32 lanes of one register
    nvo = -(-s.OW // L)
    CH = min(nvo, 4)
    nchunks = -(-nvo // CH)
    KHKW = s.KH * s.KW
    ranges = [s.col_range(kw) for kw in range(s.KW)]
    xe, we = x.type.elem, w.type.elem
    xz_byte = b.load(xz.ptr)
    xz_fill = splat(b, xz_byte, L)
    xz32 = splat(b, _widen32(b, xz_byte, xe), L)
    r0, r1 = partition(b, s.N * s.M * s.OH, ctx.tid, ctx.nthreads)
    with for_range(b, r0, r1, name="row") as r:
        cc = conv_coords(b, r, s.OH, s.M, s.Mg)
        xg = gep(b, x.ptr, b.mul(b.add(b.mul(cc.image, c64(s.C)), b.mul(cc.group, c64(s.Cg))), c64(s.H * s.W)))
        wrow = gep(b, w.ptr, b.mul(cc.channel, c64(s.Cg * KHKW)))
        wzv = _widen32(b, b.load(gep(b, wz.ptr, cc.channel if wz.type.size > 1 else c64(0))), we)
        init = splat(b, b.load(gep(b, bias.ptr, cc.channel)) if bias is not None else ir.Constant(I32, 0), L)
        yrow = gep(b, y.ptr, b.mul(r, c64(s.OW)))
        ih0 = b.sub(b.mul(cc.pixel, c64(s.sh)), c64(s.ph))
        with for_range(b, 0, nchunks, name="chunk") as ch:
            ow0 = b.mul(ch, c64(CH * L))
            firsts = [b.add(ow0, c64(v * L)) for v in range(CH)]
            lmask = [[lane_range(b, f, L, lo, hi) for f in firsts] for lo, hi in ranges]
            src_col = b.sub(b.mul(ow0, c64(s.sw)), c64(s.pw))

            def channel(b: ir.IRBuilder, ic: ir.Value, cur: list[ir.Value]) -> list[ir.Value]:
                xc = gep(b, xg, b.mul(ic, c64(s.H * s.W)))
                wc = gep(b, wrow, b.mul(ic, c64(KHKW)))

                def taps(b: ir.IRBuilder, kh: ir.Value, cur: list[ir.Value]) -> list[ir.Value]:
                    ih = b.add(ih0, b.mul(kh, c64(s.dh)))
                    vmask = splat(b, b.icmp_unsigned("<", ih, c64(s.H)), L)
                    src_row = gep(b, xc, b.add(b.mul(ih, c64(s.W)), src_col))
                    out = list(cur)
                    for kw in range(s.KW):
                        wv = b.sub(_widen32(b, b.load(gep(b, wc, b.add(b.mul(kh, c64(s.KW)), c64(kw)))), we), wzv)
                        wv = splat(b, wv, L)
                        for v in range(CH):
                            raw = strided_load_i8(b, gep(b, src_row, v * L * s.sw + kw * s.dw),
                                                  b.and_(lmask[kw][v], vmask), s.sw, xz_fill)
                            out[v] = b.add(out[v], b.mul(b.sub(_widen32(b, raw, xe), xz32), wv))
                    return out

                return carried_loop(b, 0, s.KH, cur, taps, name="kh")

            acc = carried_loop(b, 0, s.Cg, [init] * CH, channel, name="ic")
            for v in range(CH):
                masked_store_int(b, acc[v], gep(b, yrow, firsts[v]), lane_range(b, firsts[v], L, 0, s.OW))


def direct_fits(ctx: EmitContext, instr: Instr) -> bool:
    """Grouped, 1 or 2 spatial axes, 8-bit input / filter / input zero point, a vector target."""
    x, w = instr.ins[0], instr.ins[1]
    return instr.attrs["group"] > 1 and x.type.rank in (3, 4) and ctx.target.vector_lanes >= 4 \
        and x.type.elem in (ElemKind.INT8, ElemKind.UINT8) and w.type.elem in (ElemKind.INT8, ElemKind.UINT8) \
        and instr.ins[2].type.elem is x.type.elem

