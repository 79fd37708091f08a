"""B read in place by taps: the pixel path's alternative to im2col tiles for stride-1 convolutions.

With stride 1 and output rows as wide as the input's, output pixel ``n`` of
the flat plane reads tap (kh, kw) at input position ``n + (kh*dh - ph)*W +
kw*dw - pw``: a constant offset per tap. A micro-kernel then reads the B
rows of a K block (whole input channels) straight from the input, the taps
unrolled at constant offsets, channels in a loop; lanes whose tap lies in the
padding or in the next or previous row (or past the plane) are loaded under
16-bit lane masks from a compile-time table ``[tile][tap][vector]``. Masked
loads cost more than plain ones, so each N tile has a *kind*, the set of
(tap, vector) loads that need their masks, and each kind its micro-kernel;
the driver (``gemm_dispatch.dispatch_kind``) switches on a constant table of tile
kinds. The K blocks are the im2col path's, so the result is the same, bit for
bit, wherever the packed path keeps one accumulator set (every variant of at
least 8 accumulators).

It pays where the im2col tile is expensive next to the work that reuses it:
few output channels (each packed tile serves ``Mg / 6`` micro-kernel calls). A 1x1 unpadded convolution
has one tap at offset 0 and no row edges: its B rows are the input's plain channel rows, read in place
when it has at most 16 output channels a group (``TAPS_POINTWISE``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir

from glow_backend_cpu.emit.vecops import (
    F32P,
    Geometry,
    c64,
    fma,
    gep,
    geometry,
    masked_load,
    prefetch_lines,
    vload,
)
from glow_backend_cpu.helpers import carried_loop, splat

if TYPE_CHECKING:
    from glow_backend_cpu.emit.context import EmitContext
    from glow_backend_cpu.emit.conv import ConvShape
    from glow_backend_cpu.emit.gemm import GemmPlan, UKernel

#: the pixel path reads B in place where ``taps_fit`` (tests switch ``TAPS`` off to compare): at most
#: ``TAPS_MAX`` taps, a mask table of at most ``TAPS_TABLE`` bytes, at most ``TAP_KINDS`` micro-kernels a
#: convolution, rows at least ``TAPS_MIN_W`` wide and at most ``TAPS_MAX_M`` output channels a group. Measured
#: against im2col tiles (one convolution, 2 threads): 64 channels at 224 x 224 11 % faster, at 56 x 56 5 %,
#: 128 at 112 x 112 4 %, 3 input channels at 224 x 224 21 %; but 256 channels 2-5 % slower (a tile serves 43
#: calls, and masked loads cost more than aligned ones) and rows of 28 pixels 1-18 % slower (a row edge in
#: most vectors). Rows of 56 gain less (5 %: a third of the loads stay masked) than their micro-kernels cost
#: to compile (0.45 s more for ResNet-50, whose budget is 3 s), so rows start at 96 pixels
TAPS = True
TAPS_MAX = 25
TAPS_TABLE = 1 << 20
TAP_KINDS = 8
TAPS_MIN_W = 96
TAPS_MAX_M = 128
#: 1x1 stride-1 unpadded convolutions (every tap offset 0, no row edges) with at most ``TAPS_POINTWISE_M``
#: output channels a group read their plain input rows in place instead of packing them (a packed tile serves
#: 3 micro-kernel calls). Measured against packed rows (one convolution after a Relu, 2 threads): 64 -> 16 at
#: 55 x 55 24 % faster (SqueezeNet's squeeze layers); more channels gained less or lost: 64 -> 64 at 56 x 56
#: 10 %, 256 -> 64 2 %, 256 -> 128 at 28 x 28 5 % faster, 128 -> 32 and 128 -> 48 at 27 x 27 1-8 % slower, and
#: in place at 56 x 56 and 28 x 28 ResNet-50 ran no faster while its cold compile took 0.3 s more
TAPS_POINTWISE = True
TAPS_POINTWISE_M = 16


def taps_fit(s: ConvShape, lanes: int) -> bool:
    """Read B in place (no im2col tiles): stride 1 and output rows as wide as the input's, so an output
    pixel's tap is a constant offset from the pixel in the flat plane; rows of at least ``TAPS_MIN_W``
    pixels, at most ``TAPS_MAX_M`` output channels a group, at most ``TAPS_MAX`` taps (each one unrolled in
    the micro-kernel); a 1x1 unpadded convolution (one tap at offset 0, no row edges) whatever its rows, with
    at most ``TAPS_POINTWISE_M`` output channels a group; lane masks of 16 bits at most, and a mask table of
    at most ``TAPS_TABLE`` bytes."""
    if not TAPS or lanes > 16:
        return False
    if s.pointwise:
        if not TAPS_POINTWISE or s.Mg > TAPS_POINTWISE_M:
            return False
    elif s.sh != 1 or s.sw != 1 or s.OW != s.W or s.OW < TAPS_MIN_W or s.Mg > TAPS_MAX_M:
        return False
    T = s.KH * s.KW
    geo = geometry(lanes)
    nt = -(-s.OH * s.OW // geo.nr)
    return T <= TAPS_MAX and nt * T * geo.nvec * 2 <= TAPS_TABLE


def tap_masks(s: ConvShape, geo: Geometry) -> np.ndarray:
    """``[tile][tap][vector]`` 16-bit lane masks: lane l of the tile's vector j reads tap (kh, kw) of
    pixel ``n = tile * NR + j * lanes + l`` when the pixel exists and its tap lies inside the input."""
    W, NR = geo.lanes, geo.nr
    N = s.OH * s.OW
    nt = -(-N // NR)
    n = np.arange(nt * NR)
    oh, ow = n // s.OW, n % s.OW
    bits = (np.uint32(1) << np.arange(W, dtype=np.uint32))
    out = np.zeros((nt, s.KH * s.KW, geo.nvec), dtype=np.uint16)
    for kh in range(s.KH):
        ih = oh + kh * s.dh - s.ph
        for kw in range(s.KW):
            iw = ow + kw * s.dw - s.pw
            ok = (n < N) & (ih >= 0) & (ih < s.H) & (iw >= 0) & (iw < s.W)
            out[:, kh * s.KW + kw, :] = (ok.reshape(nt, geo.nvec, W) * bits).sum(axis=2).astype(np.uint16)
    return out


def read_taps_in_place(ctx: EmitContext, s: ConvShape, geo: Geometry, xp: ir.Value, plan: GemmPlan,
                        name: str) -> None:
    """Switch ``plan`` to B read in place by taps: the K blocks stay (whole channels), so the result is the
    packed path's, bit for bit."""
    T, HW = s.KH * s.KW, s.H * s.W
    masks = tap_masks(s, geo)
    table = ctx.add_constant(masks, f"{name or 'conv'}.tap_masks")  # i16*
    row = T * geo.nvec  # masks per tile

    def b_ptr(b: ir.IRBuilder, bg: ir.Value, n0: ir.Value, nt: ir.Value, k0: ir.Value) -> ir.Value:
        ch = b.add(b.mul(bg, c64(s.Cg)), b.udiv(k0, c64(T)))
        return gep(b, xp, b.add(b.mul(ch, c64(HW)), n0))

    def aux_ptr(b: ir.IRBuilder, nt: ir.Value) -> ir.Value:
        return b.bitcast(gep(b, table, b.mul(nt, c64(row))), F32P)  # the micro-kernel's pointer argument

    plan.b_pack, plan.pack_ld, plan.b_ptr, plan.aux_ptr = None, 0, b_ptr, aux_ptr
    plan.taps = tuple((kh * s.dh - s.ph) * s.W + kw * s.dw - s.pw for kh in range(s.KH) for kw in range(s.KW))
    plan.tap_stride = HW
    plan.tap_tiles, plan.tap_kinds = tile_kinds(masks, s.OH * s.OW, geo)


def tile_kinds(masks: np.ndarray, N: int, geo: Geometry) -> tuple[list[int], list[tuple[int, int, tuple[bool, ...]]]]:
    """Each tile's kind and the kinds: (vectors, valid lanes of the last, which (tap, vector) loads need their
    masks, ``[t * vectors + j]``). A load needs its mask when some of its lanes read padding, the
    neighbouring row or past the plane; at most ``TAP_KINDS`` kinds (the rarest tiles take a kind that masks
    every load), each a micro-kernel."""
    W, NR = geo.lanes, geo.nr
    full = (1 << W) - 1
    keys = []
    for t in range(masks.shape[0]):
        width = min(NR, N - t * NR)
        nvec = -(-width // W)
        need = tuple(bool(masks[t, k, j] != full) for k in range(masks.shape[1]) for j in range(nvec))
        keys.append((nvec, width - (nvec - 1) * W, need))
    counts: dict[tuple[int, int, tuple[bool, ...]], int] = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    kept = sorted(counts, key=lambda k: -counts[k])[:TAP_KINDS - 2]
    kinds: list[tuple[int, int, tuple[bool, ...]]] = list(kept)
    tiles = []
    for nvec, tail, need in keys:
        k = (nvec, tail, need)
        if k not in kinds:
            k = (nvec, tail, (True,) * (nvec * masks.shape[1]))
            if k not in kinds:
                kinds.append(k)
        tiles.append(kinds.index(k))
    return tiles, kinds


# -- micro-kernel ------------------------------------------------------------------------------------------------

def taps_sum(b: ir.IRBuilder, s: UKernel, zeros: list[list[ir.Value]], a_rows: list[ir.Value], a_step: ir.Value,
              bp: ir.Value, kc: ir.Value, pf: ir.Value, aux: ir.Value) -> list[list[ir.Value]]:
    """The K block's sum with B read in place (``UKernel.taps``): a loop over its channels, each
    channel's taps unrolled at constant offsets."""
    W, R, V, T = s.lanes, s.rows, s.nvec, len(s.taps)
    mty = ir.VectorType(ir.IntType(1), W)
    mp = b.bitcast(aux, ir.IntType(16).as_pointer())

    def mask(t: int, j: int) -> ir.Value:
        bits = b.load(gep(b, mp, t * s.tap_masks + j), align=2)
        return b.bitcast(bits if W == 16 else b.trunc(bits, ir.IntType(W)), mty)

    pf_lines = -(-T * s.mr_panel // 16) if s.prefetch else 0

    def body(b: ir.IRBuilder, c: ir.Value, vals: list[ir.Value]) -> list[ir.Value]:
        acc = [vals[i * V:(i + 1) * V] for i in range(R)]
        bc = gep(b, bp, b.mul(c, c64(s.tap_stride)))
        kc0 = b.mul(c, c64(T))
        if pf_lines:
            prefetch_lines(b, gep(b, pf, b.mul(kc0, a_step)), pf_lines)
        for t in range(T):
            brow = gep(b, bc, s.taps[t])
            bv = [masked_load(b, gep(b, brow, j * W), mask(t, j)) if s.tap_masked[t * V + j]
                  else vload(b, gep(b, brow, j * W), W) for j in range(V)]
            ka = b.mul(b.add(kc0, c64(t)), a_step)
            for i in range(R):
                av = splat(b, b.load(gep(b, a_rows[i], ka), align=4), W)
                acc[i] = [fma(b, av, bv[j], acc[i][j]) for j in range(V)]
        return [v for row in acc for v in row]

    nch = b.udiv(kc, c64(T))
    out = carried_loop(b, c64(0), nch, [v for row in zeros for v in row], body, name="taps")
    return [out[i * V:(i + 1) * V] for i in range(R)]
