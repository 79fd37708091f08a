"""Fast int8 kernels: FusedIntConv and FusedIntMatMul as u8 x s8 -> s32 GEMMs with a fused requantize.

Both are ``Y[m, p] = requant(sum_k X[k, p] * W[m, k] + comp[m])`` with ``m``
an output channel (a column of B for a matrix product) and ``p`` a pixel (a
row of A):

- **weights**, packed at compile time: ``W_eff = W - FilterZero`` (int8; the
  kernel declines filters where that leaves [-128, 127]) in MR-channel panels
  of 4-byte K groups, ``[panel][K/4][MR][4]``; the compensation
  ``comp[m] = Bias[m] - InputZero_u * sum_k W_eff[m, k]`` is precomputed, so
  the inner loop never sees a zero point;
- **activations**, packed per thread into a tile of up to ``NV`` vectors of 16
  pixels, ``[K/4][pixels][4]`` bytes, in the unsigned domain: uint8 as they
  are, int8 shifted by +128 (``x ^ 0x80``, with ``InputZero_u = InputZero +
  128``); convolution padding reads as ``InputZero_u`` so it contributes 0. A
  1x1 stride-1 unpadded convolution packs plain rows (vector loads); other
  convolutions and matrix products gather through a per-tile table of pixel
  offsets (one per filter tap; a run along one input row is one, possibly
  strided, vector load);
- **micro-kernel** (an LLVM function per variant): MR x NV accumulators of 16
  int32, each K group one ``vpdpbusd`` (``llvm.x86.avx512.vpdpbusd.512``) per
  accumulator with the weight word broadcast; with AVX512-BW but no VNNI, two
  ``vpmaddwd`` (``llvm.x86.avx512.pmaddw.d.512``) on the bytes widened to 16
  bits, pairs (t = 0, 1) and (2, 3): a u8 x s8 product fits i16 and a pair's sum
  fits i32, so it is exact (unlike ``vpmaddubsw``, which saturates); with AVX2
  the same on 256-bit halves; otherwise plain widening (zero-/sign-extend,
  multiply, add the 4 lanes);
- **epilogue**: ``clip(roundeven(float(acc + comp) * mult) + YZero, lo, hi)``
  in float32 (bit for bit the reference Requantize), stored as 16 bytes.

Work items are (image, pixel tile, channel chunk), split over the threads; a
thread repacks a tile only when its item moves to another tile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from glow_backend_cpu.emit.context import EmitContext, Instr, register_emitter
from glow_backend_cpu.emit.conv import ConvShape, conv_shape
from glow_backend_cpu.emit.qgeneric import INT_MATMUL_PATHS
from glow_backend_cpu.emit.qvec import strided_load_i8
from glow_backend_cpu.helpers import (
    F32,
    I1,
    I8,
    I32,
    I64,
    VOID,
    call_intrinsic,
    carried_loop,
    for_range,
    i64,
    intrinsic,
    partition,
)
from glow_core.ir.graph import Constant, Node
from glow_core.ir.types import ElemKind

E = ElemKind
MR = 6          # channels per panel
LANES = 16      # pixels per vector (int32 lanes of a 512-bit register)
NV_MAX = 4      # vectors per pixel tile
I8P, I32P = I8.as_pointer(), I32.as_pointer()
V16I64 = ir.VectorType(I64, 16)
V16I32, V16I8, V64I8, V16F = (ir.VectorType(I32, 16), ir.VectorType(I8, 16), ir.VectorType(I8, 64),
                              ir.VectorType(F32, 16))


def c64(v: int) -> ir.Constant:
    return i64(v)


def dot_isa(ctx: EmitContext) -> str:
    """How the micro-kernel multiplies bytes: ``vnni`` (vpdpbusd), ``bw`` (AVX512-BW: widen to 16 bits, vpmaddwd),
    ``avx2`` (the same on two 256-bit halves) or ``widen`` (plain 32-bit widening, any target)."""
    feats = ctx.target.features.split(",")
    if "+avx512vnni" in feats:
        return "vnni"
    return "bw" if "+avx512bw" in feats else "avx2" if "+avx2" in feats else "widen"


# -- what the fast kernels accept ----------------------------------------------------------------------------

def _const(node: Node, i: int) -> np.ndarray | None:
    v = node.inputs[i] if i < len(node.inputs) else None
    return v.payload if isinstance(v, Constant) else None


def _weights_fit(w: np.ndarray, wz: np.ndarray, axis: int) -> bool:
    shape = [1] * w.ndim
    shape[axis] = -1
    eff = w.astype(np.int32) - (wz.astype(np.int32).reshape(shape) if wz.size > 1 else int(wz.reshape(())))
    return bool(eff.size == 0 or (eff.min() >= -128 and eff.max() <= 127))


def _operands_const(node: Node) -> bool:
    return all(_const(node, i) is not None for i in (1, 2, 3, 4, 5)) and \
        (len(node.inputs) < 7 or node.inputs[6] is None or _const(node, 6) is not None)


def _qconv_ok(node: Node) -> bool:
    x = node.inputs[0].type
    if x.rank not in (3, 4) or node.attrs["group"] != 1 or not _operands_const(node):
        return False
    return _weights_fit(_const(node, 1), _const(node, 3), 0)  # type: ignore[arg-type]


def _qmatmul_ok(node: Node) -> bool:
    if not _operands_const(node):
        return False
    return _weights_fit(_const(node, 1), _const(node, 3), 1)  # type: ignore[arg-type]


# -- compile-time packing ---------------------------------------------------------------------------------------

@dataclass
class Packed:
    """The packed weights and per-channel epilogue constants of one kernel."""

    M: int
    K: int
    KQ: int
    panels: np.ndarray   # int8 [MP, KQ, MR, 4]
    comp: np.ndarray     # int32 [MP * MR]
    mult: np.ndarray     # float32 [MP * MR]
    xz_u: int            # the input zero point in the unsigned domain
    signed_x: bool
    yz: float
    lo: float
    hi: float
    #: int32 results (IntMatMul: no requantize; the input zero point is a run-time value, see ``runtime_comp``)
    out32: bool = False
    colsum: np.ndarray | None = None   # int32 [MP * MR]: sum_k W_eff[m, k] (wrapped)


def pack_weights(w_mk: np.ndarray, wz: np.ndarray, xz: np.ndarray, x_elem: ElemKind, bias: np.ndarray | None,
                 mult: np.ndarray, yz: np.ndarray, y_elem: ElemKind, clamp: tuple[int, int]) -> Packed:
    """``w_mk`` [M, K] (channels x reduction) -> panels, compensation and multipliers."""
    M, K = w_mk.shape
    KQ = max(1, -(-K // 4))
    MP = -(-M // MR)
    eff = w_mk.astype(np.int64) - (wz.astype(np.int64).reshape(-1, 1) if wz.size > 1 else int(wz.reshape(())))
    signed_x = x_elem is E.INT8
    xz_u = int(xz.reshape(())) + (128 if signed_x else 0)
    full = np.zeros((MP * MR, KQ * 4), np.int64)
    full[:M, :K] = eff
    panels = full.reshape(MP, MR, KQ, 4).transpose(0, 2, 1, 3).astype(np.int8)
    comp = np.zeros(MP * MR, np.int64)
    comp[:M] = -xz_u * eff.sum(axis=1) + (bias.astype(np.int64) if bias is not None else 0)
    comp = ((comp + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)  # the accumulator wraps like the reference
    mfull = np.zeros(MP * MR, np.float32)
    mfull[:M] = np.broadcast_to(mult.astype(np.float32).reshape(-1), (M,))
    info = np.iinfo(y_elem.dtype)
    lo, hi = max(int(info.min), clamp[0]), min(int(info.max), clamp[1])
    colsum = np.zeros(MP * MR, np.int64)
    colsum[:M] = eff.sum(axis=1)
    return Packed(M, K, KQ, np.ascontiguousarray(panels), comp, mfull, xz_u, signed_x,
                  float(yz.reshape(())), float(lo), float(hi),
                  colsum=((colsum + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32))


# -- the micro-kernel -----------------------------------------------------------------------------------------

def _pairs(b: ir.IRBuilder, v: ir.Value, first: int, signed: bool) -> ir.Value:
    """Bytes 4l+first and 4l+first+1 of each 32-bit lane l, widened to ``<32 x i16>``."""
    idx = ir.Constant(ir.VectorType(I32, 32), [4 * (i // 2) + first + i % 2 for i in range(32)])
    v = b.shuffle_vector(b.bitcast(v, V64I8), ir.Constant(V64I8, None), idx)
    t = ir.VectorType(ir.IntType(16), 32)
    return b.sext(v, t) if signed else b.zext(v, t)


def _pmaddwd(b: ir.IRBuilder, x: ir.Value, w: ir.Value, isa: str) -> ir.Value:
    """``<32 x i16>`` x ``<32 x i16>`` -> ``<16 x i32>`` sums of adjacent products (one zmm, or two ymm halves)."""
    if isa == "bw":
        v32 = ir.VectorType(ir.IntType(16), 32)
        return b.call(intrinsic(b.module, "llvm.x86.avx512.pmaddw.d.512", V16I32, [v32, v32]), [x, w])
    v16, v8 = ir.VectorType(ir.IntType(16), 16), ir.VectorType(I32, 8)
    fn = intrinsic(b.module, "llvm.x86.avx2.pmadd.wd", v8, [v16, v16])
    halves = []
    for h in range(2):
        idx = ir.Constant(ir.VectorType(I32, 16), list(range(16 * h, 16 * h + 16)))
        halves.append(b.call(fn, [b.shuffle_vector(x, x, idx), b.shuffle_vector(w, w, idx)]))
    return b.shuffle_vector(halves[0], halves[1], ir.Constant(ir.VectorType(I32, 16), list(range(16))))


def _dot(b: ir.IRBuilder, acc: ir.Value, xu8: ir.Value, ws8: ir.Value, isa: str) -> ir.Value:
    """acc[l] += sum_t u8(xu8 byte 4l+t) * s8(ws8 byte 4l+t)."""
    if isa == "vnni":
        fn = intrinsic(b.module, "llvm.x86.avx512.vpdpbusd.512", V16I32, [V16I32, V16I32, V16I32])
        return b.call(fn, [acc, xu8, ws8])
    if isa in ("bw", "avx2"):  # u8 and s8 fit i16, and a pair's sum of products fits i32: vpmaddwd is exact
        for first in (0, 2):
            acc = b.add(acc, _pmaddwd(b, _pairs(b, xu8, first, False), _pairs(b, ws8, first, True), isa))
        return acc
    v64 = ir.VectorType(I32, 64)
    prod = b.mul(b.zext(b.bitcast(xu8, V64I8), v64), b.sext(b.bitcast(ws8, V64I8), v64))
    for t in range(4):
        part = b.shuffle_vector(prod, ir.Constant(v64, None), ir.Constant(V16I32, [4 * l + t for l in range(16)]))
        acc = b.add(acc, part)
    return acc


def _splat_i32(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    vec = b.insert_element(ir.Constant(V16I32, None), v, ir.Constant(I32, 0))
    return b.shuffle_vector(vec, ir.Constant(V16I32, None), ir.Constant(V16I32, [0] * 16))


def _splat_f(b: ir.IRBuilder, v: ir.Value | float) -> ir.Value:
    if isinstance(v, float):
        return ir.Constant(V16F, [v] * 16)
    vec = b.insert_element(ir.Constant(V16F, None), v, ir.Constant(I32, 0))
    return b.shuffle_vector(vec, ir.Constant(V16F, None), ir.Constant(V16I32, [0] * 16))


def micro_kernel(module: ir.Module, nv: int, pk: Packed, contiguous: bool, isa: str) -> ir.Function:
    """``void k(i8* panel, i8* tile, i32* comp, float* mult, i8* out, i64 ld_m, i64 ld_p, i64 rows, i64 px)``.

    ``out`` points at (first channel of the panel, first pixel of the tile); channel r, pixel p is stored at
    ``out[r * ld_m + p * ld_p]`` (``ld_p`` is 1 when ``contiguous``); only ``rows`` channels and ``px`` pixels.
    """
    # one function per variant and module: what the body depends on is in its name
    key = f"{nv}_{isa}_{pk.KQ}_{int(contiguous)}_" + ("i32" if pk.out32 else f"{pk.yz:g}_{pk.lo:g}_{pk.hi:g}")
    name = "glow_q8_ukernel_" + key.replace("-", "m").replace(".", "p")
    existing = module.globals.get(name)
    if existing is not None:
        return existing  # type: ignore[no-any-return]
    fty = ir.FunctionType(VOID, [I8P, I8P, I32P, F32.as_pointer(), I8P, I64, I64, I64, I64])
    fn = ir.Function(module, fty, name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    panel, tile, comp, mult, out, ld_m, ld_p, rows, px = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    a32 = b.bitcast(panel, I32P)
    tv = b.bitcast(tile, V16I32.as_pointer())

    def body(b: ir.IRBuilder, q: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
        xs = [b.load(b.gep(tv, [b.add(b.mul(q, c64(nv)), c64(j))]), align=64) for j in range(nv)]
        out_accs = list(accs)
        for r in range(MR):
            wv = _splat_i32(b, b.load(b.gep(a32, [b.add(b.mul(q, c64(MR)), c64(r))]), align=4))
            for j in range(nv):
                out_accs[r * nv + j] = _dot(b, out_accs[r * nv + j], xs[j], wv, isa)
        return out_accs

    zero = ir.Constant(V16I32, [0] * 16)
    accs = carried_loop(b, 0, pk.KQ, [zero] * (MR * nv), body, name="kq")
    if pk.out32:
        _store_int32(b, accs, comp, b.bitcast(out, I32P), ld_m, ld_p, rows, px, nv)
        b.ret_void()
        return fn
    for r in range(MR):
        with b.if_then(b.icmp_signed("<", c64(r), rows)):
            cm = _splat_i32(b, b.load(b.gep(comp, [c64(r)]), align=4))
            mm = _splat_f(b, b.load(b.gep(mult, [c64(r)]), align=4))
            for j in range(nv):
                v = _epilogue(b, b.add(accs[r * nv + j], cm), mm, pk)
                remaining = b.sub(px, c64(j * LANES))
                base = b.add(b.mul(c64(r), ld_m), b.mul(c64(j * LANES), ld_p))
                if contiguous:
                    p = b.bitcast(b.gep(out, [base]), V16I8.as_pointer())
                    with b.if_else(b.icmp_signed(">=", remaining, c64(LANES))) as (full, part):
                        with full:
                            b.store(v, p, align=1)
                        with part:
                            with for_range(b, 0, remaining, name="tail") as l:
                                b.store(b.extract_element(v, l), b.gep(out, [b.add(base, l)]))
                else:
                    with for_range(b, 0, smin_i64(b, remaining, c64(LANES)), name="px") as l:
                        byte = b.extract_element(v, l)
                        b.store(byte, b.gep(out, [b.add(base, b.mul(l, ld_p))]))
    b.ret_void()
    return fn


def _store_int32(b: ir.IRBuilder, accs: list[ir.Value], comp: ir.Value, out: ir.Value, ld_m: ir.Value,
                 ld_p: ir.Value, rows: ir.Value, px: ir.Value, nv: int) -> None:
    """IntMatMul's epilogue: ``acc + comp[r]`` (int32, wrapping) of channel r, pixel p at ``out[r ld_m + p ld_p]``."""
    for r in range(MR):
        with b.if_then(b.icmp_signed("<", c64(r), rows)):
            cm = _splat_i32(b, b.load(b.gep(comp, [c64(r)]), align=4))
            for j in range(nv):
                v = b.add(accs[r * nv + j], cm)
                base = b.add(b.mul(c64(r), ld_m), b.mul(c64(j * LANES), ld_p))
                with for_range(b, 0, smin_i64(b, b.sub(px, c64(j * LANES)), c64(LANES)), name="px") as l:
                    b.store(b.extract_element(v, l), b.gep(out, [b.add(base, b.mul(l, ld_p))]))


def _splat_i64(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    vec = b.insert_element(ir.Constant(V16I64, None), v, ir.Constant(I32, 0))
    return b.shuffle_vector(vec, ir.Constant(V16I64, None), ir.Constant(V16I32, [0] * 16))


def smin_i64(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


def _epilogue(b: ir.IRBuilder, acc: ir.Value, mult: ir.Value, pk: Packed) -> ir.Value:
    v = call_intrinsic(b, "roundeven", [b.fmul(b.sitofp(acc, V16F), mult)])
    v = b.fadd(v, _splat_f(b, pk.yz))
    v = call_intrinsic(b, "maxnum", [v, _splat_f(b, pk.lo)])
    v = call_intrinsic(b, "minnum", [v, _splat_f(b, pk.hi)])
    return b.trunc(b.fptosi(v, V16I32), V16I8)


# -- packing activations -----------------------------------------------------------------------------------------

Rows = Callable[[ir.IRBuilder, ir.Value, int], ir.Value]


def _interleave4(b: ir.IRBuilder, rows: Sequence[ir.Value]) -> ir.Value:
    """Four <16 x i8> rows -> <64 x i8> with byte 4l+t = rows[t][l] (as <16 x i32>)."""
    v32 = ir.VectorType(I8, 32)
    lo = b.shuffle_vector(rows[0], rows[1], ir.Constant(ir.VectorType(I32, 32), list(range(32))))
    hi = b.shuffle_vector(rows[2], rows[3], ir.Constant(ir.VectorType(I32, 32), list(range(32))))
    idx = [(t // 2) * 32 + (t % 2) * 16 + l for l in range(16) for t in range(4)]
    del v32
    return b.bitcast(b.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(I32, 64), idx)), V16I32)


def pack_tile(b: ir.IRBuilder, pk: Packed, nv: int, row: Rows, tile: ir.Value) -> None:
    """``tile[q][j]`` = the interleaved bytes of rows 4q..4q+3 for pixel vector j (``row(b, k, j)``)."""
    tv = b.bitcast(tile, V16I32.as_pointer())
    zero = ir.Constant(V16I8, [0] * 16)
    with for_range(b, 0, pk.KQ, name="pq") as q:
        for j in range(nv):
            rows = []
            for t in range(4):
                k = b.add(b.mul(q, c64(4)), c64(t))
                if pk.K % 4 == 0:
                    rows.append(row(b, k, j))
                    continue
                rows.append(branch_value(b, b.icmp_signed("<", k, c64(pk.K)), lambda b, k=k, j=j: row(b, k, j),
                                         lambda b: zero))
            b.store(_interleave4(b, rows), b.gep(tv, [b.add(b.mul(q, c64(nv)), c64(j))]), align=64)


def branch_value(b: ir.IRBuilder, cond: ir.Value, then: Callable[[ir.IRBuilder], ir.Value],
                 other: Callable[[ir.IRBuilder], ir.Value]) -> ir.Value:
    """``then(b) if cond else other(b)``, each side computed only on its branch (a phi; no stack slot)."""
    fn = b.block.function
    t_blk, o_blk, end = fn.append_basic_block("bv.then"), fn.append_basic_block("bv.else"), \
        fn.append_basic_block("bv.end")
    b.cbranch(cond, t_blk, o_blk)
    b.position_at_end(t_blk)
    tv = then(b)
    t_end = b.block
    b.branch(end)
    b.position_at_end(o_blk)
    ov = other(b)
    o_end = b.block
    b.branch(end)
    b.position_at_end(end)
    phi = b.phi(tv.type)
    phi.add_incoming(tv, t_end)
    phi.add_incoming(ov, o_end)
    return phi


def _to_unsigned(b: ir.IRBuilder, v: ir.Value, pk: Packed) -> ir.Value:
    return b.xor(v, ir.Constant(V16I8, [0x80] * 16)) if pk.signed_x else v


def gather_rows(pk: Packed, xbase: Callable[[ir.IRBuilder], ir.Value], cstride: int, taps: int,
                table: ir.Value, step: int = 1) -> Rows:
    """Row k = channel k // taps at the tile's offsets for tap k % taps (``table[tap][j]``: -1 = padding).

    16 offsets ``first + step * lane`` (inside one input row, away from the padding) are one vector load
    (``step`` 1) or one wide masked load and a lane shuffle (``step`` 2..4, a strided convolution); others
    gather byte by byte."""
    tab = table

    def row(b: ir.IRBuilder, k: ir.Value, j: int) -> ir.Value:
        c, tap = (b.udiv(k, c64(taps)), b.urem(k, c64(taps))) if taps > 1 else (k, c64(0))
        offs = b.load(b.gep(b.bitcast(tab, V16I32.as_pointer()), [b.add(b.mul(tap, c64(NV_MAX)), c64(j))]),
                      align=64)
        base = b.gep(xbase(b), [b.mul(c, c64(cstride))])
        first = b.extract_element(offs, ir.Constant(I32, 0))
        # 16 consecutive in-bounds bytes (inside a row, away from the padding): one vector load
        run = b.add(_splat_i32(b, first), ir.Constant(V16I32, [step * i for i in range(16)]))
        same = b.bitcast(b.icmp_signed("==", offs, run), ir.IntType(16))
        contiguous = b.and_(b.icmp_signed(">=", first, ir.Constant(I32, 0)),
                            b.icmp_unsigned("==", same, ir.Constant(ir.IntType(16), 0xFFFF)))

        def vector(b: ir.IRBuilder) -> ir.Value:
            p = b.gep(base, [b.sext(first, I64)])
            if step > 1:
                every = ir.Constant(ir.VectorType(I1, 16), [1] * 16)
                return _to_unsigned(b, strided_load_i8(b, p, every, step, ir.Constant(V16I8, None)), pk)
            return _to_unsigned(b, b.load(b.bitcast(p, V16I8.as_pointer()), align=1), pk)

        def gather(b: ir.IRBuilder) -> ir.Value:
            valid = b.icmp_signed(">=", offs, ir.Constant(V16I32, [0] * 16))
            safe = b.select(valid, offs, ir.Constant(V16I32, [0] * 16))
            v = ir.Constant(V16I8, None)
            for lane in range(16):  # scalar loads: x86 has no byte gather
                off = b.extract_element(safe, ir.Constant(I32, lane))
                v = b.insert_element(v, b.load(b.gep(base, [b.sext(off, I64)])), ir.Constant(I32, lane))
            return b.select(valid, _to_unsigned(b, v, pk), ir.Constant(V16I8, [pk.xz_u] * 16))

        return branch_value(b, contiguous, vector, gather)
    return row


def contiguous_rows(pk: Packed, xbase: Callable[[ir.IRBuilder], ir.Value], plane: int, p0: ir.Value) -> Rows:
    """Row k of a 1x1 stride-1 unpadded convolution: input channel k's pixels (masked at the plane's end)."""

    def row(b: ir.IRBuilder, k: ir.Value, j: int) -> ir.Value:
        start = b.add(p0, c64(j * LANES))
        mask = b.icmp_signed("<", ir.Constant(V16I64, list(range(16))), _splat_i64(b, b.sub(c64(plane), start)))
        p = b.bitcast(b.gep(xbase(b), [b.add(b.mul(k, c64(plane)), start)]), V16I8.as_pointer())
        ld = intrinsic(b.module, "llvm.masked.load.v16i8.p0", V16I8,
                       [V16I8.as_pointer(), I32, ir.VectorType(I1, 16), V16I8])
        return _to_unsigned(b, b.call(ld, [p, ir.Constant(I32, 1), mask, ir.Constant(V16I8, [0] * 16)]), pk)
    return row


# -- the driver: work items over the threads ------------------------------------------------------------------

@dataclass
class Job:
    """One fused int8 product as the driver sees it."""

    pk: Packed
    name: str
    images: int
    P: int                  # pixels (rows of A) per image
    taps: int               # offset-table entries per pixel vector (0: contiguous rows, no table)
    contiguous: bool        # output pixels adjacent (conv) or strided by ld_p (matmul)
    ld_m: int
    ld_p: int
    #: (b, image) -> pointer to the image's input
    x_image: Callable[[ir.IRBuilder, ir.Value], ir.Value]
    #: (b, image, first channel, first pixel) -> output pointer
    out_at: Callable[[ir.IRBuilder, ir.Value, ir.Value, ir.Value], ir.Value]
    #: (b, first pixel, table) -> fills table[tap][j] (None when taps == 0)
    fill_table: Callable[[ir.IRBuilder, ir.Value, ir.Value], None] | None
    cstride: int            # elements between input rows of consecutive channels (gathered rows)
    plane: int              # pixels of one input channel (contiguous rows)
    step: int = 1           # input offset between adjacent output pixels of a row (gathered rows: 1..4)
    #: (b) -> the input zero point (i32, unsigned domain) read at run time: comp is then computed per run
    runtime_zero: Callable[[ir.IRBuilder], ir.Value] | None = None


def drive(ctx: EmitContext, job: Job) -> None:
    b, pk = ctx.builder, job.pk
    NR = NV_MAX * LANES
    tiles = -(-job.P // NR)
    last_px = job.P - (tiles - 1) * NR
    nv_last = -(-last_px // LANES)
    MP = pk.panels.shape[0]
    nchunks = min(MP, max(1, -(-16 // (job.images * tiles))))
    ppc = -(-MP // nchunks)
    nchunks = -(-MP // ppc)
    apan = b.bitcast(ctx.add_constant(pk.panels, f"{job.name}.q8panels"), I8P)
    comp = b.bitcast(ctx.add_constant(pk.comp, f"{job.name}.q8comp"), I32P)
    if job.runtime_zero is not None:
        comp = runtime_comp(ctx, job, comp)
    mult = b.bitcast(ctx.add_constant(pk.mult, f"{job.name}.q8mult"), F32.as_pointer())
    tile = b.bitcast(ctx.scratch(pk.KQ * NV_MAX * 64), I8P)
    table = b.bitcast(ctx.scratch(max(job.taps, 1) * NV_MAX * 64), I8P)
    isa = dot_isa(ctx)
    kfull = micro_kernel(ctx.module, NV_MAX, pk, job.contiguous, isa)
    klast = kfull if nv_last == NV_MAX else micro_kernel(ctx.module, nv_last, pk, job.contiguous, isa)
    items = job.images * tiles * nchunks
    packed = b.alloca(I64)
    b.store(c64(-1), packed)
    i0, i1 = partition(b, items, ctx.tid, ctx.nthreads)
    with for_range(b, i0, i1, name="qitem") as it:
        ch = b.urem(it, c64(nchunks))
        nt = b.udiv(it, c64(nchunks))
        t = b.urem(nt, c64(tiles))
        n = b.udiv(nt, c64(tiles))
        p0 = b.mul(t, c64(NR))
        is_last = b.icmp_signed("==", t, c64(tiles - 1))
        with b.if_then(b.icmp_signed("!=", b.load(packed), nt)):
            b.store(nt, packed)
            xb = job.x_image(b, n)
            if job.taps:
                assert job.fill_table is not None
                job.fill_table(b, p0, table)
                row = gather_rows(pk, lambda b: xb, job.cstride, job.taps, table, job.step)
            else:
                row = contiguous_rows(pk, lambda b: xb, job.plane, p0)
            if nv_last == NV_MAX:
                pack_tile(b, pk, NV_MAX, row, tile)
            else:
                with b.if_else(is_last) as (then, other):
                    with then:
                        pack_tile(b, pk, nv_last, row, tile)
                    with other:
                        pack_tile(b, pk, NV_MAX, row, tile)
        px = b.select(is_last, c64(last_px), c64(NR))
        pa = b.mul(ch, c64(ppc))
        pb = smin_i64(b, b.add(pa, c64(ppc)), c64(MP))
        with for_range(b, pa, pb, name="panel") as panel:
            m0 = b.mul(panel, c64(MR))
            rows = smin_i64(b, c64(MR), b.sub(c64(pk.M), m0))
            args = [b.gep(apan, [b.mul(panel, c64(pk.KQ * MR * 4))]), tile, b.gep(comp, [m0]), b.gep(mult, [m0]),
                    job.out_at(b, n, m0, p0), c64(job.ld_m), c64(job.ld_p), rows, px]
            if klast is kfull:
                b.call(kfull, args)
            else:
                with b.if_else(is_last) as (then, other):
                    with then:
                        b.call(klast, args)
                    with other:
                        b.call(kfull, args)


def runtime_comp(ctx: EmitContext, job: Job, static: ir.Value) -> ir.Value:
    """This thread's compensation for a run-time input zero point z: ``static[m] - z * colsum[m]`` (wrapping)."""
    b, pk = ctx.builder, job.pk
    assert job.runtime_zero is not None and pk.colsum is not None
    n = len(pk.colsum)
    colsum = b.bitcast(ctx.add_constant(pk.colsum, f"{job.name}.q8colsum"), I32P)
    out = b.bitcast(ctx.scratch(4 * n), I32P)
    z = job.runtime_zero(b)
    with for_range(b, 0, n, name="comp") as m:
        v = b.sub(b.load(b.gep(static, [m])), b.mul(z, b.load(b.gep(colsum, [m]))))
        b.store(v, b.gep(out, [m]))
    return out


# -- the kinds -------------------------------------------------------------------------------------------------------

QELEMS = frozenset({E.INT8, E.UINT8, E.INT32, E.FLOAT32})


def _conv_table(s: ConvShape) -> Callable[[ir.IRBuilder, ir.Value, ir.Value], None]:
    """table[kh * KW + kw][j] = input offset of pixel p0 + 16 j + lane for that tap, -1 in the padding."""
    P = s.OH * s.OW

    def fill(b: ir.IRBuilder, p0: ir.Value, table: ir.Value) -> None:
        tv = b.bitcast(table, V16I32.as_pointer())
        for j in range(NV_MAX):
            p = b.add(_splat_i64(b, b.add(p0, c64(j * LANES))), ir.Constant(V16I64, list(range(16))))
            validp = b.icmp_signed("<", p, _splat_i64(b, c64(P)))
            oh = b.udiv(p, _splat_i64(b, c64(s.OW)))
            ow = b.urem(p, _splat_i64(b, c64(s.OW)))
            for kh in range(s.KH):
                ih = b.add(b.mul(oh, _splat_i64(b, c64(s.sh))), _splat_i64(b, c64(kh * s.dh - s.ph)))
                okh = b.and_(validp, b.icmp_unsigned("<", ih, _splat_i64(b, c64(s.H))))
                for kw in range(s.KW):
                    iw = b.add(b.mul(ow, _splat_i64(b, c64(s.sw))), _splat_i64(b, c64(kw * s.dw - s.pw)))
                    ok = b.and_(okh, b.icmp_unsigned("<", iw, _splat_i64(b, c64(s.W))))
                    off = b.add(b.mul(ih, _splat_i64(b, c64(s.W))), iw)
                    off = b.select(ok, off, _splat_i64(b, c64(-1)))
                    b.store(b.trunc(off, V16I32), b.gep(tv, [c64((kh * s.KW + kw) * NV_MAX + j)]), align=64)
    return fill


@register_emitter("FusedIntConv", elems=QELEMS, when=_qconv_ok,
                  why="1-D or 2-D, group 1, constant filter / zero points / multiplier / bias, filter - zero point "
                      "within int8")
def emit_fused_qconv(ctx: EmitContext, instr: Instr) -> None:
    y = instr.outs[0]
    x, w, xz, wz, mult, yz = instr.ins[:6]
    bias = instr.ins[6] if len(instr.ins) > 6 else None
    if y.type.size == 0:
        return
    s = conv_shape(x.type.shape, w.type.shape, y.type.shape, instr.attrs)
    a = instr.attrs
    pk = pack_weights(np.asarray(w.const_value).reshape(s.M, -1), wz.const_value, xz.const_value, x.type.elem,
                      None if bias is None else bias.const_value, mult.const_value, yz.const_value, y.type.elem,
                      (a["clamp_lo"], a["clamp_hi"]))
    P, HW = s.OH * s.OW, s.H * s.W
    xp, yp = x.ptr, y.ptr
    job = Job(pk=pk, name=instr.name or "qconv", images=s.N, P=P, taps=0 if s.pointwise else s.KH * s.KW,
              contiguous=True, ld_m=P, ld_p=1,
              x_image=lambda b, n: b.gep(xp, [b.mul(n, c64(s.C * HW))]),
              out_at=lambda b, n, m0, p0: b.gep(yp, [b.add(b.mul(b.add(b.mul(n, c64(s.M)), m0), c64(P)), p0)]),
              fill_table=None if s.pointwise else _conv_table(s), cstride=HW, plane=HW,
              step=s.sw if s.sw <= 4 else 1)
    drive(ctx, job)


def _matmul_table(P: int, K: int) -> Callable[[ir.IRBuilder, ir.Value, ir.Value], None]:
    def fill(b: ir.IRBuilder, p0: ir.Value, table: ir.Value) -> None:
        tv = b.bitcast(table, V16I32.as_pointer())
        for j in range(NV_MAX):
            p = b.add(_splat_i64(b, b.add(p0, c64(j * LANES))), ir.Constant(V16I64, list(range(16))))
            ok = b.icmp_signed("<", p, _splat_i64(b, c64(P)))
            off = b.select(ok, b.mul(p, _splat_i64(b, c64(K))), _splat_i64(b, c64(-1)))
            b.store(b.trunc(off, V16I32), b.gep(tv, [c64(j)]), align=64)
    return fill


@register_emitter("FusedIntMatMul", elems=QELEMS, when=_qmatmul_ok,
                  why="constant B / zero points / multiplier / bias, B - zero point within int8")
def emit_fused_qmatmul(ctx: EmitContext, instr: Instr) -> None:
    y = instr.outs[0]
    A, B, az, bz, mult, yz = instr.ins[:6]
    bias = instr.ins[6] if len(instr.ins) > 6 else None
    if y.type.size == 0:
        return
    K, N = B.type.shape
    P = y.type.size // N
    a = instr.attrs
    pk = pack_weights(np.asarray(B.const_value).T, bz.const_value, az.const_value, A.type.elem,
                      None if bias is None else bias.const_value, mult.const_value, yz.const_value, y.type.elem,
                      (a["clamp_lo"], a["clamp_hi"]))
    ap, yp = A.ptr, y.ptr
    job = Job(pk=pk, name=instr.name or "qmatmul", images=1, P=P, taps=1, contiguous=False, ld_m=1, ld_p=N,
              x_image=lambda b, n: ap, out_at=lambda b, n, m0, p0: b.gep(yp, [b.add(b.mul(p0, c64(N)), m0)]),
              fill_table=_matmul_table(P, K), cstride=1, plane=0)
    drive(ctx, job)


def int_matmul_fits(instr: Instr) -> bool:
    """IntMatMul on the fast kernel: 8-bit A (its zero point one value, constant or not), a constant 8-bit B
    [K, N] whose zero point (constant, per tensor or per column) leaves B - zero within int8, int32 out."""
    A, B = instr.ins[0], instr.ins[1]
    az = instr.ins[2] if len(instr.ins) > 2 else None
    bz = instr.ins[3] if len(instr.ins) > 3 else None
    if A.type.elem not in (E.INT8, E.UINT8) or B.const_value is None or B.type.rank != 2 or A.type.rank < 1:
        return False
    if instr.outs[0].type.size == 0 or B.type.shape[0] == 0 or (az is not None and az.type.size != 1):
        return False
    wz = np.zeros((), B.type.elem.dtype) if bz is None else bz.const_value
    if wz is None or wz.size not in (1, B.type.shape[1]):
        return False
    return _weights_fit(np.asarray(B.const_value), np.asarray(wz), 1)


def emit_int_matmul_fast(ctx: EmitContext, instr: Instr) -> None:
    """IntMatMul (MatMulInteger; quantize_dynamic's products): the u8 x s8 kernel with int32 results, the
    input zero point read at run time (DynamicQuantizeLinear computes it per run)."""
    y = instr.outs[0]
    A, B = instr.ins[0], instr.ins[1]
    az = instr.ins[2] if len(instr.ins) > 2 else None
    bz = instr.ins[3] if len(instr.ins) > 3 else None
    K, N = B.type.shape
    P = A.type.size // K
    wz = np.zeros((), np.int64) if bz is None else np.asarray(bz.const_value)
    pk = pack_weights(np.asarray(B.const_value).T, wz, np.zeros((), np.int64), A.type.elem, None,
                      np.ones(1, np.float32), np.zeros(()), E.INT8, (-128, 127))
    pk.out32 = True
    signed = A.type.elem is E.INT8

    def zero(b: ir.IRBuilder) -> ir.Value:
        if az is None:
            return ir.Constant(I32, 0)
        v = b.load(az.ptr)
        return b.sext(v, I32) if signed else b.zext(v, I32)

    ap, yp = A.ptr, b_i8(ctx, y.ptr)
    job = Job(pk=pk, name=instr.name or "intmatmul", images=1, P=P, taps=1, contiguous=False, ld_m=1, ld_p=N,
              x_image=lambda b, n: ap, out_at=lambda b, n, m0, p0: b.gep(yp, [b.mul(b.add(b.mul(p0, c64(N)), m0),
                                                                                 c64(4))]),
              fill_table=_matmul_table(P, K), cstride=1, plane=0, runtime_zero=zero)
    drive(ctx, job)


def b_i8(ctx: EmitContext, p: ir.Value) -> ir.Value:
    return ctx.builder.bitcast(p, I8P)


INT_MATMUL_PATHS.append((int_matmul_fits, emit_int_matmul_fast))
