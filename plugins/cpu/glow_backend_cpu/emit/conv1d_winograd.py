"""Winograd F(2, r) for 1-D convolutions (a row: ``H = KH = 1``, Magika's 5-tap layer; ``r`` 3 or 5).

Each pair of output pixels (a *tile*) comes from the ``a = r + 1`` inputs under it with ``a`` multiplies per
(output channel, input channel) instead of ``2 r``: ``y = A^T [ sum_c U[., m, c] * V[., c, t] ]``, with
``U = G g`` (the filter, transformed at compile time in float64, rounded once) and ``V = B^T d`` (the
inputs). The work is ``a`` GEMMs ``M_xi[M, T] = U_xi[M, C] x V_xi[C, T]`` on the GEMM micro-kernel, 1.67 x
fewer multiply-adds than the im2col GEMM for 5 taps, 1.5 x for 3. The transforms come from the points
``0, 1, -1, (2, -2,) inf`` (Toom-Cook; ``B^T`` solved from the correlation identity, integer entries).

A work item is (image, N tile of up to NR tiles, block of output-channel panels); per K block of input
channels it transforms the item's tiles (``V_xi`` read straight from the input row, one stride-2 masked
load per input of the tile) and runs the GEMMs into the thread's scratch; then each (channel, vector of
tiles) is transformed back, the bias added, the activation applied, and the two pixels of each tile
interleaved into two contiguous stores. A vector whose result is not finite (an infinite input, or an
overflow in the transforms, where the direct sum could stay finite) is recomputed by the direct sum.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir

from glow_backend_cpu.emit.context import EmitContext, Operand
from glow_backend_cpu.emit.gemm import UKernel, get_ukernel, kblock_bounds, kblock_flags
from glow_backend_cpu.emit.gemm_dispatch import dispatch_variant
from glow_backend_cpu.emit.vecops import (
    F32P,
    activation,
    c64,
    fma,
    geometry,
    gep,
    masked_load,
    masked_store,
    module_of,
    strided_masked_load,
    vload,
    vty,
)
from glow_backend_cpu.helpers import I32, carried_loop, for_range, intrinsic, iota, partition, smin, splat
from glow_backend_cpu.pack import even_blocks, pack_a_panels

if TYPE_CHECKING:  # conv.py imports this module
    from glow_backend_cpu.emit.conv import ConvShape

#: output pixels per tile
TILE = 2
#: input channels per K block: the block's transformed tiles (a x 64 x NR floats) stay in L2
KC = 64
#: output-channel panels per work item at most (the item's result blocks, a x 21 x MR x NR floats, in L2)
PANELS = 21
#: work items at least (by cutting the output channels finer), so 2 threads share them evenly
MIN_ITEMS = 8
#: the convolutions that take the path (``conv1d_winograd_fits``): against the GEMM paths, one convolution on
#: one thread ("same" padding; time ratios measured back to back under load), 256 -> 512 channels over 512
#: pixels, 5 taps (Magika) 2.8 x faster, 128 -> 128 over 1024 1.35 x, 32 -> 256 over 512 1.27 x, 32 -> 128
#: over 256 1.43 x, 512 -> 512 over 64 pixels 1.3 x; but 32 output channels 0.87-1.0 x, 64 (the taps path)
#: 0.7-1.2 x, 128 over 100 to 128 pixels 0.83-1.0 x: at least MIN_M output channels and MIN_TILES tiles, or
#: BIG_M channels and BIG_M_TILES tiles
MIN_C = 32
MIN_M = 128
MIN_TILES = 128
BIG_M = 512
BIG_M_TILES = 32

_POINTS = {3: [0.0, 1.0, -1.0], 5: [0.0, 1.0, -1.0, 2.0, -2.0]}


def transforms(r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``A^T`` (2 x a), ``G`` (a x r), ``B^T`` (a x a) of F(2, r), float64: ``y = A^T [(G g) * (B^T d)]`` is the
    correlation ``y_i = sum_k g_k d_{i+k}`` for every ``g``, ``d``."""
    p = _POINTS[r]
    a = len(p) + 1
    at = np.zeros((TILE, a))
    g = np.zeros((a, r))
    for j, x in enumerate(p):
        at[:, j] = [x ** i for i in range(TILE)]
        f = np.prod([x - q for q in p if q != x])
        g[j] = [x ** k / f for k in range(r)]
    at[TILE - 1, a - 1] = 1.0
    g[a - 1, r - 1] = 1.0
    # B^T from sum_j AT[i, j] G[j, k] BT[j, l] = [l == i + k]: a linear system in BT's a * a entries
    rows, rhs = [], []
    for i in range(TILE):
        for k in range(r):
            for ll in range(a):
                coef = np.zeros((a, a))
                coef[:, ll] = at[i] * g[:, k]
                rows.append(coef.ravel())
                rhs.append(1.0 if ll == i + k else 0.0)
    bt = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)[0].reshape(a, a)
    return at, g, np.round(bt, 9)


def conv1d_winograd_fits(s: ConvShape, lanes: int, const_filter: bool, residual: bool) -> bool:
    """1-D (row) stride-1 undilated single-group convolutions of 3 or 5 taps with a constant filter and no
    residual, on 16-lane vectors, with enough channels and tiles (see ``MIN_M``)."""
    tiles = -(-s.OW // TILE)
    if not (lanes == 16 and const_filter and not residual and s.G == 1 and s.H == 1 and s.KH == 1
            and s.KW in _POINTS and s.sw == 1 and s.dw == 1 and s.C >= MIN_C):
        return False
    return (s.M >= MIN_M and tiles >= MIN_TILES) or (s.M >= BIG_M and tiles >= BIG_M_TILES)


def emit_conv1d_winograd(ctx: EmitContext, s: ConvShape, x: Operand, w: Operand, bias: Operand | None,
                         y: Operand, act: str, lo: float, hi: float, name: str) -> None:
    """Emit this thread's share of the convolution."""
    b = ctx.builder
    geo = geometry(16)
    W, MR, NR = geo.lanes, geo.mr, geo.nr
    at, g, bt = transforms(s.KW)
    a = at.shape[1]
    T = -(-s.OW // TILE)
    NT, MP = -(-T // NR), -(-s.M // MR)
    MCH = max(-(-MP // PANELS), min(MP, -(-MIN_ITEMS // (s.N * NT))))
    CP = -(-MP // MCH)
    kbs = even_blocks(s.C, KC) + [s.C]
    kc_max = max(kbs[i + 1] - kbs[i] for i in range(len(kbs) - 1))
    # the filter [M, C, KW], [M, C, 1, KW] or, a column, [M, C, KW, 1]: the same memory
    u = np.einsum("jk,mck->jmc", g, np.asarray(w.const_value, np.float64).reshape(s.M, s.C, s.KW))
    up = b.bitcast(ctx.add_constant(pack_a_panels(u.astype(np.float32), MR), f"{name or 'conv'}.wino1d.filter"),
                   F32P)
    v_floats = a * kc_max * NR
    mstride = CP * MR * NR
    vt = b.bitcast(ctx.scratch(4 * (v_floats + a * mstride)), F32P)
    mt = gep(b, vt, v_floats)
    i0, i1 = partition(b, s.N * NT * MCH, ctx.tid, ctx.nthreads)
    with for_range(b, i0, i1, name="w1i") as it:
        ch = b.urem(it, c64(MCH))
        pair = b.udiv(it, c64(MCH))
        nt = b.urem(pair, c64(NT))
        img = b.udiv(pair, c64(NT))
        n0 = b.mul(nt, c64(NR))
        nvw = b.udiv(b.add(smin(b, c64(NR), b.sub(c64(T), n0)), c64(W - 1)), c64(W))
        mp0 = b.udiv(b.mul(ch, c64(MP)), c64(MCH))
        mp1 = b.udiv(b.mul(b.add(ch, c64(1)), c64(MP)), c64(MCH))
        with for_range(b, 0, len(kbs) - 1, name="w1kb") as kb:
            c0, c1 = kblock_bounds(b, kbs, kb)
            kc = b.sub(c1, c0)
            xg = gep(b, x.ptr, b.mul(b.add(b.mul(img, c64(s.C)), c0), c64(s.W)))
            _input_transform(b, s, bt, xg, n0, nvw, kc, vt)
            _gemms(b, s, a, (up, vt, mt, mstride), (c0, kc, kblock_flags(b, kb, len(kbs) - 1)), (mp0, mp1),
                   b.icmp_signed("==", nt, c64(NT - 1)))
        m0 = b.mul(mp0, c64(MR))
        with for_range(b, m0, smin(b, b.mul(mp1, c64(MR)), c64(s.M)), name="w1row") as m:
            mrow = gep(b, mt, b.mul(b.sub(m, m0), c64(NR)))
            with for_range(b, 0, nvw, name="w1v") as j:
                _output_store(b, s, at, (x, w, y, bias), (act, lo, hi), img, m, gep(b, mrow, b.mul(j, c64(W))),
                              mstride, b.add(n0, b.mul(j, c64(W))))


def _input_transform(b: ir.IRBuilder, s: ConvShape, bt: np.ndarray, xg: ir.Value, n0: ir.Value, nvw: ir.Value,
                     kc: ir.Value, vt: ir.Value) -> None:
    """``V_xi[c][n] = (B^T d)[xi]`` of tile ``n0 + n`` for the ``kc`` channels from ``xg``: input ``j`` of
    the tiles of a vector is one stride-2 masked load (positions outside the row read 0)."""
    W, NR = 16, 64
    a = bt.shape[0]
    plane = b.mul(kc, c64(NR))
    with for_range(b, 0, nvw, name="w1tv") as v:
        t0 = b.add(n0, b.mul(v, c64(W)))
        base = b.sub(b.mul(t0, c64(TILE)), c64(s.pw))
        masks = []
        for j in range(a):
            pos = b.add(splat(b, b.add(base, c64(j)), W), b.mul(iota(W), splat(b, c64(TILE), W)))
            masks.append(b.icmp_unsigned("<", pos, splat(b, c64(s.W), W)))
        vdst = gep(b, vt, b.mul(v, c64(W)))
        with for_range(b, 0, kc, name="w1c") as c:
            src = gep(b, xg, b.add(b.mul(c, c64(s.W)), base))
            d = [strided_masked_load(b, gep(b, src, j), masks[j], TILE) for j in range(a)]
            dst = gep(b, vdst, b.mul(c, c64(NR)))
            for xi in range(a):
                b.store(_combine(b, bt[xi], d), b.bitcast(gep(b, dst, b.mul(c64(xi), plane)), vty(W).as_pointer()),
                        align=64)


def _combine(b: ir.IRBuilder, coefs: np.ndarray, vals: list[ir.Value]) -> ir.Value:
    """``sum_j coefs[j] * vals[j]`` with adds and subtracts for the unit coefficients, zeros skipped."""
    acc = None
    for cf, v in zip(coefs, vals):
        if cf == 0:
            continue
        if acc is None:
            acc = v if cf == 1 else b.fmul(v, splat(b, ir.Constant(ir.FloatType(), float(cf)), v.type.count))
        elif cf == 1:
            acc = b.fadd(acc, v)
        elif cf == -1:
            acc = b.fsub(acc, v)
        else:
            acc = fma(b, v, splat(b, ir.Constant(ir.FloatType(), float(cf)), v.type.count), acc)
    assert acc is not None
    return acc


def _gemms(b: ir.IRBuilder, s: ConvShape, a: int, bufs: tuple[ir.Value, ir.Value, ir.Value, int],
           kblock: tuple[ir.Value, ir.Value, ir.Value], panels: tuple[ir.Value, ir.Value], last: ir.Value) -> None:
    """The ``a`` GEMMs of one K block over the item's panels: A the packed ``U_xi``, B the transformed tiles
    ``V_xi``, C the item's result block ``M_xi`` (row stride NR); the last N tile's micro-kernels are narrower."""
    geo = geometry(16)
    W, MR, NR = geo.lanes, geo.mr, geo.nr
    up, vt, mt, mstride = bufs
    c0, kc, flags = kblock
    mp0, mp1 = panels
    MP = -(-s.M // MR)
    m_tail = s.M - (MP - 1) * MR
    T = -(-s.OW // TILE)
    t_last = T - (-(-T // NR) - 1) * NR
    last_nvec = -(-t_last // W)
    variants = {}
    for nl in (False, True):
        for ml in (False, True):
            variants[(nl, ml)] = get_ukernel(module_of(b), UKernel(
                lanes=W, rows=m_tail if ml else MR, nvec=last_nvec if nl else geo.nvec,
                tail=t_last - (last_nvec - 1) * W if nl else W, a_packed=True, mr_panel=MR, ldb=NR, b_align=64,
                prefetch=-(-MR // 8)))
    a_stride = c64(s.C * MR)
    null = ir.Constant(F32P, None)
    with for_range(b, 0, a, name="w1xi") as xi:
        vxi = gep(b, vt, b.mul(b.mul(xi, kc), c64(NR)))
        with for_range(b, mp0, mp1, name="w1mp") as mp:
            ap = gep(b, up, b.add(b.mul(b.add(b.mul(xi, c64(MP)), mp), a_stride), b.mul(c0, c64(MR))))
            cp = gep(b, mt, b.add(b.mul(xi, c64(mstride)), b.mul(b.sub(mp, mp0), c64(MR * NR))))
            args = [ap, a_stride, vxi, cp, c64(NR), kc, flags, null, c64(0), gep(b, ap, a_stride), null, null]
            dispatch_variant(b, variants, last, b.icmp_signed("==", mp, c64(MP - 1)), args, t_last == NR,
                             m_tail == MR)


def _output_store(b: ir.IRBuilder, s: ConvShape, at: np.ndarray, ops: tuple[Operand, Operand, Operand, Operand | None],
                  act_lh: tuple[str, float, float], img: ir.Value, m: ir.Value, mrow: ir.Value, mstride: int,
                  t0: ir.Value) -> None:
    """Output channel ``m`` at tiles ``t0 .. t0 + 15``: ``A^T`` of the result rows, plus the bias, through the
    activation, the two pixels of each tile interleaved into two contiguous masked stores."""
    W = 16
    x, w, y, bias = ops
    a = at.shape[1]
    mv = [vload(b, gep(b, mrow, xi * mstride), W, 64) for xi in range(a)]
    out = [_combine(b, at[i], mv) for i in range(TILE)]
    bias_v = splat(b, b.load(gep(b, bias.ptr, m)), W) if bias is not None else None
    lo_idx = ir.Constant(vty(W, I32), [k // 2 + (W if k % 2 else 0) for k in range(W)])
    hi_idx = ir.Constant(vty(W, I32), [W // 2 + k // 2 + (W if k % 2 else 0) for k in range(W)])
    pix = [b.shuffle_vector(out[0], out[1], lo_idx), b.shuffle_vector(out[0], out[1], hi_idx)]
    pix0 = b.mul(t0, c64(TILE))
    ydst = gep(b, y.ptr, b.add(b.mul(b.add(b.mul(img, c64(s.M)), m), c64(s.OW)), pix0))
    masks = [b.icmp_signed("<", b.add(splat(b, b.add(pix0, c64(q * W)), W), iota(W)), splat(b, c64(s.OW), W))
             for q in range(TILE)]
    fabs = intrinsic(module_of(b), f"llvm.fabs.v{W}f32", vty(W), [vty(W)])
    inf = ir.Constant(vty(W), [float("inf")] * W)
    bad = None
    for q in range(TILE):  # not finite (NaN compares unordered: true)
        nf = b.and_(b.fcmp_unordered(">=", b.call(fabs, [pix[q]]), inf), masks[q])
        bad = nf if bad is None else b.or_(bad, nf)
    any_bad = b.icmp_unsigned("!=", b.bitcast(bad, ir.IntType(16)), ir.Constant(ir.IntType(16), 0))
    act, lo, hi = act_lh
    with b.if_else(any_bad, likely=False) as (then, other):
        with then:
            direct = _direct(b, s, x.ptr, w.ptr, img, m, pix0)
            for q in range(TILE):
                val = b.fadd(direct[q], bias_v) if bias_v is not None else direct[q]
                masked_store(b, activation(b, val, act, lo, hi), gep(b, ydst, q * W), masks[q])
        with other:
            for q in range(TILE):
                val = b.fadd(pix[q], bias_v) if bias_v is not None else pix[q]
                masked_store(b, activation(b, val, act, lo, hi), gep(b, ydst, q * W), masks[q])


def _direct(b: ir.IRBuilder, s: ConvShape, xp: ir.Value, wp: ir.Value, img: ir.Value, m: ir.Value,
            pix0: ir.Value) -> list[ir.Value]:
    """The direct sum (input channel, then tap) of output channel ``m`` at pixels ``pix0 .. pix0 + 31``: one
    masked load per tap and vector (taps in the padding read 0)."""
    W = 16
    xg = gep(b, xp, b.mul(img, c64(s.C * s.W)))
    masks = []
    for q in range(TILE):
        for k in range(s.KW):
            pos = b.add(splat(b, b.add(pix0, c64(q * W + k - s.pw)), W), iota(W))
            masks.append(b.icmp_unsigned("<", pos, splat(b, c64(s.W), W)))
    zero = ir.Constant(vty(W), None)

    def channel(b: ir.IRBuilder, c: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
        src = gep(b, xg, b.add(b.mul(c, c64(s.W)), b.sub(pix0, c64(s.pw))))
        wc = gep(b, wp, b.mul(b.add(b.mul(m, c64(s.C)), c), c64(s.KW)))
        out = list(acc)
        for k in range(s.KW):
            wv = splat(b, b.load(gep(b, wc, k)), W)
            for q in range(TILE):
                xv = masked_load(b, gep(b, src, q * W + k), masks[q * s.KW + k])
                out[q] = fma(b, xv, wv, out[q])
        return out

    return carried_loop(b, 0, s.C, [zero] * TILE, channel, name="w1dc")
