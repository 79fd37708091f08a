"""Conv / FusedConv emitters.

float32 with 1 or 2 spatial axes takes one of two vectorized paths:

- **GEMM** (``Mg = M/group >= 4``): per batch image and group,
  ``Y[Mg, OH*OW] = F[Mg, Cg*KH*KW] x im2col(X)[Cg*KH*KW, OH*OW]``. The filter
  is packed at compile time into MR-row panels (``pack.pack_a_panels``); the
  im2col operand is never materialized: each thread packs one
  ``K-block x NR`` tile at a time into its scratch, reading each (ic, kh, kw)
  row of a tile as one masked vector load per output-row segment (stride 1
  contiguous, strides 2..4 as a wide load plus a lane shuffle, larger ones as a
  gather; padding lanes masked off). A 1x1 stride-1 unpadded convolution packs
  plain rows of the input. Bias and activation run in the micro-kernel's
  epilogue. K blocks are whole input channels (at most ``KC_L1`` rows, so the tile stays in L1).
  Stride-1 convolutions with few output channels read B in place instead
  (``taps.py``: no im2col tile, each tap a constant offset into the input). With the precision bf16 every
  convolution with a constant filter that the GEMM, Winograd or transposed paths would take runs here, on
  bf16 pairs (``bf16.py``: the filter rounded now, each im2col tile packed in pairs; no taps).
- **direct** (depthwise and other narrow groups): each thread computes whole
  output rows, vectorized over the output width, with the filter taps as
  broadcast scalars.

Other element kinds, and 3 or more spatial axes, use a scalar loop nest that
follows the interpreter's arithmetic (float16 / bfloat16 accumulate in float32
and round once; the activation sees the rounded value).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from glow_backend_cpu.emit import dtypes
from glow_backend_cpu.emit.context import EmitContext, Instr, Operand, register_emitter
from glow_backend_cpu.emit.bf16 import bf16_enabled, conv_operands_bf16
from glow_backend_cpu.emit.conv_coords import conv_coords
from glow_backend_cpu.emit.conv1d_winograd import conv1d_winograd_fits, emit_conv1d_winograd
from glow_backend_cpu.emit.depthwise import depthwise_rows_fit, emit_conv_depthwise_rows
from glow_backend_cpu.emit.gemm import (
    KC_L1,
    KC_MAX,
    BPack,
    GemmPlan,
    UKernel,
    emit_gemm,
    get_ukernel,
    kblock_bounds,
    kblock_flags,
)
from glow_backend_cpu.emit.gemm_dispatch import dispatch_variant
from glow_backend_cpu.emit.gemm_pack import pack_rows
from glow_backend_cpu.emit.gemm_share import weighted_share
from glow_backend_cpu.emit.taps import read_taps_in_place, taps_fit
from glow_backend_cpu.emit.winograd import emit_conv_winograd, winograd_fits
from glow_backend_cpu.emit.vecops import (
    F32P,
    Geometry,
    activation,
    c64,
    fma,
    geometry,
    gep,
    masked_load,
    masked_store,
    strided_masked_load,
    vty,
)
from glow_backend_cpu.helpers import (
    carried_loop,
    for_range,
    iota,
    partition,
    smax,
    smin,
    splat,
    unravel,
    window_tap,
)
from glow_backend_cpu.pack import conv_filter_matrix, even_blocks, pack_a_panels, pack_b_panels
from glow_core.ir.types import FLOAT_KINDS, ElemKind


#: the transposed path takes output planes of at most this many pixel tiles (NR pixels each)
PLANE_T = 4
#: K block of the transposed path: a 6 x 4 micro-kernel's filter panel block, KC_T x 64 floats (24 KiB), stays in
#: L1 while every pixel panel of the tile streams past it (with blocks near 128K floats of the tile, read from
#: L2, ResNet-50's 7 x 7 and 14 x 14 layers ran 5-20 % slower)
KC_T = 96


@dataclass(frozen=True)
class ConvShape:
    """A convolution with 1 or 2 spatial axes seen as 2-D (a 1-D one has H = KH = OH = 1)."""

    N: int
    C: int
    H: int
    W: int
    M: int
    KH: int
    KW: int
    OH: int
    OW: int
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int
    G: int

    @property
    def Cg(self) -> int:
        return self.C // self.G

    @property
    def Mg(self) -> int:
        return self.M // self.G

    @property
    def K(self) -> int:
        return self.Cg * self.KH * self.KW

    @property
    def flops(self) -> int:
        return 2 * self.N * self.M * self.OH * self.OW * self.K

    @property
    def pointwise(self) -> bool:
        """A 1x1 stride-1 unpadded convolution: its im2col rows are the input's plain channel rows."""
        return self.KH == 1 and self.KW == 1 and self.sh == 1 and self.sw == 1 and self.ph == 0 and self.pw == 0 \
            and self.OH == self.H and self.OW == self.W

    def col_range(self, kw: int) -> tuple[int, int]:
        """Output columns ``[lo, hi)`` whose input column for tap ``kw`` lies inside the row."""
        off = kw * self.dw - self.pw
        lo = min(self.OW, max(0, -(off // self.sw)))  # closed form: constant time whatever the padding
        hi = max(lo, min(self.OW, (self.W - 1 - off) // self.sw + 1))
        return lo, hi


def conv_shape(x: tuple[int, ...], w: tuple[int, ...], y: tuple[int, ...], attrs: Mapping[str, Any]) -> ConvShape:
    st, pads, dil = attrs["strides"], attrs["pads"], attrs["dilations"]
    if len(x) == 3:
        return ConvShape(x[0], x[1], 1, x[2], w[0], 1, w[2], 1, y[2], 1, st[0], 0, pads[0], 1, dil[0],
                         attrs["group"])
    return ConvShape(x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3], st[0], st[1], pads[0], pads[1],
                     dil[0], dil[1], attrs["group"])


def as_row(s: ConvShape) -> ConvShape:
    """A 2-D convolution over a column (``W = KW = OW = 1``, no column padding: a 1-D one exported as
    ``[N, C, L, 1]`` with a ``K x 1`` filter) as the 1-D convolution it is, along the row (``H = 1``).

    The memory layouts are the same (``[N, C, L, 1]`` is ``[N, C, L]``, the filter ``[M, Cg, K, 1]`` is
    ``[M, Cg, K]``), but the vector paths cut the output plane into output rows: as a column, every
    row was one pixel (the im2col packer ran one masked load per tap and pixel, Magika's 5 x 1 convolution
    at about 70 GFLOP/s on 2 threads), as a row the pixels are consecutive lanes."""
    if s.W != 1 or s.KW != 1 or s.OW != 1 or s.pw != 0 or s.H == 1:
        return s
    return ConvShape(s.N, s.C, 1, s.H, s.M, 1, s.KH, 1, s.OH, 1, s.sh, 0, s.ph, 1, s.dh, s.G)


def act_of(attrs: Mapping[str, Any], elem: ElemKind = ElemKind.FLOAT32) -> tuple[str, float, float]:
    """The fused activation and its bounds rounded to the element kind (as the interpreter's Clip does)."""
    act = attrs.get("activation", "none")
    lo, hi = attrs.get("clip_min", -math.inf), attrs.get("clip_max", math.inf)
    if act == "clip":
        if math.isinf(lo) and math.isinf(hi):
            return "none", lo, hi
        if not elem.is_float:  # integer bounds are converted by the integer activation itself
            return act, lo, hi
        dt = elem.dtype
        lo = -math.inf if math.isinf(lo) else float(np.asarray(lo).astype(dt).astype(np.float64))
        hi = math.inf if math.isinf(hi) else float(np.asarray(hi).astype(dt).astype(np.float64))
    return act, lo, hi


def _ins(instr: Instr) -> tuple[Operand, Operand, Operand | None, Operand | None]:
    """Input, filter, bias and (FusedConv) residual."""
    ins = list(instr.ins) + [None] * 4
    return ins[0], ins[1], ins[2], ins[3]  # type: ignore[return-value]


@register_emitter("Conv", "FusedConv", elems=FLOAT_KINDS)
def emit_conv(ctx: EmitContext, instr: Instr) -> None:
    y = instr.outs[0]
    x, w, bias, res = _ins(instr)
    elem = y.type.elem
    nd = x.type.rank - 2
    if y.type.size == 0:
        return
    if elem is not ElemKind.FLOAT32 or nd not in (1, 2) or ctx.target.vector_lanes < 4:
        emit_conv_scalar(ctx, instr)
        return
    s = as_row(conv_shape(x.type.shape, w.type.shape, y.type.shape, instr.attrs))
    act, lo, hi = act_of(instr.attrs)
    bf16 = bf16_conv(ctx, s, w)  # (the GEMM path: faster on bf16 than Winograd on float32)
    if winograd_fits(s, ctx.target.vector_lanes, w.const_value is not None, res is not None) and not bf16:
        emit_conv_winograd(ctx, s, x, w, bias, y, act, lo, hi, instr.name)
    elif conv1d_winograd_fits(s, ctx.target.vector_lanes, w.const_value is not None, res is not None):
        emit_conv1d_winograd(ctx, s, x, w, bias, y, act, lo, hi, instr.name)
    elif transposed_fits(s, ctx.target.vector_lanes) and w.const_value is not None and not bf16:
        emit_conv_gemm_t(ctx, s, x, w, bias, y, act, lo, hi, instr.name, res=res)
    elif s.Mg >= 4 and s.K >= 4:
        emit_conv_gemm(ctx, s, x, w, bias, y, act, lo, hi, instr.name, res=res)
    elif depthwise_rows_fit(s, ctx.target.vector_lanes):
        emit_conv_depthwise_rows(ctx, s, x, w, bias, y, act, lo, hi, res=res)
    else:
        emit_conv_direct(ctx, s, x, w, bias, y, act, lo, hi, res=res)


# -- GEMM path --------------------------------------------------------------------------------------------------

def conv_plan(ctx: EmitContext, s: ConvShape, x: Operand, w: Operand, bias: Operand | None, y: Operand,
              act: str, lo: float, hi: float, name: str = "", res: Operand | None = None) -> GemmPlan:
    geo = geometry(ctx.target.vector_lanes)
    MR = geo.mr
    K, Mg, G = s.K, s.Mg, s.G
    OHW = s.OH * s.OW
    b = ctx.builder
    yp = y.ptr

    def block_of(p: ir.Value) -> Any:
        def ptr(b: ir.IRBuilder, bg: ir.Value, m0: ir.Value, n0: ir.Value) -> ir.Value:
            # bg = nb * G + g and channel = g * Mg + m0: (nb * M + g * Mg + m0) = bg * Mg + m0
            return gep(b, p, b.add(b.mul(b.add(b.mul(bg, c64(Mg)), m0), c64(OHW)), n0))
        return ptr
    c_ptr = block_of(yp)

    bias_ptr = None
    if bias is not None:
        bp = bias.ptr

        def bias_ptr(b: ir.IRBuilder, bg: ir.Value, m0: ir.Value, n0: ir.Value) -> ir.Value:
            return gep(b, bp, b.add(b.mul(b.urem(bg, c64(G)), c64(Mg)), m0))

    plan = GemmPlan(geo=geo, BG=s.N * G, M=Mg, N=OHW, K=K, a_ptr=None, a_packed=False,  # type: ignore[arg-type]
                    c_ptr=c_ptr, ldc=OHW, c_init=block_of(res.ptr) if res is not None else None,
                    bias="row" if bias is not None else "none",
                    bias_ptr=bias_ptr, bias_rs=1, act=act, lo=lo, hi=hi)
    if bf16_conv(ctx, s, w):
        conv_operands_bf16(ctx, plan, s, w, name,
                           lambda geo, kc, pairs: _b_source(s, geo, x.ptr, kc_limit=kc, pairs=pairs))
        return plan
    if w.const_value is not None:
        packed = pack_a_panels(conv_filter_matrix(np.asarray(w.const_value, dtype=np.float32), G), MR)
        aw = b.bitcast(ctx.add_constant(packed, f"{name or 'conv'}.filter.packed"), F32P)
        mp = packed.shape[1]

        def a_ptr(b: ir.IRBuilder, bg: ir.Value, m0: ir.Value) -> tuple[ir.Value, ir.Value]:
            g = b.urem(bg, c64(G))
            return gep(b, aw, b.add(b.mul(g, c64(mp * K * MR)), b.mul(m0, c64(K)))), c64(K * MR)
        a_packed = True
    else:
        wp = w.ptr

        def a_ptr(b: ir.IRBuilder, bg: ir.Value, m0: ir.Value) -> tuple[ir.Value, ir.Value]:
            g = b.urem(bg, c64(G))
            return gep(b, wp, b.mul(b.add(b.mul(g, c64(Mg)), m0), c64(K))), c64(K)
        a_packed = False

    plan.a_ptr, plan.a_packed, plan.prefetch_a = a_ptr, a_packed, a_packed
    plan.b_pack, plan.k_blocks, plan.pack_ld = _b_source(s, geo, x.ptr, kc_limit=KC_L1)
    if taps_fit(s, geo.lanes):
        read_taps_in_place(ctx, s, geo, x.ptr, plan, name)
    return plan


def bf16_conv(ctx: EmitContext, s: ConvShape, w: Operand) -> bool:
    """Does this convolution run its GEMM on bf16 pairs (the precision bf16, a constant filter)?"""
    return bf16_enabled(ctx) and w.const_value is not None and s.K >= 2


def _b_source(s: ConvShape, geo: Geometry, xp: ir.Value, max_width: int = 0,
              kc_limit: int = KC_MAX, pairs: int = 1) -> tuple[BPack, list[int], int]:
    """The packer of im2col tiles of at most ``max_width`` (default NR) pixels (plain rows for a 1x1 stride-1
    unpadded convolution), the K blocks (at most ``kc_limit`` rows, whole input channels) and the packed
    tile's row stride (whole vectors, plus one vector for im2col tiles, whose last pixel panel on the
    transposed path reads up to MR - 1 lanes past the packed pixels)."""
    HW, OHW = s.H * s.W, s.OH * s.OW
    W = geo.lanes
    nvec = -(-(max_width or geo.nr) // W)

    def x_group(b: ir.IRBuilder, bg: ir.Value) -> ir.Value:
        # (nb * C + g * Cg) * HW = bg * Cg * HW
        return gep(b, xp, b.mul(bg, c64(s.Cg * HW)))

    if s.pointwise:
        def b_pack(b: ir.IRBuilder, bg: ir.Value, n0: ir.Value, width: ir.Value, k0: ir.Value, kc: ir.Value,
                   kb: ir.Value, dst: ir.Value) -> None:
            src = gep(b, x_group(b, bg), b.add(b.mul(k0, c64(HW)), n0))
            pack_rows(b, geo, src, HW, kc, width, dst, full_width=OHW % (nvec * W) == 0, nvec=nvec)
        return b_pack, even_blocks(s.K, kc_limit, pairs), nvec * W
    ld = (nvec + 1) * W
    quantum = math.lcm(pairs, s.KH * s.KW)
    return _im2col_packer(s, geo, x_group, ld, nvec), even_blocks(s.K, kc_limit, quantum), ld


def emit_conv_gemm(ctx: EmitContext, s: ConvShape, x: Operand, w: Operand, bias: Operand | None, y: Operand,
                   act: str, lo: float, hi: float, name: str = "", res: Operand | None = None) -> None:
    plan = conv_plan(ctx, s, x, w, bias, y, act, lo, hi, name, res)
    scratch = ctx.builder.bitcast(ctx.scratch(plan.scratch_bytes), F32P)
    emit_gemm(ctx.builder, plan, ctx.tid, ctx.nthreads, scratch)


def transposed_fits(s: ConvShape, lanes: int) -> bool:
    """Vectorize over output channels instead of pixels: for planes of at most ``PLANE_T`` tiles (a 7 x 7
    plane fills 49 of a tile's 64 lanes, a 14 x 14 one wastes 12 lanes of its fourth tile, and the pixel path
    streams the whole filter once per tile, from L3 once it outgrows L2: 2.4 MB for a 3 x 3 layer with 256
    channels, ResNet-50's stage 3), and for planes whose last pixel vector wastes more than an eighth of the
    pixels (9 x 9: 15 lanes for 81 pixels) when K is long enough to hide the transposed store. A 28 x 28
    plane (13 tiles) stays on the pixel path, faster there since its im2col tiles fit L1."""
    n = s.OH * s.OW
    nr = geometry(lanes).nr
    if s.Mg < 2 * lanes or s.K < 4:
        return False
    wasted = -(-n // lanes) * lanes - n
    return n <= PLANE_T * nr or (wasted * 8 > n and s.K >= 1024 and n <= 1024 and s.OW <= 64)


def emit_conv_gemm_t(ctx: EmitContext, s: ConvShape, x: Operand, w: Operand, bias: Operand | None, y: Operand,
                     act: str, lo: float, hi: float, name: str = "", res: Operand | None = None) -> None:
    """Small output planes (``OH*OW < NR``): ``Y^T[pixels, Mg] = im2col^T x F^T``, vectorized over channels.

    The im2col tile is packed as in the GEMM path (``[K][NR]``, pixels as
    columns) and read transposed as the broadcast operand; the filter is packed
    at compile time into NR-channel panels. The work items (pixel panel x
    channel panel, channels innermost) split evenly over the threads, and a
    thread packs only the pixels of its panels; each result block goes through
    a scratch tile (accumulated over the K blocks) and is stored transposed
    (one strided gather per channel), where a residual is added before the activation.
    """
    geo = geometry(ctx.target.vector_lanes)  # of the im2col tile
    N, K, Mg, G = s.OH * s.OW, s.K, s.Mg, s.G
    cgeo = transposed_geometry(geo, N)  # of the micro-kernels
    W, MR, NR = geo.lanes, cgeo.mr, cgeo.nr
    b = ctx.builder
    NTc = -(-Mg // NR)
    MPp = -(-N // MR)
    wt = conv_filter_matrix(np.asarray(w.const_value, dtype=np.float32), G).transpose(0, 2, 1)
    bt = b.bitcast(ctx.add_constant(pack_b_panels(wt, NR), f"{name or 'conv'}.filter.packed_t"), F32P)
    # the whole pixel row of the tile is packed at once, a K block of at most KC_T rows: a filter panel's
    # block stays in L1 while every pixel panel streams past it
    b_pack, k_blocks, TR = _b_source(s, geo, x.ptr, N, max(s.KH * s.KW, KC_T))
    kbs = k_blocks + [K]
    kc_max = max(kbs[i + 1] - kbs[i] for i in range(len(kbs) - 1))
    cs_tile = MPp * MR * NR  # floats of one channel panel's result block
    scratch = b.bitcast(ctx.scratch((kc_max * TR + NTc * cs_tile) * 4), F32P)
    tile, cs = scratch, gep(b, scratch, kc_max * TR)
    oc_tail = Mg - (NTc - 1) * NR
    m_tail = N - (MPp - 1) * MR
    pf_lines = -(-2 * NR // (16 * MPp))  # the next filter panel's K block, spread over the pixel panels
    # the activation: by the micro-kernel, or with a residual in the store, after adding it
    variants = _transposed_variants(ctx.module, cgeo, oc_tail, m_tail, pf_lines, {
        "bias": "col" if bias is not None else "none", "act": act if res is None else "none", "lo": lo, "hi": hi})

    # work items: (image/group, channel panel, pixel panel), pixel panels innermost, so a filter panel's K
    # block is read from memory once and reused from cache by every pixel panel; a thread packs the im2col
    # columns of the pixel panels it touches (all of them once it spans two channel panels), once per K block
    per_bg = MPp * NTc
    # equal shares of cost: an item of a narrow last channel panel weighs less
    i0, i1 = weighted_share(b, ctx.tid, ctx.nthreads, s.N * G, NTc, MPp, cgeo.nvec, -(-oc_tail // W))
    with b.if_then(b.icmp_signed("<", i0, i1)):
        bg_first = b.udiv(i0, c64(per_bg))
        bg_end = b.add(b.udiv(b.sub(i1, c64(1)), c64(per_bg)), c64(1))
        with for_range(b, bg_first, bg_end, name="bg") as bg:
            it_lo = smax(b, b.sub(i0, b.mul(bg, c64(per_bg))), c64(0))
            it_hi = smin(b, b.sub(i1, b.mul(bg, c64(per_bg))), c64(per_bg))
            px0, px1 = _pixel_span(b, it_lo, it_hi, MPp, MR, N)
            g = b.urem(bg, c64(G))
            nkb = len(kbs) - 1
            with for_range(b, 0, nkb, name="kb") as kb:
                k0, k1 = kblock_bounds(b, kbs, kb)
                kc = b.sub(k1, k0)
                b_pack(b, bg, px0, b.sub(px1, px0), k0, kc, kb, tile)
                flags = kblock_flags(b, kb, nkb)
                # the next block's start (this one's, past the last): the next channel panel's first stream
                k0n = b.select(b.icmp_signed("==", kb, c64(nkb - 1)), k0, k1)
                with for_range(b, it_lo, it_hi, name="it") as it:
                    ot = b.udiv(it, c64(MPp))
                    mp = b.urem(it, c64(MPp))
                    oc0 = b.mul(ot, c64(NR))
                    bias_p = gep(b, bias.ptr, b.add(b.mul(g, c64(Mg)), oc0)) if bias is not None \
                        else ir.Constant(F32P, None)
                    bpanel = gep(b, bt, b.mul(b.add(b.mul(b.add(b.mul(g, c64(NTc)), ot), c64(K)), k0), c64(NR)))
                    cblk = gep(b, cs, b.add(b.mul(ot, c64(cs_tile)), b.mul(mp, c64(MR * NR))))
                    # prefetch this pass's share of the filter block the next channel panel streams
                    last_ot = b.icmp_signed("==", ot, c64(NTc - 1))
                    nxt = b.select(last_ot, b.mul(b.sub(b.sub(k0n, k0), c64((NTc - 1) * K)), c64(NR)), c64(K * NR))
                    pf = gep(b, bpanel, b.add(nxt, b.mul(mp, b.mul(kc, c64(pf_lines * 8)))))
                    args = [gep(b, tile, b.sub(b.mul(mp, c64(MR)), px0)), c64(TR), bpanel, cblk, c64(NR), kc,
                            flags, bias_p, c64(0), pf, ir.Constant(F32P, None), ir.Constant(F32P, None)]
                    dispatch_variant(b, variants, last_ot, b.icmp_signed("==", mp, c64(MPp - 1)), args,
                                     oc_tail == NR, m_tail == MR)
            _store_transposed(b, cgeo, N, Mg, MPp, cs, y.ptr, bg, it_lo, it_hi,
                              (res.ptr, act, lo, hi) if res is not None else None)


def _transposed_variants(mod: ir.Module, cgeo: Geometry, oc_tail: int, m_tail: int, pf_lines: int,
                         act_kw: dict[str, Any]) -> dict[tuple[bool, bool], ir.Function]:
    """The transposed path's micro-kernels by (last channel panel?, last pixel panel?)."""
    W, MR, NR = cgeo.lanes, cgeo.mr, cgeo.nr
    tail_vec = -(-oc_tail // W)
    variants = {}
    for last_ot in (False, True):
        for last_mp in (False, True):
            nvec, tail = (tail_vec, oc_tail - (tail_vec - 1) * W) if last_ot else (cgeo.nvec, W)
            variants[(last_ot, last_mp)] = get_ukernel(mod, UKernel(
                lanes=W, rows=m_tail if last_mp else MR, nvec=nvec, tail=tail, a_packed=False, mr_panel=MR,
                ldb=NR, b_align=64, a_cols=True, prefetch=pf_lines, **act_kw))
    return variants


def _store_transposed(b: ir.IRBuilder, cgeo: Geometry, N: int, Mg: int, MPp: int, cs: ir.Value, yp: ir.Value,
                      bg: ir.Value, it_lo: ir.Value, it_hi: ir.Value,
                      residual: tuple[ir.Value, str, float, float] | None) -> None:
    """Store the result blocks of items ``[it_lo, it_hi)`` transposed: ``Y[bg * Mg + oc0 + j][p0 + i] =
    cs[ot][p0 + i][j]`` (one strided gather per channel); ``residual`` (pointer, activation, bounds): add
    the residual at the same index, then apply the activation."""
    W, MR, NR = cgeo.lanes, cgeo.mr, cgeo.nr
    cs_tile = MPp * MR * NR
    with for_range(b, it_lo, it_hi, name="st") as it:
        ot = b.udiv(it, c64(MPp))
        mp = b.urem(it, c64(MPp))
        p0 = b.mul(mp, c64(MR))
        rows = smin(b, c64(MR), b.sub(c64(N), p0))
        mask = b.icmp_signed("<", iota(W), splat(b, rows, W))
        src = gep(b, cs, b.add(b.mul(ot, c64(cs_tile)), b.mul(mp, c64(MR * NR))))
        oc0 = b.mul(ot, c64(NR))
        yoff = b.add(b.mul(b.add(b.mul(bg, c64(Mg)), oc0), c64(N)), p0)
        with for_range(b, 0, smin(b, c64(NR), b.sub(c64(Mg), oc0)), name="j") as j:
            val = strided_masked_load(b, gep(b, src, j), mask, NR)
            off = b.add(yoff, b.mul(j, c64(N)))
            if residual is not None:
                rp, act, lo, hi = residual
                val = activation(b, b.fadd(val, masked_load(b, gep(b, rp, off), mask)), act, lo, hi)
            masked_store(b, val, gep(b, yp, off), mask)


def _pixel_span(b: ir.IRBuilder, it_lo: ir.Value, it_hi: ir.Value, MPp: int, MR: int,
                N: int) -> tuple[ir.Value, ir.Value]:
    """Pixels ``[px0, px1)`` of the items ``[it_lo, it_hi)`` (pixel panel = item % MPp): the panels between
    the first and the last item when they share a channel panel, every pixel otherwise."""
    one_panel = b.icmp_signed("==", b.udiv(it_lo, c64(MPp)), b.udiv(b.sub(it_hi, c64(1)), c64(MPp)))
    first = b.mul(b.urem(it_lo, c64(MPp)), c64(MR))
    last = smin(b, b.mul(b.add(b.urem(b.sub(it_hi, c64(1)), c64(MPp)), c64(1)), c64(MR)), c64(N))
    return b.select(one_panel, first, c64(0)), b.select(one_panel, last, c64(N))


def transposed_geometry(geo: Geometry, pixels: int) -> Geometry:
    """Rows x vectors of the transposed path's micro-kernel: 7 x 3 when a plane smaller than one tile splits
    into 7-row panels (7 x 7); otherwise 6 x 4 (64-channel panels: 256 channels split evenly over 2 threads,
    where 48-channel ones leave a 16-channel panel)."""
    if geo.lanes >= 16 and pixels % 7 == 0 and pixels < geo.nr:
        return Geometry(geo.lanes, 7, 3)
    return geo


def _im2col_packer(s: ConvShape, geo: Geometry, x_group: Any, ld: int, nvec: int) -> Any:
    """Pack ``dst[k * ld + j] = im2col[k0 + k][n0 + j]`` for one tile (``j < width``).

    The tile's pixels are cut into output-row segments; each aligned tile
    vector that holds pixels of a segment runs the (ic, kh, kw) loop nest with
    one masked load per tap (taps in the padding or past the row read as 0)
    and one masked store of the lanes from the segment's first on, so every
    store is aligned (a segment starting inside a vector split each of its
    stores over two cache lines: 28 % of the packing time at 56 x 56). Lanes
    past a segment's end are stored as 0 and rewritten by the next segment,
    packed later; none lies past the tile's ``width`` rounded up to a vector.
    The vectors are a run-time loop: one copy of the nest per convolution (a
    copy per vector made ResNet-50's cold compile 2.7 s instead of 2.2 s).
    """
    W, NR = geo.lanes, ld
    assert ld >= nvec * W
    KHKW = s.KH * s.KW
    unroll_kh = KHKW <= 49
    ranges = [s.col_range(kw) for kw in range(s.KW)]

    def pack(b: ir.IRBuilder, bg: ir.Value, n0: ir.Value, width: ir.Value, k0: ir.Value, kc: ir.Value,
             kb: ir.Value, dst: ir.Value) -> None:
        xg = x_group(b, bg)
        c0 = b.udiv(k0, c64(KHKW))
        nch = b.udiv(kc, c64(KHKW))
        oh_first = b.udiv(n0, c64(s.OW))
        oh_end = b.add(b.udiv(b.sub(b.add(n0, width), c64(1)), c64(s.OW)), c64(1))
        with for_range(b, oh_first, oh_end, name="seg") as oh:
            row0 = b.mul(oh, c64(s.OW))
            ow_a = smax(b, b.sub(n0, row0), c64(0))
            ow_b = smin(b, b.sub(b.add(n0, width), row0), c64(s.OW))
            lane0 = b.sub(b.add(row0, ow_a), n0)  # the segment's first lane in the tile
            j0 = b.udiv(lane0, c64(W))
            seg_dst = gep(b, dst, b.mul(j0, c64(W)))  # its first aligned vector
            ow0 = b.sub(ow_a, b.sub(lane0, b.mul(j0, c64(W))))  # output column of that vector's lane 0
            src_col = b.sub(b.mul(ow0, c64(s.sw)), c64(s.pw))
            ih0 = b.sub(b.mul(oh, c64(s.sh)), c64(s.ph))
            seg = (ow0, ow_a, ow_b, seg_dst, src_col, ih0)
            # the aligned vectors holding pixels of the segment: a run-time loop (one copy of the loop nest)
            nv = b.udiv(b.add(b.sub(ow_b, ow0), c64(W - 1)), c64(W))
            with for_range(b, 0, nv, name="pv") as v:
                _pack_vector(b, s, W, NR, v, seg, xg, c0, nch, ranges, unroll_kh)
    return pack


def _pack_vector(b: ir.IRBuilder, s: ConvShape, W: int, NR: int, v: ir.Value, seg: tuple[ir.Value, ...], xg: ir.Value,
                 c0: ir.Value, nch: ir.Value, ranges: list[tuple[int, int]], unroll_kh: bool) -> None:
    """Aligned vector ``v`` of one output-row segment ``seg`` (output column of the first aligned vector's lane
    0, the segment's columns ``[ow_a, ow_b)``, the first aligned vector in the tile, its input column, the
    first input row), for every (ic, kh, kw) of the K block."""
    ow0, ow_a, ow_b, seg_dst, src_col, ih0 = seg
    KHKW = s.KH * s.KW
    owv = b.add(splat(b, b.add(ow0, b.mul(v, c64(W))), W), iota(W))
    from_seg = b.icmp_signed(">=", owv, splat(b, ow_a, W))  # the lanes this segment stores
    smask = b.and_(from_seg, b.icmp_signed("<", owv, splat(b, ow_b, W)))
    lmask = []
    for lo, hi in ranges:
        m = smask
        if lo > 0:
            m = b.and_(m, b.icmp_signed(">=", owv, splat(b, c64(lo), W)))
        if hi < s.OW:
            m = b.and_(m, b.icmp_signed("<", owv, splat(b, c64(hi), W)))
        lmask.append(m)
    vdst = gep(b, seg_dst, b.mul(v, c64(W)))
    vsrc = b.add(src_col, b.mul(v, c64(W * s.sw)))

    def taps(b: ir.IRBuilder, xc: ir.Value, ic: ir.Value, kh: ir.Value | int) -> None:
        khv = c64(kh) if isinstance(kh, int) else kh
        ih = b.add(ih0, b.mul(khv, c64(s.dh)))
        vmask = splat(b, b.icmp_unsigned("<", ih, c64(s.H)), W)
        src_row = gep(b, xc, b.add(b.mul(ih, c64(s.W)), vsrc))
        drow = gep(b, vdst, b.mul(b.add(b.mul(ic, c64(KHKW)), b.mul(khv, c64(s.KW))), c64(NR)))
        for kw in range(s.KW):
            val = strided_masked_load(b, gep(b, src_row, kw * s.dw), b.and_(lmask[kw], vmask), s.sw)
            masked_store(b, val, gep(b, drow, kw * NR), from_seg)

    with for_range(b, 0, nch, name="ic") as ic:
        xc = gep(b, xg, b.mul(b.add(c0, ic), c64(s.H * s.W)))
        if unroll_kh:
            for kh in range(s.KH):
                taps(b, xc, ic, kh)
        else:
            with for_range(b, 0, s.KH, name="kh") as kh:
                taps(b, xc, ic, kh)


# -- direct path (depthwise and narrow groups) ------------------------------------------------------------------

def emit_conv_direct(ctx: EmitContext, s: ConvShape, x: Operand, w: Operand, bias: Operand | None, y: Operand,
                     act: str, lo: float, hi: float, res: Operand | None = None) -> None:
    b = ctx.builder
    W = ctx.target.vector_lanes
    nvo = -(-s.OW // W)
    CH = min(nvo, 8)  # vectors per chunk
    nchunks = -(-nvo // CH)
    KHKW = s.KH * s.KW
    ranges = [s.col_range(kw) for kw in range(s.KW)]
    unroll_kh = KHKW * CH <= 128
    xp, wp, yp = x.ptr, w.ptr, y.ptr
    rows = s.N * s.M * s.OH
    r0, r1 = partition(b, rows, ctx.tid, ctx.nthreads)
    with for_range(b, r0, r1, name="row") as r:
        oh = b.urem(r, c64(s.OH))
        nm = b.udiv(r, c64(s.OH))  # nb * M + oc
        oc = b.urem(nm, c64(s.M))
        nb = b.udiv(nm, c64(s.M))
        g = b.udiv(oc, c64(s.Mg))
        xg = gep(b, xp, b.mul(b.add(b.mul(nb, c64(s.C)), b.mul(g, c64(s.Cg))), c64(s.H * s.W)))
        wrow = gep(b, wp, b.mul(oc, c64(s.Cg * KHKW)))
        ih0 = b.sub(b.mul(oh, c64(s.sh)), c64(s.ph))
        bias_v = None
        if bias is not None:
            bias_v = splat(b, b.load(gep(b, bias.ptr, oc), align=4), W)
        with for_range(b, 0, nchunks, name="chunk") as ch:
            ow0 = b.mul(ch, c64(CH * W))
            owv = [b.add(splat(b, b.add(ow0, c64(v * W)), W), iota(W)) for v in range(CH)]
            lmask = []
            for kw in range(s.KW):
                lo_c, hi_c = ranges[kw]
                lmask.append([b.and_(b.icmp_signed(">=", owv[v], splat(b, c64(lo_c), W)),
                                     b.icmp_signed("<", owv[v], splat(b, c64(hi_c), W))) for v in range(CH)])
            src_col = b.sub(b.mul(ow0, c64(s.sw)), c64(s.pw))

            def channel(b: ir.IRBuilder, ic: ir.Value, cur: list[ir.Value]) -> list[ir.Value]:
                xc = gep(b, xg, b.mul(ic, c64(s.H * s.W)))
                wc = gep(b, wrow, b.mul(ic, c64(KHKW)))

                def taps(b: ir.IRBuilder, kh: ir.Value | int, cur: list[ir.Value]) -> list[ir.Value]:
                    khv = c64(kh) if isinstance(kh, int) else kh
                    ih = b.add(ih0, b.mul(khv, c64(s.dh)))
                    vmask = splat(b, b.icmp_unsigned("<", ih, c64(s.H)), W)
                    src_row = gep(b, xc, b.add(b.mul(ih, c64(s.W)), src_col))
                    out = list(cur)
                    for kw in range(s.KW):
                        wv = splat(b, b.load(gep(b, wc, b.add(b.mul(khv, c64(s.KW)), c64(kw))), align=4), W)
                        for v in range(CH):
                            val = strided_masked_load(b, gep(b, src_row, v * W * s.sw + kw * s.dw),
                                                      b.and_(lmask[kw][v], vmask), s.sw)
                            out[v] = fma(b, wv, val, out[v])
                    return out

                if unroll_kh:
                    for kh in range(s.KH):
                        cur = taps(b, kh, cur)
                    return cur
                return carried_loop(b, 0, s.KH, cur, taps, name="kh")

            acc = carried_loop(b, 0, s.Cg, [ir.Constant(vty(W), None)] * CH, channel, name="ic")
            for v in range(CH):
                val = acc[v]
                if bias_v is not None:
                    val = b.fadd(val, bias_v)
                smask = b.icmp_signed("<", owv[v], splat(b, c64(s.OW), W))
                off = b.add(b.mul(r, c64(s.OW)), b.add(ow0, c64(v * W)))
                if res is not None:
                    val = b.fadd(val, masked_load(b, gep(b, res.ptr, off), smask))
                masked_store(b, activation(b, val, act, lo, hi), gep(b, yp, off), smask)


# -- scalar path (any element kind, any number of spatial axes) --------------------------------------------------

def emit_conv_scalar(ctx: EmitContext, instr: Instr) -> None:
    b = ctx.builder
    y = instr.outs[0]
    x, w, bias, res = _ins(instr)
    elem = y.type.elem
    ct = dtypes.compute_type(elem)
    a = instr.attrs
    xs, ws, ys = x.type.shape, w.type.shape, y.type.shape
    G = a["group"]
    C, M = xs[1], ws[0]
    Cg, Mg = C // G, M // G
    sp_in, kern, sp_out = xs[2:], ws[2:], ys[2:]
    KP = math.prod(kern)
    OP = math.prod(sp_out)
    IP = math.prod(sp_in)
    act, lo, hi = act_of(a, elem)
    total = ys[0] * M * OP
    zero = ir.Constant(ct, 0.0)
    e0, e1 = partition(b, total, ctx.tid, ctx.nthreads)
    with for_range(b, e0, e1, name="o") as e:
        cc = conv_coords(b, e, OP, M, Mg)
        o, oc, nb, g = cc.pixel, cc.channel, cc.image, cc.group
        ocoord = unravel(b, o, sp_out)
        accp = b.alloca(ct)
        b.store(zero, accp)
        with for_range(b, 0, Cg, name="ic") as ic:
            cin = b.add(b.mul(nb, c64(C)), b.add(b.mul(g, c64(Cg)), ic))
            with for_range(b, 0, KP, name="kk") as kk:
                inb, flat = window_tap(b, ocoord, unravel(b, kk, kern), sp_in, a["strides"], a["pads"],
                                       a["dilations"])
                with b.if_then(inb):
                    xv = dtypes.to_compute(b, b.load(gep(b, x.ptr, b.add(b.mul(cin, c64(IP)), flat))), elem)
                    wv = dtypes.to_compute(b, b.load(gep(b, w.ptr, b.add(b.mul(b.add(b.mul(oc, c64(Cg)), ic),
                                                                                   c64(KP)), kk))), elem)
                    b.store(b.fadd(b.load(accp), b.fmul(xv, wv)), accp)
        r = b.load(accp)
        if bias is not None:
            r = b.fadd(r, dtypes.to_compute(b, b.load(gep(b, bias.ptr, oc)), elem))
        r = dtypes.round_trip(b, r, elem)
        if res is not None:  # Add rounds once more, as the unfused nodes do
            r = dtypes.round_trip(b, b.fadd(r, dtypes.to_compute(b, b.load(gep(b, res.ptr, e)), elem)), elem)
        if act != "none":
            r = _scalar_act(b, r, act, lo, hi)
        b.store(dtypes.to_storage(b, r, elem), gep(b, y.ptr, e))


def _scalar_act(b: ir.IRBuilder, v: ir.Value, act: str, lo: float, hi: float) -> ir.Value:
    zero = ir.Constant(v.type, 0.0)
    if act == "hardswish":  # (float32 only)
        return activation(b, v, act, lo, hi)
    if act == "relu":
        return b.select(b.fcmp_ordered("<", v, zero), zero, v)
    if not math.isinf(lo):
        c = ir.Constant(v.type, lo)
        v = b.select(b.fcmp_ordered("<", v, c), c, v)
    if not math.isinf(hi):
        c = ir.Constant(v.type, hi)
        v = b.select(b.fcmp_ordered(">", v, c), c, v)
    return v
