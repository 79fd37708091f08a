"""LRN (local response normalization across channels), float32, kept un-lowered: one pass over the input.

``y = x / (bias + alpha / size * sum of x^2 over channels [c - (size-1)//2, c + size//2]) ^ beta`` (NC + spatial
layout). The lowering (``glow_core/lowering/rules/norm.py``) squares the input, copies it into a zero-padded
channel axis and adds ``size`` shifted slices before the element-wise tail: three kernels and two tensors the
size of the input (AlexNet, ZFNet and GoogLeNet run it on their first layers' outputs). This kernel takes a
block of pixels at a time and, per channel, sums the squares of its window's channels in the lowering's order,
so every result is the lowered graph's bit for bit:

- the lowering adds its slices left to right, the padding's zeros among them; a square is +0, a positive
  number, +inf or NaN, so adding a zero changes nothing and the window's channels inside the tensor, added
  left to right from 0, give the same sum;
- ``bias + (alpha / size) * window`` is a multiply then an add (two roundings, no fused multiply-add), the
  constant ``alpha / size`` rounded to float32 as the lowering's scalar is;
- the power is the element-wise table's ``Pow`` (``ew_ops``: 0.75, LRN's usual beta, as ``sqrt(s) *
  sqrt(sqrt(s))``), then a true division.

A block is up to 4 vectors of pixels of one image; its window rows are read from L1 (C rows of 64 floats:
24 KiB for 96 channels). Blocks are shared out over the threads.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from glow_backend_cpu.emit.context import EmitContext, Instr, register_emitter
from glow_backend_cpu.emit.ew_ops import EW_OPS
from glow_backend_cpu.emit.vecops import F32P, c64, gep, masked_load, masked_store, vty
from glow_backend_cpu.helpers import carried_loop, const_like, for_range, iota, partition, smax, smin, splat
from glow_core.ir.types import ElemKind

#: vectors of pixels per block
BLOCK_VECTORS = 4


@register_emitter("LRN", elems=frozenset({ElemKind.FLOAT32}))
def emit_lrn(ctx: EmitContext, instr: Instr) -> None:
    y, x = instr.outs[0], instr.ins[0]
    assert x is not None
    shape = x.type.shape
    if math.prod(shape) == 0:
        return
    b = ctx.builder
    W = ctx.target.vector_lanes
    n_img, c = shape[0], shape[1]
    plane = math.prod(shape[2:])
    size = int(instr.attrs["size"])
    lo, hi = min((size - 1) // 2, c - 1), min(size // 2, c - 1)
    scale, bias, beta = (const_like(vty(W), float(np.float32(v)))
                         for v in (instr.attrs["alpha"] / size, instr.attrs["bias"], instr.attrs["beta"]))
    block = BLOCK_VECTORS * W
    per_img = -(-plane // block)
    xp, yp = b.bitcast(x.ptr, F32P), b.bitcast(y.ptr, F32P)
    i0, i1 = partition(b, n_img * per_img, ctx.tid, ctx.nthreads)
    with for_range(b, i0, i1, name="blk") as item:
        img = b.udiv(item, c64(per_img))
        p0 = b.mul(b.urem(item, c64(per_img)), c64(block))
        base = b.mul(img, c64(c * plane))
        masks = [b.icmp_signed("<", b.add(splat(b, b.add(p0, c64(v * W)), W), iota(W)), splat(b, c64(plane), W))
                 for v in range(BLOCK_VECTORS)]

        def row(ch: ir.Value) -> ir.Value:
            return gep(b, xp, b.add(b.add(base, b.mul(ch, c64(plane))), p0))

        with for_range(b, 0, c, name="ch") as ch:
            first = smax(b, b.sub(ch, c64(lo)), c64(0))
            stop = b.add(smin(b, b.add(ch, c64(hi)), c64(c - 1)), c64(1))

            def tap(bb: ir.IRBuilder, k: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
                src = row(k)
                out = []
                for v in range(BLOCK_VECTORS):
                    val = masked_load(bb, gep(bb, src, v * W), masks[v])
                    out.append(bb.fadd(acc[v], bb.fmul(val, val)))
                return out

            window = carried_loop(b, first, stop, [ir.Constant(vty(W), None)] * BLOCK_VECTORS, tap, name="win")
            src, dst = row(ch), gep(b, yp, b.add(b.add(base, b.mul(ch, c64(plane))), p0))
            for v in range(BLOCK_VECTORS):
                s = b.fadd(bias, b.fmul(scale, window[v]))
                denom = EW_OPS["Pow"](b, [s, beta], [ElemKind.FLOAT32, ElemKind.FLOAT32], ElemKind.FLOAT32, {})
                val = masked_load(b, gep(b, src, v * W), masks[v])
                masked_store(b, b.fdiv(val, denom), gep(b, dst, v * W), masks[v])
