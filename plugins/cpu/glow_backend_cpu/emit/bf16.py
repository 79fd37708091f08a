"""bfloat16 GEMMs: the opt-in precision ``bf16`` (``compile(..., precision="bf16")``).

With ``precision="bf16"`` the float32 GEMMs of MatMul / FusedMatMul with a
constant weight and of the GEMM path of Conv / FusedConv run on bf16
operands, accumulating in float32:

- the constant operand (FC weight, conv filter) is rounded to bf16 at compile
  time (round to nearest even, NaN kept NaN) and packed in *pairs*: two
  consecutive k of a column (B) or of a row (A) share one 32-bit word, so the
  packed panels have the float32 layout with ``K2 = ceil(K / 2)`` rows of
  words (an odd K is padded with a zero k);
- the run-time operand is rounded to bf16 while it is packed: an activation A
  read in place is converted once per (problem, M panels) into this thread's
  scratch as rows of words (``matmul.py``); an im2col B tile is packed as
  float32 and its rows interleaved in pairs (:func:`pair_packer`);
- the micro-kernel (``gemm.UKernel.bf16``, :func:`gemm_mode`) runs ``K2`` steps, each adding
  ``a[2i] * b[2i] + a[2i + 1] * b[2i + 1]`` per float32 lane: on AMX tiles
  (``amx``: ``amx.py``, 32 x 32 blocks, from 16 rows of C; K padded to steps of 16
  pairs), one ``vdpbf16ps`` with AVX512-BF16 (``native``; no faster than float32
  FMAs on the CPUs measured, but half the weight bytes), or two FMAs of the
  widened halves (``emulate``: the same rounding of the operands, products exact
  in float32, only the order of the float32 sums may differ). Bias, residual and
  activation stay float32, in the epilogue.

Inputs, outputs and every other kernel stay float32. The emitters ask
:func:`bf16_enabled`; the code generator sets the precision on each
``EmitContext`` (:func:`set_precision`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir

from glow_backend_cpu.emit.amx import BLOCK, amx_permitted, has_amx
from glow_backend_cpu.emit.context import CpuTarget, EmitContext, Operand
from glow_backend_cpu.emit.vecops import F32P, Geometry, c64, gep, masked_load, module_of, vty
from glow_backend_cpu.helpers import I16, I32, for_range, intrinsic, iota, splat
from glow_backend_cpu.pack import conv_filter_matrix, pack_a_pairs, round_bf16

if TYPE_CHECKING:  # (gemm.py and conv.py import this module)
    from glow_backend_cpu.emit.conv import ConvShape
    from glow_backend_cpu.emit.gemm import GemmPlan

#: the precisions the cpu backend compiles for (``options={"precision": ...}``)
PRECISIONS = ("fp32", "bf16")


def _bfloat_type() -> ir.Type:
    """LLVM's ``bfloat``, which llvmlite lacks: an ``ir.Type`` printed as ``bfloat`` (only bitcast to and from, and
    passed to intrinsics); one instance, so types built on it compare equal."""
    cls = type("BFloatType", (ir.Type,), {"_to_string": lambda self: "bfloat"})
    return cls()  # type: ignore[no-any-return]


BF16 = _bfloat_type()


# -- the precision of a compile ----------------------------------------------------------------------------------

def set_precision(ctx: EmitContext, precision: str) -> None:
    """Record the compile's precision on an emit context (read by :func:`bf16_enabled`)."""
    setattr(ctx, "glow_precision", precision)


def bf16_enabled(ctx: EmitContext) -> bool:
    """Does this compile run its float32 GEMMs on bf16 operands?"""
    return getattr(ctx, "glow_precision", "fp32") == "bf16"


def dot_mode(target: CpuTarget) -> str:
    """``native`` (``vdpbf16ps``, 16 lanes with AVX512-BF16) or ``emulate`` (two FMAs, any vector width)."""
    feats = set(target.features.split(","))
    return "native" if target.vector_lanes == 16 and "+avx512bf16" in feats else "emulate"


def gemm_mode(target: CpuTarget, rows: int) -> str:
    """The kernel of a bf16 GEMM with ``rows`` rows of C: ``amx`` (AMX-BF16 tiles, ``amx.py``) from 16 rows
    when the CPU has it and Linux lets this process use it, else :func:`dot_mode`."""
    if rows >= 16 and has_amx(target.features) and dot_mode(target) == "native" and amx_permitted():
        return "amx"
    return dot_mode(target)


def amx_geometry() -> Geometry:
    """32 x 32 blocks of C: 2 x 2 tiles (``amx.BLOCK``)."""
    return Geometry(16, BLOCK, BLOCK // 16)


# -- LLVM: the pair product and the conversion -------------------------------------------------------------------

def dot2(b: ir.IRBuilder, mode: str, a: ir.Value, bv: ir.Value, acc: ir.Value) -> ir.Value:
    """``acc + a.lo * bv.lo + a.hi * bv.hi`` per 32-bit lane; ``a`` and ``bv`` are float vectors whose lanes
    hold bf16 pairs (low half: the even k)."""
    W = acc.type.count
    mod = module_of(b)
    if mode == "native":
        t = vty(2 * W, BF16)
        fn = intrinsic(mod, "llvm.x86.avx512bf16.dpbf16ps.512", acc.type, [acc.type, t, t])
        return b.call(fn, [acc, b.bitcast(a, t), b.bitcast(bv, t)])
    it = vty(W, I32)
    ai, bi = b.bitcast(a, it), b.bitcast(bv, it)
    sixteen = ir.Constant(it, [16] * W)
    high = ir.Constant(it, [0xFFFF0000 - (1 << 32)] * W)
    fma = intrinsic(mod, f"llvm.fma.v{W}f32", acc.type, [acc.type] * 3)
    lo = b.call(fma, [b.bitcast(b.shl(ai, sixteen), acc.type), b.bitcast(b.shl(bi, sixteen), acc.type), acc])
    return b.call(fma, [b.bitcast(b.and_(ai, high), acc.type), b.bitcast(b.and_(bi, high), acc.type), lo])


def to_bf16(b: ir.IRBuilder, mode: str, v: ir.Value) -> ir.Value:
    """A float vector rounded to bf16 (nearest even, NaN kept NaN) as ``<W x i16>``."""
    W = v.type.count
    if mode in ("native", "amx") and W == 16:
        fn = intrinsic(module_of(b), "llvm.x86.avx512bf16.cvtneps2bf16.512", vty(16, BF16), [v.type])
        return b.bitcast(b.call(fn, [v]), vty(16, I16))
    it = vty(W, I32)

    def k(x: int) -> ir.Constant:
        return ir.Constant(it, [x] * W)

    u = b.bitcast(v, it)
    top = b.lshr(u, k(16))
    rounded = b.lshr(b.add(u, b.add(k(0x7FFF), b.and_(top, k(1)))), k(16))
    nan = b.icmp_unsigned(">", b.and_(u, k(0x7FFFFFFF)), k(0x7F800000))
    return b.trunc(b.select(nan, b.or_(top, k(0x40)), rounded), vty(W, I16))


def _mask(b: ir.IRBuilder, W: int, first: ir.Value, limit: ir.Value) -> ir.Value:
    """Lanes ``first + i < limit``."""
    return b.icmp_signed("<", b.add(iota(W), splat(b, first, W)), splat(b, limit, W))


def convert_rows(b: ir.IRBuilder, mode: str, W: int, src: ir.Value, ld_src: int, rows: ir.Value,
                 nfloat: ir.Value, nwords: ir.Value, dst: ir.Value, ld_dst: int) -> None:
    """``rows`` float32 rows (stride ``ld_src`` floats) of ``nfloat`` valid floats as rows of bf16 pairs at
    ``dst`` (stride ``ld_dst`` words): words ``0 .. nwords`` written (floats past ``nfloat`` as 0; whole
    vectors, so up to ``W / 2 - 1`` words more)."""
    ht = vty(W, I16).as_pointer()
    with for_range(b, 0, rows, name="cvr") as r:
        s = gep(b, src, b.mul(r, c64(ld_src)))
        d = b.bitcast(gep(b, dst, b.mul(r, c64(ld_dst))), I16.as_pointer())
        with for_range(b, 0, b.mul(nwords, c64(2)), step=W, name="cvf") as f:
            v = masked_load(b, gep(b, s, f), _mask(b, W, f, nfloat))
            b.store(to_bf16(b, mode, v), b.bitcast(b.gep(d, [f]), ht), align=2)


def interleave_rows(b: ir.IRBuilder, mode: str, W: int, src: ir.Value, ld: int, nrows: ir.Value,
                    dst: ir.Value) -> None:
    """Float32 rows ``src[k * ld]`` (``2 * nrows`` of them) as rows of pairs ``dst[k2 * ld]`` (words): lane j
    of word row k2 holds (row 2 k2, row 2 k2 + 1) of column j."""
    pairs = ir.Constant(vty(2 * W, I32), [i // 2 + (W if i % 2 else 0) for i in range(2 * W)])
    pt = vty(2 * W, I16).as_pointer()
    with for_range(b, 0, nrows, name="pair") as k2:
        r0 = gep(b, src, b.mul(k2, c64(2 * ld)))
        r1 = gep(b, r0, ld)
        d = gep(b, dst, b.mul(k2, c64(ld)))
        for j in range(0, ld, W):
            lo = to_bf16(b, mode, b.load(b.bitcast(gep(b, r0, j), vty(W).as_pointer()), align=4))
            hi = to_bf16(b, mode, b.load(b.bitcast(gep(b, r1, j), vty(W).as_pointer()), align=4))
            b.store(b.shuffle_vector(lo, hi, pairs), b.bitcast(gep(b, d, j), pt), align=4)


#: (builder, bg, n0, width, k0, kc, kb, dst): a float32 B packer (``gemm.BPack``)
Packer = Callable[[ir.IRBuilder, ir.Value, ir.Value, ir.Value, ir.Value, ir.Value, ir.Value, ir.Value], None]


def pair_packer(mode: str, W: int, fp32: Packer, K: int, ld: int, tmp: ir.Value) -> Packer:
    """A B packer of pair rows around a float32 one: K block ``[k0, k0 + kc)`` of pairs is packed by ``fp32`` as
    float32 rows ``2 k0 ..`` (at most ``K``) into ``tmp`` (this thread's scratch, ``2 kc`` rows of ``ld``
    floats), zero rows up to ``2 kc`` (an odd K's pair, the padding of AMX's K steps), then interleaved into
    ``dst``."""

    def pack(b: ir.IRBuilder, bg: ir.Value, n0: ir.Value, width: ir.Value, k0: ir.Value, kc: ir.Value,
             kb: ir.Value, dst: ir.Value) -> None:
        kf0 = b.mul(k0, c64(2))
        kf1 = b.add(kf0, b.mul(kc, c64(2)))
        kcf = b.sub(b.select(b.icmp_signed("<", c64(K), kf1), c64(K), kf1), kf0)
        fp32(b, bg, n0, width, kf0, kcf, kb, tmp)
        with for_range(b, kcf, b.sub(kf1, kf0), name="zrow") as r:  # rows past K: zero
            zrow = gep(b, tmp, b.mul(r, c64(ld)))
            for j in range(0, ld, W):
                b.store(ir.Constant(vty(W), None), b.bitcast(gep(b, zrow, j), vty(W).as_pointer()), align=4)
        interleave_rows(b, mode, W, tmp, ld, kc, dst)

    return pack


def pair_blocks(fp32_blocks: list[int]) -> list[int]:
    """K blocks of pairs from float32 K blocks whose starts are even."""
    assert all(k % 2 == 0 for k in fp32_blocks), fp32_blocks
    return [k // 2 for k in fp32_blocks]


# -- convolutions --------------------------------------------------------------------------------------------

#: (geometry, K block limit in float32 rows, K block quantum) -> the float32 im2col packer, its K blocks (float32
#: rows, whole channels, multiples of the quantum) and the packed tile's row stride (``conv._b_source``)
BSource = Callable[[Geometry, int, int], tuple[Packer, list[int], int]]


def conv_operands_bf16(ctx: EmitContext, plan: GemmPlan, s: ConvShape, w: Operand, name: str,
                       b_source: BSource) -> None:
    """A convolution's GEMM (``conv.conv_plan``) on bf16: the filter rounded to bf16 now (MR-row panels of pairs;
    rows of words for AMX, K padded to its steps), each im2col tile packed as float32 (K blocks of whole
    channels starting at even k) and interleaved into pairs."""
    from glow_backend_cpu.emit.gemm import KC_L1, KC_MAX

    mode = gemm_mode(ctx.target, s.Mg)
    amx = mode == "amx"
    if amx:
        plan.geo = amx_geometry()
    geo, b = plan.geo, ctx.builder
    MR, W = geo.mr, geo.lanes
    K2 = -(-s.K // 32) * 16 if amx else (s.K + 1) // 2
    f = conv_filter_matrix(np.asarray(w.const_value, dtype=np.float32), s.G)
    if amx:
        rows = np.zeros((s.G, -(-s.Mg // MR) * MR, 2 * K2), dtype=np.float32)
        rows[:, :s.Mg, :s.K] = f
        packed = round_bf16(rows)
    else:
        packed = pack_a_pairs(f, MR)
    aw = b.bitcast(ctx.add_constant(packed, f"{name or 'conv'}.filter.bf16"), F32P)
    step = packed.shape[1] * K2 * (1 if amx else MR)  # words per group

    def a_ptr(b: ir.IRBuilder, bg: ir.Value, m0: ir.Value) -> tuple[ir.Value, ir.Value]:
        g = b.urem(bg, c64(s.G))
        return gep(b, aw, b.add(b.mul(g, c64(step)), b.mul(m0, c64(K2)))), c64(K2 if amx else K2 * MR)

    fp32_pack, blocks, ld = b_source(geo, KC_MAX if amx else 2 * KC_L1, 32 if amx else 2)
    kbs = pair_blocks(blocks)
    kc2_max = max(e - k for k, e in zip(kbs, kbs[1:] + [K2]))
    tmp = b.bitcast(ctx.scratch(2 * kc2_max * ld * 4), F32P)
    plan.b_pack = pair_packer(mode, W, fp32_pack, s.K, ld, tmp)
    plan.K, plan.k_blocks, plan.pack_ld, plan.bf16 = K2, kbs, ld, mode
    plan.a_ptr, plan.a_packed, plan.prefetch_a = a_ptr, not amx, not amx
