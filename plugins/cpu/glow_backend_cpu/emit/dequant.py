"""DequantMatMul: a float32 product whose weight stays 8-bit in memory.

``Y = act(X @ (float(Wq) * S) + Bias)``, ``Wq`` an int8 / uint8 constant ``[K, N]`` read in place
(never unpacked to a float copy), ``S`` its scale ``[1, N]`` (per column), ``[K, 1]`` (per row) or
``[1, 1]``. The product runs on the float32 GEMM machinery (``gemm.py``) with a B packer that
dequantizes: for each tile and K block a thread converts the ``kc x NR`` int8 block it is about to
use into float32 panels in its scratch (sign- or zero-extend, convert, one multiply by the scale:
exactly the Cast and the Mul of the graph), then streams every M panel of X past it. The weight's
bytes are read once per tile, a quarter of what a float weight costs; an M = 1 product (a decode
step) is bound by those bytes. Without vectors (or with K = 0) a scalar loop computes the same.
"""

from __future__ import annotations

from llvmlite import ir

from glow_backend_cpu.emit.context import EmitContext, Instr, Operand, register_emitter
from glow_backend_cpu.emit.conv import act_of
from glow_backend_cpu.emit.gemm import BPack
from glow_backend_cpu.emit.matmul import MatMulShape, emit_matmul_gemm, matmul_shape
from glow_backend_cpu.emit.vecops import Geometry, activation, c32, c64, gep, module_of, vstore, vty
from glow_backend_cpu.helpers import F32, for_range, intrinsic, iota, partition, splat, strided_offset
from glow_core.ir.types import ElemKind

I8 = ir.IntType(8)
_ELEMS = frozenset({ElemKind.FLOAT32, ElemKind.INT8, ElemKind.UINT8})


def _load_i8(b: ir.IRBuilder, p: ir.Value, lanes: int, mask: ir.Value | None) -> ir.Value:
    """``lanes`` bytes from ``p`` (only the lanes of ``mask`` when given; the others 0)."""
    t = vty(lanes, I8)
    vp = b.bitcast(p, t.as_pointer())
    if mask is None:
        return b.load(vp, align=1)
    fn = intrinsic(module_of(b), f"llvm.masked.load.v{lanes}i8.p0", t, [t.as_pointer(), ir.IntType(32), mask.type, t])
    return b.call(fn, [vp, c32(1), mask, ir.Constant(t, None)])


def _load_f32(b: ir.IRBuilder, p: ir.Value, lanes: int, mask: ir.Value | None) -> ir.Value:
    t = vty(lanes)
    vp = b.bitcast(p, t.as_pointer())
    if mask is None:
        return b.load(vp, align=4)
    fn = intrinsic(module_of(b), f"llvm.masked.load.v{lanes}f32.p0", t, [t.as_pointer(), ir.IntType(32), mask.type, t])
    return b.call(fn, [vp, c32(4), mask, ir.Constant(t, None)])


def dequant_packer(wq: Operand, scale: Operand, geo: Geometry, full_width: bool) -> BPack:
    """The B packer: ``dst[k][0:width] = float(Wq[k0 + k, n0:n0 + width]) * S`` (lanes past width 0)."""
    K, N = wq.type.shape
    signed = wq.type.elem is ElemKind.INT8
    W, V = geo.lanes, geo.nvec
    NR = W * V
    per = "col" if scale.type.shape == (1, N) and N > 1 else ("row" if scale.type.shape == (K, 1) and K > 1 else "one")

    def pack(b: ir.IRBuilder, bg: ir.Value, n0: ir.Value, width: ir.Value, k0: ir.Value, kc: ir.Value,
             kb: ir.Value, dst: ir.Value) -> None:
        masks: list[ir.Value | None] = [None] * V
        if not full_width:
            lanes = splat(b, width, W)
            masks = [b.icmp_signed("<", b.add(iota(W), splat(b, c64(j * W), W)), lanes) for j in range(V)]
        one = splat(b, b.load(scale.ptr, align=4), W) if per == "one" else None
        with for_range(b, 0, kc, name="dqk") as k:
            kk = b.add(k0, k)
            src = gep(b, wq.ptr, b.add(b.mul(kk, c64(N)), n0))
            d = gep(b, dst, b.mul(k, c64(NR)))
            row = splat(b, b.load(gep(b, scale.ptr, kk), align=4), W) if per == "row" else one
            for j in range(V):
                q = _load_i8(b, gep(b, src, j * W), W, masks[j])
                f = b.sitofp(q, vty(W)) if signed else b.uitofp(q, vty(W))
                s = row if row is not None else _load_f32(b, gep(b, scale.ptr, b.add(n0, c64(j * W))), W, masks[j])
                vstore(b, b.fmul(f, s), gep(b, d, j * W), align=64)

    return pack


def _ins(instr: Instr) -> tuple[Operand, Operand, Operand, Operand | None]:
    ins = list(instr.ins) + [None] * 4
    return ins[0], ins[1], ins[2], ins[3]  # type: ignore[return-value]


@register_emitter("DequantMatMul", elems=_ELEMS)
def emit_dequant_matmul(ctx: EmitContext, instr: Instr) -> None:
    y = instr.outs[0]
    a, wq, scale, bias = _ins(instr)
    if y.type.size == 0:
        return
    s = matmul_shape(a.type.shape, wq.type.shape, y.type.shape, bias.type.shape if bias is not None else None)
    act, lo, hi = act_of(instr.attrs, ElemKind.FLOAT32)
    if s.K == 0 or ctx.target.vector_lanes < 4:
        emit_dequant_scalar(ctx, s, a, wq, scale, bias, y, act, lo, hi)
        return

    def packer(geo: Geometry) -> BPack:
        return dequant_packer(wq, scale, geo, full_width=s.N % geo.nr == 0)

    emit_matmul_gemm(ctx, s, a, wq, bias, y, act, lo, hi, instr.name, b_packer=packer)


def _scalar_weight(b: ir.IRBuilder, wq: Operand, scale: Operand, k: ir.Value, n: ir.Value) -> ir.Value:
    """float(Wq[k, n]) * S (the scale's element for that row or column)."""
    K, N = wq.type.shape
    q = b.load(gep(b, wq.ptr, b.add(b.mul(k, c64(N)), n)))
    f = b.sitofp(q, F32) if wq.type.elem is ElemKind.INT8 else b.uitofp(q, F32)
    sk, sn = scale.type.shape
    idx = b.add(b.mul(k, c64(1 if sk > 1 else 0)), b.mul(n, c64(1 if sn > 1 else 0)))
    return b.fmul(f, b.load(gep(b, scale.ptr, idx)))


def emit_dequant_scalar(ctx: EmitContext, s: MatMulShape, a: Operand, wq: Operand, scale: Operand,
                        bias: Operand | None, y: Operand, act: str, lo: float, hi: float) -> None:
    """One output element at a time, summed in k order (float32), then the bias and the activation."""
    b = ctx.builder
    M, N, K = s.M, s.N, s.K
    nb = len(s.batch)
    e0, e1 = partition(b, s.BG * M * N, ctx.tid, ctx.nthreads)
    with for_range(b, e0, e1, name="o") as e:
        n = b.urem(e, c64(N))
        mn = b.udiv(e, c64(N))
        m = b.urem(mn, c64(M))
        bg = b.udiv(mn, c64(M))
        arow = gep(b, a.ptr, b.add(strided_offset(b, bg, s.batch, s.a_bstrides), b.mul(m, c64(K))))
        accp = b.alloca(F32)
        b.store(ir.Constant(F32, 0.0), accp)
        with for_range(b, 0, K, name="k") as k:
            prod = b.fmul(b.load(gep(b, arow, k)), _scalar_weight(b, wq, scale, k, n))
            b.store(b.fadd(b.load(accp), prod), accp)
        r = b.load(accp)
        if bias is not None:
            bst = s.bias_strides
            off = b.add(strided_offset(b, bg, s.batch, bst[:nb]),
                        b.add(b.mul(m, c64(bst[nb])), b.mul(n, c64(bst[nb + 1]))))
            r = b.fadd(r, b.load(gep(b, bias.ptr, off)))
        b.store(activation(b, r, act, lo, hi), gep(b, y.ptr, e))

