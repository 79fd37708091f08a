"""Winograd F(2x2, 3x3) convolution: 3x3, stride 1, undilated, one group, constant filter, AVX-512.

Each 2 x 2 block of output pixels (a *tile*, ``TH x TW`` of them) is computed
from the 4 x 4 input patch at ``(2 ty - ph, 2 tx - pw)`` with 16 multiplies
per (output channel, input channel) instead of 36 (Lavin and Gray, 2016):

    Y_tile = A^T [ sum_c U[., ., m, c] * V[., ., c, t] ] A,
    U = G g G^T (the filter, transformed at compile time), V = B^T d B (the patch)

so the work is 16 GEMMs ``M_xi[M, T] = U_xi[M, C] x V_xi[C, T]`` (``xi`` one
of the 4 x 4 transform positions), 2.25 x fewer multiply-adds than the
direct GEMM over ``C * 9`` rows. ``_patch_transform`` computes the 16
``V_xi`` rows of each input channel straight from the input rows (4 masked
loads and 4 lane shuffles per patch row and vector of 16 tiles), into tiles
the GEMM micro-kernel (``gemm.UKernel``) reads like any packed B tile. A work
item is (image, N tile of up to 64 tiles, block of output-channel panels):
per K block of input channels it transforms once and runs the 16 GEMMs over
the block's panels into the thread's scratch ``M_xi`` (summed over K blocks);
then ``_output_store`` computes the item's 2 x 2 outputs, adds the bias,
applies the activation and scatters them to Y (a tile's four pixels are not
contiguous; odd ``OH`` / ``OW`` mask the last row / column of tiles).

The transforms add and subtract only, with the filter's factors of 1/2; the
result differs from the direct sum by rounding (a few ulps of the larger
terms), within the tolerances the ONNX tests and the model tests use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir

from glow_backend_cpu.emit.context import EmitContext, Operand
from glow_backend_cpu.emit.gemm import (
    UKernel,
    get_ukernel,
    kblock_bounds,
    kblock_flags,
)
from glow_backend_cpu.emit.gemm_dispatch import dispatch_variant
from glow_backend_cpu.emit.vecops import (
    F32P,
    activation,
    c32,
    c64,
    const_table,
    fma,
    geometry,
    gep,
    masked_load,
    masked_store,
    module_of,
    vload,
    vty,
)
from glow_backend_cpu.helpers import I32, I64, carried_loop, for_range, intrinsic, iota, partition, smax, smin, splat
from glow_backend_cpu.pack import even_blocks, pack_a_panels

if TYPE_CHECKING:  # conv.py imports this module
    from glow_backend_cpu.emit.conv import ConvShape

#: input channels per K block: the block's transformed tiles (16 x 64 x NR floats, 256 KiB) stay in L2 while
#: the 16 GEMMs run over the item's output-channel panels
WINO_KC = 64
#: output-channel panels per work item at most: the item's 16 result blocks (16 x 21 x MR x NR floats, 516 KiB)
#: stay in L2 across the K blocks
WINO_PANELS = 21
#: work items per convolution at least (by splitting the output channels finer), so 2 threads share them evenly
WINO_MIN_ITEMS = 8

#: the convolutions that take the path (``winograd_fits``): against the path they take otherwise, one
#: convolution on 2 threads, 3x3 at 56 x 56 with 32 to 128 channels ran 16-26 % faster, at 28 x 28 with 96 to 512
#: 10-30 %; smaller ones gained little or lost (28 x 28: 64 -> 64 4 % faster, 32 -> 64 the same, 128 -> 32 29 %
#: slower; 14 x 14: 256 -> 256 53 % slower, 512 -> 512 4 % faster; 7 x 7: 512 -> 512 34 % slower).
#: 16 input channels at 56 x 56 (SqueezeNet's 16 -> 64 expand layers): 16 -> 32 9-12 % faster, 16 -> 64 12-21 %,
#: 16 -> 128 11-15 % (1 and 2 threads); 8 input channels 24 % slower (8 -> 32 at 112 x 112)
WINO_MIN_C = 32
WINO_BIG_MIN_C = 16
WINO_MIN_M = 32
WINO_BIG_TILES = 784
WINO_MIN_TILES = 196
WINO_MID_M = 64
WINO_MID_CM = 6144

#: F(2x2, 3x3) transforms: V = B^T d B, U = G g G^T, Y = A^T m A
_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


def winograd_fits(s: ConvShape, lanes: int, const_filter: bool, residual: bool) -> bool:
    """3x3 stride 1 undilated single-group convolutions with a constant filter and no residual, on 16-lane
    vectors, with enough work per tile to pay for the transforms: at least ``WINO_BIG_MIN_C`` input and
    ``WINO_MIN_M`` output channels on a plane of ``WINO_BIG_TILES`` tiles (56 x 56), or ``WINO_MIN_C`` input,
    ``WINO_MID_M`` output channels and ``C * M >= WINO_MID_CM`` on one of ``WINO_MIN_TILES`` (28 x 28)."""
    tiles = -(-s.OH // 2) * -(-s.OW // 2)
    if not (lanes == 16 and const_filter and not residual and s.G == 1 and s.KH == 3 and s.KW == 3
            and s.sh == 1 and s.sw == 1 and s.dh == 1 and s.dw == 1 and s.H > 1 and s.Mg >= WINO_MIN_M):
        return False
    if tiles >= WINO_BIG_TILES:
        return s.Cg >= WINO_BIG_MIN_C
    return tiles >= WINO_MIN_TILES and s.Cg >= WINO_MIN_C and s.M >= WINO_MID_M and s.C * s.M >= WINO_MID_CM


def filter_transform(w: np.ndarray, mr: int) -> np.ndarray:
    """``U_xi = (G g G^T)[i, j]`` for ``xi = 4 i + j``, each ``[M, C]`` packed into MR-row panels:
    ``[16, panels, C, MR]`` (computed in float64, rounded once)."""
    m, c = w.shape[:2]
    u = np.einsum("ia,mcab,jb->ijmc", _G, w.astype(np.float64), _G)
    return pack_a_panels(u.reshape(16, m, c).astype(np.float32), mr)


@dataclass(frozen=True)
class _Blocks:
    """How the work is cut. The ``T`` tiles' ``V`` vectors are dealt to ``NT`` N tiles of at most 4 vectors as
    evenly as they go (the first ``r`` tiles get ``q + 1``, the others ``q``; the last tile's last vector holds
    the plane's last tiles), so no N tile is a lone vector: 196 tiles are 4 + 3 + 3 + 3 vectors, not
    4 + 4 + 4 + 1 (a one-vector micro-kernel issues a broadcast per multiply-add, 4-5 x slower a lane).
    ``M`` rows are ``MP`` panels of MR, dealt to ``MCH`` blocks (at most ``CP`` panels); K blocks ``kbs``."""

    T: int
    NT: int
    q: int
    r: int
    MP: int
    MCH: int
    CP: int
    kbs: tuple[int, ...]

    @staticmethod
    def of(s: ConvShape, nvec: int, mr: int) -> _Blocks:
        T = -(-s.OH // 2) * -(-s.OW // 2)
        V = -(-T // 16)
        NT, MP = -(-V // nvec), -(-s.M // mr)
        MCH = -(-MP // WINO_PANELS)
        if s.N * NT * MCH < WINO_MIN_ITEMS:
            MCH = min(MP, -(-WINO_MIN_ITEMS // (s.N * NT)))
        return _Blocks(T, NT, V // NT, V % NT, MP, MCH, -(-MP // MCH), tuple(even_blocks(s.C, WINO_KC)) + (s.C,))

    def costs(self) -> list[int]:
        """Each item's cost (one image; items ``(N tile, panel block)``): its vectors times its panels plus one
        (the packing and the output stage)."""
        return [(self.q + (nt < self.r)) * ((ch + 1) * self.MP // self.MCH - ch * self.MP // self.MCH + 1)
                for nt in range(self.NT) for ch in range(self.MCH)]


def emit_conv_winograd(ctx: EmitContext, s: ConvShape, x: Operand, w: Operand, bias: Operand | None, y: Operand,
                       act: str, lo: float, hi: float, name: str) -> None:
    """Emit this thread's share of the convolution."""
    b = ctx.builder
    geo = geometry(ctx.target.vector_lanes)
    W, MR, NR = geo.lanes, geo.mr, geo.nr
    bl = _Blocks.of(s, geo.nvec, MR)
    kc_max = max(bl.kbs[i + 1] - bl.kbs[i] for i in range(len(bl.kbs) - 1))
    u = b.bitcast(ctx.add_constant(filter_transform(np.asarray(w.const_value, np.float32), MR),
                                   f"{name or 'conv'}.winograd.filter"), F32P)
    v_floats = 16 * kc_max * NR
    vt = b.bitcast(ctx.scratch(4 * (v_floats + 16 * bl.CP * MR * NR)), F32P)
    mt = gep(b, vt, v_floats)
    store = _output_store(ctx, s, x, w, y, bias, act, lo, hi, W * -(-bl.T // W))

    lo_i, hi_i = _cost_share(b, ctx.tid, ctx.nthreads, s.N, bl.costs())
    with for_range(b, lo_i, hi_i, name="wi") as p:
        pair = b.udiv(p, c64(bl.MCH))
        ch = b.sub(p, b.mul(pair, c64(bl.MCH)))
        bg = b.udiv(pair, c64(bl.NT))
        nt = b.sub(pair, b.mul(bg, c64(bl.NT)))
        big = b.icmp_signed("<", nt, c64(bl.r))
        n0 = b.mul(b.add(b.mul(nt, c64(bl.q)), smin(b, nt, c64(bl.r))), c64(W))
        width = smin(b, b.select(big, c64((bl.q + 1) * W), c64(bl.q * W)), b.sub(c64(bl.T), n0))
        nvw = b.udiv(b.add(width, c64(W - 1)), c64(W))
        mp0 = b.udiv(b.mul(ch, c64(bl.MP)), c64(bl.MCH))
        mp1 = b.udiv(b.mul(b.add(ch, c64(1)), c64(bl.MP)), c64(bl.MCH))
        with for_range(b, 0, len(bl.kbs) - 1, name="wkb") as kb:
            c0, c1 = kblock_bounds(b, list(bl.kbs), kb)
            kc = b.sub(c1, c0)
            xg = gep(b, x.ptr, b.mul(b.add(b.mul(bg, c64(s.C)), c0), c64(s.H * s.W)))
            _patch_transform(b, s, xg, (n0, width), kc, vt)
            _gemms(b, s, bl, u, vt, mt, (c0, kc, kblock_flags(b, kb, len(bl.kbs) - 1)), (mp0, mp1),
                   (big, b.icmp_signed("==", nt, c64(bl.NT - 1))))
        m0 = b.mul(mp0, c64(MR))
        with for_range(b, m0, smin(b, b.mul(mp1, c64(MR)), c64(s.M)), name="wrow") as m:
            mrow = gep(b, mt, b.mul(b.sub(m, m0), c64(NR)))
            with for_range(b, 0, nvw, name="wv") as j:
                store(b, bg, m, mrow, bl.CP * MR * NR, n0, j)


def _cost_share(b: ir.IRBuilder, tid: ir.Value, nthreads: ir.Value, images: int,
                costs: list[int]) -> tuple[ir.Value, ir.Value]:
    """This thread's items ``[lo, hi)`` of ``images`` x ``len(costs)`` (one image's item costs, in order) with
    equal shares of cost: an item goes to the thread whose share holds the middle of its cost. (By where its
    cost starts, SqueezeNet's 16 -> 64 layer at 55 x 55, 13 items of costs 48 and 36, gave one thread 336
    and the other 252; by the middle, 288 and 300.)"""
    mids, start = [], 0
    for c in costs:
        mids.append(2 * start + c)  # twice the middle: integers
        start += c
    per = start
    table = const_table(module_of(b), I64, mids, "glow.wino.cost")
    c0, c1 = partition(b, images * per, tid, nthreads)

    def item_at(c: ir.Value) -> ir.Value:
        """Items whose cost's middle lies before ``c`` (0 at 0, all of them at ``images * per``)."""
        img, rest = b.udiv(c, c64(per)), b.urem(c, c64(per))
        rest2 = b.mul(rest, c64(2))

        def count(b: ir.IRBuilder, i: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            before = b.icmp_signed("<", b.load(b.gep(table, [c32(0), i])), rest2)
            return [b.add(acc[0], b.zext(before, I64))]
        n = carried_loop(b, 0, len(costs), [c64(0)], count, name="wshare")[0]
        return b.add(b.mul(img, c64(len(costs))), n)
    return item_at(c0), item_at(c1)


def _gemms(b: ir.IRBuilder, s: ConvShape, bl: _Blocks, u: ir.Value, vt: ir.Value, mt: ir.Value,
           kblock: tuple[ir.Value, ir.Value, ir.Value], panels: tuple[ir.Value, ir.Value],
           tile: tuple[ir.Value, ir.Value]) -> None:
    """The 16 GEMMs of one K block (first channel, channels, micro-kernel flags) over the item's panels: A from
    the packed ``U_xi``, B the transformed tile ``V_xi``, C the item's result block ``M_xi`` (row stride NR);
    the micro-kernel of the N tile's kind (``tile``: one of the first ``r``, the last)."""
    geo = geometry(16)
    W, MR, NR = geo.lanes, geo.mr, geo.nr
    c0, kc, flags = kblock
    mp0, mp1 = panels
    big, last = tile
    m_tail = s.M - (bl.MP - 1) * MR
    last_lanes = bl.T - W * (-(-bl.T // W) - 1)

    def uk(rows: int, nvec: int, tail: int) -> ir.Function:
        return get_ukernel(module_of(b), UKernel(lanes=W, rows=rows, nvec=nvec, tail=tail, a_packed=True,
                                                 mr_panel=MR, ldb=NR, b_align=64, prefetch=-(-MR // 8)))

    def kind(nvec: int, tail: int) -> dict[tuple[bool, bool], ir.Function]:
        return {(False, ml): uk(m_tail if ml else MR, nvec, tail) for ml in (False, True)}
    a_stride = c64(s.C * MR)
    null = ir.Constant(F32P, None)
    with for_range(b, 0, 16, name="xi") as xi:
        vxi = gep(b, vt, b.mul(b.mul(xi, kc), c64(NR)))
        with for_range(b, mp0, mp1, name="wmp") as mp:
            a = gep(b, u, b.add(b.mul(b.add(b.mul(xi, c64(bl.MP)), mp), a_stride), b.mul(c0, c64(MR))))
            cp = gep(b, mt, b.mul(b.add(b.mul(xi, c64(bl.CP * MR)), b.mul(b.sub(mp, mp0), c64(MR))), c64(NR)))
            args = [a, a_stride, vxi, cp, c64(NR), kc, flags, null, c64(0), gep(b, a, a_stride), null, null]
            mp_last = b.icmp_signed("==", mp, c64(bl.MP - 1))

            def call(variants: dict[tuple[bool, bool], ir.Function]) -> None:
                dispatch_variant(b, variants, last, mp_last, args, True, m_tail == MR)
            with b.if_else(last) as (then, other):
                with then:
                    call(kind(bl.q, last_lanes))
                with other:
                    if bl.r == 0:
                        call(kind(bl.q, W))
                    else:
                        with b.if_else(big) as (then2, other2):
                            with then2:
                                call(kind(bl.q + 1, W))
                            with other2:
                                if bl.NT - 1 > bl.r:
                                    call(kind(bl.q, W))


def _patch_transform(b: ir.IRBuilder, s: ConvShape, xg: ir.Value, tiles: tuple[ir.Value, ir.Value], kc: ir.Value,
                     vt: ir.Value) -> None:
    """``V_xi[c][n] = (B^T d B)[xi]`` of tile ``n0 + n`` (``tiles``: ``n0`` and the N tile's width) for the
    ``kc`` input channels from ``xg``, read straight from the input rows: the tiles are cut into tile-row
    segments; for each aligned vector of a segment and each of the 4 patch rows, 4 masked loads (columns
    0-31 and 2-33 of the span; padding and columns the segment does not need read as 0) give the 4 patch
    columns of its 16 tiles (columns ``2 l + b``) by 4 two-vector lane shuffles. The 16 transformed vectors
    are stored under the mask of the lanes from the segment's first on (an aligned store; lanes past its end
    are rewritten by the next segment). ``V_xi`` starts at ``vt + xi * kc * NR``."""
    W, NR = 16, 64
    TW = -(-s.OW // 2)
    n0, width = tiles
    plane = b.mul(kc, c64(NR))
    ty_first = b.udiv(n0, c64(TW))
    ty_end = b.add(b.udiv(b.sub(b.add(n0, width), c64(1)), c64(TW)), c64(1))
    pairs = [ir.Constant(vty(W, I32), [2 * lane + q for lane in range(W)]) for q in range(2)]
    with for_range(b, ty_first, ty_end, name="wseg") as ty:
        row0 = b.mul(ty, c64(TW))
        tx_a = smax(b, b.sub(n0, row0), c64(0))
        tx_b = smin(b, b.sub(b.add(n0, width), row0), c64(TW))
        lane0 = b.sub(b.add(row0, tx_a), n0)
        j0 = b.udiv(lane0, c64(W))
        tx0 = b.sub(tx_a, b.sub(lane0, b.mul(j0, c64(W))))  # tile column of vector j0's lane 0
        iy0 = b.sub(b.mul(ty, c64(2)), c64(s.ph))
        nv = b.udiv(b.add(b.sub(tx_b, tx0), c64(W - 1)), c64(W))
        with for_range(b, 0, nv, name="wpv") as v:
            txv = b.add(tx0, b.mul(v, c64(W)))
            la, lb = b.sub(tx_a, txv), b.sub(tx_b, txv)  # the segment's lanes [la, lb) (la <= 0 after the first)
            from_seg = b.icmp_signed(">=", iota(W), splat(b, la, W))
            col0 = b.sub(b.mul(txv, c64(2)), c64(s.pw))
            # column k of the span (k < 34): needed by a lane of the segment, and inside the row
            lo_k, hi_k = splat(b, b.mul(la, c64(2)), W), splat(b, b.add(b.mul(lb, c64(2)), c64(2)), W)
            need = []
            for base in (0, W, 2, W + 2):  # the 4 loads: columns k0 .. k0 + 15 of the span
                kk = b.add(iota(W), splat(b, c64(base), W))
                m = b.and_(b.icmp_signed(">=", kk, lo_k), b.icmp_signed("<", kk, hi_k))
                need.append((base, b.and_(m, b.icmp_unsigned("<", b.add(kk, splat(b, col0, W)),
                                                              splat(b, c64(s.W), W)))))
            rows = []
            for a in range(4):
                iy = b.add(iy0, c64(a))
                ok = splat(b, b.icmp_unsigned("<", iy, c64(s.H)), W)
                rows.append((b.add(b.mul(iy, c64(s.W)), col0), [(base, b.and_(m, ok)) for base, m in need]))
            vdst = gep(b, vt, b.mul(b.add(j0, v), c64(W)))
            with for_range(b, 0, kc, name="wc") as c:
                xc = gep(b, xg, b.mul(c, c64(s.H * s.W)))
                d = []
                for off, masks in rows:
                    src = gep(b, xc, off)
                    lo0, hi0, lo2, hi2 = [masked_load(b, gep(b, src, base), m) for base, m in masks]
                    d.append([b.shuffle_vector(lo0, hi0, pairs[0]), b.shuffle_vector(lo0, hi0, pairs[1]),
                              b.shuffle_vector(lo2, hi2, pairs[0]), b.shuffle_vector(lo2, hi2, pairs[1])])
                t = _bt_combine(b, d)  # rows: t[i][q] = sum_a BT[i, a] d[a][q]
                dst = gep(b, vdst, b.mul(c, c64(NR)))
                for i in range(4):
                    col = _bt_combine(b, [[t[i][q]] for q in range(4)])  # columns
                    for jj in range(4):
                        masked_store(b, col[jj][0], gep(b, dst, b.mul(c64(4 * i + jj), plane)), from_seg, align=64)


def _bt_combine(b: ir.IRBuilder, d: list[list[ir.Value]]) -> list[list[ir.Value]]:
    """``B^T d`` over the first index: rows ``d0 - d2, d1 + d2, d2 - d1, d1 - d3``."""
    n = len(d[0])
    return [[b.fsub(d[0][q], d[2][q]) for q in range(n)], [b.fadd(d[1][q], d[2][q]) for q in range(n)],
            [b.fsub(d[2][q], d[1][q]) for q in range(n)], [b.fsub(d[1][q], d[3][q]) for q in range(n)]]


def _mask_words(bits: np.ndarray, lanes: int) -> list[int]:
    """Each vector's ``lanes`` (16) flags as one signed 16-bit word, lane 0 in bit 0."""
    words = np.packbits(bits.reshape(-1, lanes), axis=1, bitorder="little").view(np.int16)[:, 0]
    return [int(v) for v in words]


def _output_store(ctx: EmitContext, s: ConvShape, x: Operand, w: Operand, y: Operand, bias: Operand | None,
                  act: str, lo: float, hi: float, npad: int) -> Callable[..., None]:
    """The store of one (output channel, vector of W tiles) of an item: ``A^T m A`` from the 16 result rows
    (``mrow + xi * xi_stride``), plus the bias, through the activation, scattered to the four pixels of each
    tile (compile-time tables: each tile's first pixel, and which tiles, second columns, second rows exist).
    A pixel that comes out infinite or NaN (an infinite input, or an overflow in the transforms, where the
    direct sum could stay finite) has its vector recomputed by the direct sum (``_direct_tiles``)."""
    b = ctx.builder
    mod = module_of(b)
    W = 16
    TW = -(-s.OW // 2)
    T = -(-s.OH // 2) * TW
    ty, tx = np.divmod(np.arange(npad), TW)
    offs = np.where(np.arange(npad) < T, 2 * ty * s.OW + 2 * tx, 0)
    bits = [np.arange(npad) < T, 2 * tx + 1 < s.OW, 2 * ty + 1 < s.OH]
    bits[1] &= bits[0]
    bits[2] &= bits[0]
    off_tab = const_table(mod, I32, [int(o) for o in offs], "glow.wino.offs")
    mask_tabs = [const_table(mod, ir.IntType(16), _mask_words(m, W), "glow.wino.mask") for m in bits]
    plane = s.OH * s.OW
    yp, bp = y.ptr, bias.ptr if bias is not None else None
    scatter = intrinsic(mod, f"llvm.masked.scatter.v{W}f32.v{W}p0", ir.VoidType(),
                        [vty(W), vty(W, F32P), I32, vty(W, ir.IntType(1))])
    fabs = intrinsic(mod, f"llvm.fabs.v{W}f32", vty(W), [vty(W)])
    inf = ir.Constant(vty(W), [float("inf")] * W)

    def emit_stores(b: ir.IRBuilder, out: list[ir.Value], addr: ir.Value, masks: list[ir.Value]) -> None:
        for k, val in enumerate(out):
            pix = b.add(addr, splat(b, c64(4 * ((k // 2) * s.OW + k % 2)), W))
            b.call(scatter, [activation(b, val, act, lo, hi), b.inttoptr(pix, vty(W, F32P)), c32(4), masks[k]])

    def store(b: ir.IRBuilder, bg: ir.Value, m: ir.Value, mrow: ir.Value, xi_stride: int, n0: ir.Value,
              j: ir.Value) -> None:
        off = b.mul(j, c64(W))
        mv = [[vload(b, gep(b, mrow, b.add(off, c64((4 * r + q) * xi_stride))), W, 64) for q in range(4)]
              for r in range(4)]
        rows = [[b.fadd(b.fadd(mv[0][q], mv[1][q]), mv[2][q]) for q in range(4)],
                [b.fsub(b.fsub(mv[1][q], mv[2][q]), mv[3][q]) for q in range(4)]]
        out = [v for r in rows for v in (b.fadd(b.fadd(r[0], r[1]), r[2]), b.fsub(b.fsub(r[1], r[2]), r[3]))]
        bias_v = splat(b, b.load(gep(b, bp, m)), W) if bp is not None else None
        if bias_v is not None:
            out = [b.fadd(v, bias_v) for v in out]
        vi = b.add(b.udiv(n0, c64(W)), j)
        valid, col1, row1 = [b.bitcast(b.load(b.gep(tab, [c32(0), vi])), vty(W, ir.IntType(1))) for tab in mask_tabs]
        masks = [valid, col1, row1, b.and_(col1, row1)]
        ov = b.load(b.bitcast(b.gep(off_tab, [c32(0), b.add(n0, off)]), vty(W, I32).as_pointer()), align=4)
        ybase = b.ptrtoint(gep(b, yp, b.mul(b.add(b.mul(bg, c64(s.M)), m), c64(plane))), I64)
        addr = b.add(splat(b, ybase, W), b.mul(b.zext(ov, vty(W, I64)), splat(b, c64(4), W)))
        bad = None
        for k, v in enumerate(out):  # not finite (NaN compares unordered: true)
            nf = b.and_(b.fcmp_unordered(">=", b.call(fabs, [v]), inf), masks[k])
            bad = nf if bad is None else b.or_(bad, nf)
        any_bad = b.icmp_unsigned("!=", b.bitcast(bad, ir.IntType(16)), ir.Constant(ir.IntType(16), 0))
        with b.if_else(any_bad, likely=False) as (then, other):
            with then:
                direct = _direct_tiles(b, s, x.ptr, w.ptr, bg, m, b.add(n0, off), TW)
                emit_stores(b, [b.fadd(v, bias_v) for v in direct] if bias_v is not None else direct, addr, masks)
            with other:
                emit_stores(b, out, addr, masks)
    return store


def _direct_tiles(b: ir.IRBuilder, s: ConvShape, xp: ir.Value, wp: ir.Value, bg: ir.Value, m: ir.Value, t0: ir.Value,
                  TW: int) -> list[ir.Value]:
    """The direct sum (input channel, then kh, then kw) of output channel ``m`` at the four pixels of tiles
    ``t0 .. t0 + 15``: one masked gather per tap (taps in the padding, and tiles past the plane, read 0)."""
    W = 16
    mod = module_of(b)
    t = b.add(splat(b, t0, W), iota(W))
    ty = b.udiv(t, splat(b, c64(TW), W))
    tx = b.sub(t, b.mul(ty, splat(b, c64(TW), W)))
    gather = intrinsic(mod, f"llvm.masked.gather.v{W}f32.v{W}p0", vty(W),
                       [vty(W, F32P), I32, vty(W, ir.IntType(1)), vty(W)])
    xg = gep(b, xp, b.mul(bg, c64(s.C * s.H * s.W)))
    zero = ir.Constant(vty(W), None)

    def channel(b: ir.IRBuilder, c: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
        xc = b.ptrtoint(gep(b, xg, b.mul(c, c64(s.H * s.W))), I64)
        wc = gep(b, wp, b.mul(b.add(b.mul(m, c64(s.C)), c), c64(9)))
        for kh in range(3):
            for kw in range(3):
                wv = splat(b, b.load(gep(b, wc, kh * 3 + kw)), W)
                for k in range(4):
                    iy = b.add(b.add(ty, ty), splat(b, c64(k // 2 + kh - s.ph), W))
                    ix = b.add(b.add(tx, tx), splat(b, c64(k % 2 + kw - s.pw), W))
                    ok = b.and_(b.icmp_unsigned("<", iy, splat(b, c64(s.H), W)),
                                b.icmp_unsigned("<", ix, splat(b, c64(s.W), W)))
                    addr = b.add(splat(b, xc, W), b.mul(b.add(b.mul(iy, splat(b, c64(s.W), W)), ix),
                                                        splat(b, c64(4), W)))
                    xv = b.call(gather, [b.inttoptr(addr, vty(W, F32P)), c32(4), ok, zero])
                    acc[k] = fma(b, xv, wv, acc[k])
        return acc

    return carried_loop(b, 0, s.C, [zero] * 4, channel, name="wdc")
