"""MatMul / FusedMatMul emitters (numpy.matmul semantics: batch broadcasting, 1-D operands promoted).

float32 runs on the GEMM machinery of ``gemm.py``, one GEMM per output batch
index:

- a constant right operand (an FC weight) is packed at compile time into
  NR-column panels, so an M = 1 product streams each weight once, in order, and
  the threads split the N panels (narrower panels when N is small, so every
  thread gets a share: ``gemv_geometry``);
- a run-time right operand is read in place when the left operand has a
  single M panel (nothing to reuse) and packed per tile otherwise;
- the left operand is packed at compile time when constant, else read in place;
- a bias broadcasting along M (``[N]``, ``[1, N]``) or along N (``[M, 1]``) or
  given in full is added in the micro-kernel epilogue, then the activation;
- ``N == 1`` (matrix x vector) uses a dot-product loop vectorized over K;
- with the precision bf16 (``bf16.py``) a constant right operand is packed in bf16 pairs and the left one
  converted to pairs per K block (AMX tiles from 16 rows when the CPU has them).

Other element kinds use a scalar loop (integers wrap, float16 / bfloat16
accumulate in float32 and round once, as the interpreter's kernels do).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from glow_backend_cpu.emit import dtypes
from glow_backend_cpu.emit.context import EmitContext, Instr, Operand, register_emitter
from glow_backend_cpu.emit.conv import act_of
from glow_backend_cpu.emit.bf16 import amx_geometry, bf16_enabled, convert_rows, gemm_mode
from glow_backend_cpu.emit.gemm import KC_MAX, BPack, GemmPlan, emit_gemm
from glow_backend_cpu.emit.gemm_pack import pack_rows
from glow_backend_cpu.emit.symdims import extent, is_sym, unsupported, valid_rows
from glow_backend_cpu.emit.vecops import F32P, Geometry, activation, c64, fma, geometry, gep, masked_load, vload, vty
from glow_backend_cpu.helpers import carried_loop, for_range, partition, smin, strided_offset
from glow_backend_cpu.pack import even_blocks, pack_a_panels, pack_b_pairs, pack_b_panels
from glow_core.ir.defs.nn import MATMUL_KINDS
from glow_core.ir.types import ElemKind, broadcast_shapes


#: makes the B packer of a product for the geometry its GEMM uses
PackerFactory = Callable[[Geometry], BPack]


@dataclass(frozen=True)
class MatMulShape:
    """``out[batch..., M, N] = A[batch..., M, K] @ B[batch..., K, N]`` with per-operand batch strides."""

    batch: tuple[int, ...]
    M: int
    N: int
    K: int
    #: element strides of A / B / bias / out per batch axis (0 where broadcast)
    a_bstrides: tuple[int, ...]
    b_bstrides: tuple[int, ...]
    #: bias strides: batch axes, then M, then N (all 0 without a bias)
    bias_strides: tuple[int, ...]

    @property
    def BG(self) -> int:
        return math.prod(self.batch)


def _batch_strides(shape: tuple[int, ...], batch: tuple[int, ...], tail: int) -> tuple[int, ...]:
    """Element strides of a contiguous ``shape`` (batch axes then ``tail`` matrix elements) per output batch axis."""
    lead = shape[:len(shape) - 2] if len(shape) >= 2 else ()
    lead = (1,) * (len(batch) - len(lead)) + tuple(lead)
    strides = []
    acc = tail
    for d in reversed(lead):
        strides.append(0 if d == 1 else acc)
        acc *= d
    return tuple(reversed(strides))


def matmul_shape(a: tuple[int, ...], b: tuple[int, ...], out: tuple[int, ...],
                 bias: tuple[int, ...] | None) -> MatMulShape:
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    M, K, N = a2[-2], a2[-1], b2[-1]
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    sa = _batch_strides(a2, batch, M * K)
    sb = _batch_strides(b2, batch, K * N)
    full = (*batch, M, N)
    if bias is None:
        bs = (0,) * len(full)
    else:
        # bias broadcasts against the real output shape; map its axes onto (batch..., M, N)
        rs = (1,) * (len(out) - len(bias)) + tuple(bias)
        st = []
        acc = 1
        for d in reversed(rs):
            st.append(0 if d == 1 else acc)
            acc *= d
        st.reverse()
        if len(a) == 1 and len(b) == 1:
            st = st + [0, 0]
        elif len(a) == 1:
            st = st[:-1] + [0] + st[-1:]
        elif len(b) == 1:
            st = st + [0]
        bs = tuple(st)
    return MatMulShape(tuple(batch), M, N, K, sa, sb, bs)


def _ins(instr: Instr) -> tuple[Operand, Operand, Operand | None]:
    ins = list(instr.ins) + [None] * 3
    return ins[0], ins[1], ins[2]  # type: ignore[return-value]


def symbolic_mk(ctx: EmitContext, kind: str, a: Operand, bm: Operand) -> tuple[ir.Value | None, ir.Value | None]:
    """The run's M (rows of A) and K when they are symbolic, else None; a symbolic K of a product with a
    constant operand is unsupported. (Symbolic batch axes and N: ``emit_matmul``.)"""
    b = ctx.builder
    m_valid = extent(b, a, -2) if a.type.rank >= 2 and is_sym(a, -2) else None
    bk = -2 if bm.type.rank >= 2 else 0
    if not (is_sym(a, -1) or is_sym(bm, bk)):
        return m_valid, None
    if a.const_value is not None or bm.const_value is not None:
        raise unsupported(kind, "a symbolic K with a constant operand")
    return m_valid, extent(b, a, -1) if is_sym(a, -1) else extent(b, bm, bk)


@register_emitter("MatMul", "FusedMatMul", elems=MATMUL_KINDS, symbolic=True)
def emit_matmul(ctx: EmitContext, instr: Instr) -> None:
    """Symbolic dims: only the valid K enters the sums; the GEMM computes only the M panels covering the valid
    rows of A, the N tiles covering the valid columns, and of symbolic batch axes only the problems that hold
    data when they are a prefix (the scalar and matrix x vector paths compute every row)."""
    y = instr.outs[0]
    a, bm, bias = _ins(instr)
    if y.type.size == 0:
        return
    s = matmul_shape(a.type.shape, bm.type.shape, y.type.shape, bias.type.shape if bias is not None else None)
    elem = y.type.elem
    act, lo, hi = act_of(instr.attrs, elem)
    m_valid, k_valid = symbolic_mk(ctx, instr.kind, a, bm)
    if elem is not ElemKind.FLOAT32 or s.K == 0 or ctx.target.vector_lanes < 4 or (s.N == 1 and k_valid is not None):
        emit_matmul_scalar(ctx, s, a, bm, bias, y, act, lo, hi, k_valid)
    elif s.N == 1:
        emit_matvec(ctx, s, a, bm, bias, y, act, lo, hi)
    else:
        bg_valid = valid_rows(ctx.builder, y, len(s.batch)) if y.type.rank == len(s.batch) + 2 else None
        # (a 1-D B drops N: the output's last axis is then M)
        n_valid = extent(ctx.builder, y, -1) if bm.type.rank >= 2 and is_sym(y, -1) else None
        emit_matmul_gemm(ctx, s, a, bm, bias, y, act, lo, hi, instr.name, m_valid=m_valid, k_valid=k_valid,
                         bg_valid=bg_valid, n_valid=n_valid)


#: a row of C (M = 1) is split into at least this many column panels, so every thread streams some weights
GEMV_MIN_PANELS = 4
#: independent partial sums of the M = 1 micro-kernel (enough FMAs in flight to hide their latency)
GEMV_PARTIAL_SUMS = 8


def gemv_geometry(geo: Geometry, s: MatMulShape, b_const: bool) -> Geometry:
    """Narrower column panels for ``M <= MR`` products with a constant weight and few work items.

    Such a product streams each weight once and the threads split its column panels: with the
    default panel width (4 vectors) a layer of 64 columns is one panel, which one thread streams
    alone while the others wait. Panels of one or two vectors give every thread a share; the
    micro-kernel unrolls k further to keep ``GEMV_PARTIAL_SUMS`` partial sums (``GemmPlan.unroll``).
    """
    if not b_const or s.M > geo.mr or s.BG * -(-s.N // geo.nr) >= GEMV_MIN_PANELS:
        return geo
    nvec = max(1, min(geo.nvec, s.N // (GEMV_MIN_PANELS * geo.lanes)))
    return Geometry(geo.lanes, geo.mr, nvec)


def emit_matmul_gemm(ctx: EmitContext, s: MatMulShape, a: Operand, bm: Operand, bias: Operand | None, y: Operand,
                     act: str, lo: float, hi: float, name: str = "", b_packer: PackerFactory | None = None, *,
                     m_valid: ir.Value | None = None, k_valid: ir.Value | None = None,
                     bg_valid: ir.Value | None = None, n_valid: ir.Value | None = None) -> None:
    """The product on the GEMM machinery; ``b_packer`` (given the geometry) packs each B tile from a
    constant weight kept in another form (``dequant.py``) instead of the ways the module doc lists;
    ``m_valid`` / ``k_valid`` / ``bg_valid`` / ``n_valid``: the run's M / K / batch problems / N with symbolic
    dims (``GemmPlan``)."""
    base = geometry(ctx.target.vector_lanes)
    geo = gemv_geometry(base, s, bm.const_value is not None or b_packer is not None)
    MR, NR = geo.mr, geo.nr
    M, N, K = s.M, s.N, s.K
    bld = ctx.builder
    batch = s.batch
    mp = -(-M // MR)

    # A: packed constant panels per distinct A batch, or rows in place
    if a.const_value is not None:
        av = np.asarray(a.const_value, dtype=np.float32).reshape(-1, M, K)
        ap = bld.bitcast(ctx.add_constant(pack_a_panels(av, MR), f"{name or 'matmul'}.lhs.packed"), F32P)
        # the batch offset of A in units of its matrices
        a_units = tuple(st // (M * K) for st in s.a_bstrides)

        def a_ptr(b: ir.IRBuilder, bg: ir.Value, m0: ir.Value) -> tuple[ir.Value, ir.Value]:
            ai = strided_offset(b, bg, batch, a_units)
            return gep(b, ap, b.add(b.mul(ai, c64(mp * K * MR)), b.mul(m0, c64(K)))), c64(K * MR)
        a_packed = True
    else:
        aptr0 = a.ptr

        def a_ptr(b: ir.IRBuilder, bg: ir.Value, m0: ir.Value) -> tuple[ir.Value, ir.Value]:
            off = strided_offset(b, bg, batch, s.a_bstrides)
            return gep(b, aptr0, b.add(off, b.mul(m0, c64(K)))), c64(K)
        a_packed = False

    yp = y.ptr

    def c_ptr(b: ir.IRBuilder, bg: ir.Value, m0: ir.Value, n0: ir.Value) -> ir.Value:
        return gep(b, yp, b.add(b.mul(b.add(b.mul(bg, c64(M)), m0), c64(N)), n0))

    plan = GemmPlan(geo=geo, BG=s.BG, M=M, N=N, K=K, a_ptr=a_ptr, a_packed=a_packed, c_ptr=c_ptr, ldc=N,
                    act=act, lo=lo, hi=hi, unroll=2 if geo == base else max(2, GEMV_PARTIAL_SUMS // geo.nvec),
                    m_valid=m_valid, k_valid=k_valid, bg_valid=bg_valid, n_valid=n_valid)

    if bf16_enabled(ctx) and bm.const_value is not None and a.const_value is None and b_packer is None \
            and k_valid is None and s.M * s.K * 2 <= BF16_A_MAX:
        _bf16_operands(ctx, plan, s, a, bm, name)
    else:
        _b_operand(ctx, plan, s, bm, b_packer, name)

    if bias is not None:
        bst = s.bias_strides
        nb = len(batch)
        bbatch, sm, sn = bst[:nb], bst[nb], bst[nb + 1]
        biasp = bias.ptr

        def bias_ptr(b: ir.IRBuilder, bg: ir.Value, m0: ir.Value, n0: ir.Value) -> ir.Value:
            off = strided_offset(b, bg, batch, bbatch)
            return gep(b, biasp, b.add(off, b.add(b.mul(m0, c64(sm)), b.mul(n0, c64(sn)))))
        plan.bias_ptr = bias_ptr
        plan.bias = "col" if sn else "row"
        plan.bias_rs = sm

    scratch = bld.bitcast(ctx.scratch(plan.scratch_bytes), F32P) if plan.b_pack is not None else None
    emit_gemm(bld, plan, ctx.tid, ctx.nthreads, scratch)


def _b_operand(ctx: EmitContext, plan: GemmPlan, s: MatMulShape, bm: Operand, b_packer: PackerFactory | None,
               name: str) -> None:
    """How the GEMM reaches B: a caller's packer, constant panels packed now, rows in place, or packed per tile."""
    geo, bld, batch = plan.geo, ctx.builder, s.batch
    K, N, NR = s.K, s.N, plan.geo.nr
    nt, mp = -(-N // NR), -(-s.M // plan.geo.mr)
    if b_packer is not None:
        plan.b_pack = b_packer(geo)
    elif bm.const_value is not None:
        bv = np.asarray(bm.const_value, dtype=np.float32).reshape(-1, K, N)
        bp = bld.bitcast(ctx.add_constant(pack_b_panels(bv, NR), f"{name or 'matmul'}.rhs.packed"), F32P)
        b_units = tuple(st // (K * N) for st in s.b_bstrides)

        def b_ptr(b: ir.IRBuilder, bg: ir.Value, n0: ir.Value, ntile: ir.Value, k0: ir.Value) -> ir.Value:
            bi = strided_offset(b, bg, batch, b_units)
            return gep(b, bp, b.mul(b.add(b.mul(b.add(b.mul(bi, c64(nt)), ntile), c64(K)), k0), c64(NR)))
        plan.b_ptr, plan.ldb, plan.b_align = b_ptr, NR, 64
        plan.prefetch_b = True
    elif mp == 1:
        bptr0 = bm.ptr

        def b_direct(b: ir.IRBuilder, bg: ir.Value, n0: ir.Value, ntile: ir.Value, k0: ir.Value) -> ir.Value:
            off = strided_offset(b, bg, batch, s.b_bstrides)
            return gep(b, bptr0, b.add(off, b.add(b.mul(k0, c64(N)), n0)))
        plan.b_ptr, plan.ldb, plan.b_align = b_direct, N, 4
    else:
        bptr1 = bm.ptr

        def b_pack(b: ir.IRBuilder, bg: ir.Value, n0: ir.Value, width: ir.Value, k0: ir.Value, kc: ir.Value,
                   kb: ir.Value, dst: ir.Value) -> None:
            off = strided_offset(b, bg, batch, s.b_bstrides)
            src = gep(b, bptr1, b.add(off, b.add(b.mul(k0, c64(N)), n0)))
            pack_rows(b, geo, src, N, kc, width, dst, full_width=N % NR == 0)
        plan.b_pack = b_pack


#: bf16 (``emit/bf16.py``): the bytes of a problem's A converted to pairs at most (more stays float32)
BF16_A_MAX = 16 << 20


def _bf16_operands(ctx: EmitContext, plan: GemmPlan, s: MatMulShape, a: Operand, bm: Operand, name: str) -> None:
    """The precision bf16: the constant B packed in pairs now; A's rows converted to pairs into this thread's
    scratch (rows of words indexed by m, so M panels converted for one N tile serve the next)."""
    mode = gemm_mode(ctx.target, s.M)
    if mode == "amx":  # 32 x 32 blocks, K in steps of 16 pairs (zero-padded)
        plan.geo = amx_geometry()
    geo, bld, batch = plan.geo, ctx.builder, s.batch
    W, MR, NR = geo.lanes, geo.mr, geo.nr
    M, N, K = s.M, s.N, s.K
    K2, nt, mp = (K + 1) // 2, -(-N // NR), -(-M // MR)
    if mode == "amx":
        K2 = -(-K2 // 16) * 16
        plan.k_blocks = even_blocks(K2, KC_MAX, 16)
    bv = np.zeros((max(1, math.prod(bm.type.shape[:-2])), 2 * K2, N), dtype=np.float32)
    bv[:, :K] = np.asarray(bm.const_value, dtype=np.float32).reshape(-1, K, N)
    bp = bld.bitcast(ctx.add_constant(pack_b_pairs(bv, NR), f"{name or 'matmul'}.rhs.bf16"), F32P)
    b_units = tuple(st // (K * N) for st in s.b_bstrides)

    def b_ptr(b: ir.IRBuilder, bg: ir.Value, n0: ir.Value, ntile: ir.Value, k0: ir.Value) -> ir.Value:
        bi = strided_offset(b, bg, batch, b_units)
        return gep(b, bp, b.mul(b.add(b.mul(b.add(b.mul(bi, c64(nt)), ntile), c64(K2)), k0), c64(NR)))

    plan.K, plan.bf16, plan.prefetch_a = K2, mode, False
    a_ld = -(-K2 // W) * W
    region = bld.bitcast(ctx.scratch(mp * MR * a_ld * 4), F32P)
    aptr0 = a.ptr

    def a_conv(b: ir.IRBuilder, bg: ir.Value, mp0: ir.Value, mp1: ir.Value) -> None:
        r0, r1 = b.mul(mp0, c64(MR)), smin(b, b.mul(mp1, c64(MR)), c64(M))
        off = b.add(strided_offset(b, bg, batch, s.a_bstrides), b.mul(r0, c64(K)))
        convert_rows(b, mode, W, gep(b, aptr0, off), K, b.sub(r1, r0), c64(K), c64(K2),
                     gep(b, region, b.mul(r0, c64(a_ld))), a_ld)

    def a_ptr(b: ir.IRBuilder, bg: ir.Value, m0: ir.Value) -> tuple[ir.Value, ir.Value]:
        return gep(b, region, b.mul(m0, c64(a_ld))), c64(a_ld)

    plan.a_ptr, plan.a_packed, plan.a_conv = a_ptr, False, a_conv
    plan.b_ptr, plan.ldb, plan.b_align, plan.b_pack = b_ptr, NR, 64, None


# -- matrix x vector ----------------------------------------------------------------------------------------

def _hsum(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    n = v.type.count
    while n > 1:
        half = n // 2
        lo = b.shuffle_vector(v, v, ir.Constant(vty(half, ir.IntType(32)), list(range(half))))
        hi = b.shuffle_vector(v, v, ir.Constant(vty(half, ir.IntType(32)), list(range(half, n))))
        v = b.fadd(lo, hi)
        n = half
    return b.extract_element(v, ir.Constant(ir.IntType(32), 0))


def emit_matvec(ctx: EmitContext, s: MatMulShape, a: Operand, bm: Operand, bias: Operand | None, y: Operand,
                act: str, lo: float, hi: float) -> None:
    """``N == 1``: one dot product of length K per output element, vectorized over K (4 accumulators)."""
    b = ctx.builder
    W = ctx.target.vector_lanes
    M, K = s.M, s.K
    U = 4
    step = W * U
    kmain = K - K % step
    rows = s.BG * M
    r0, r1 = partition(b, rows, ctx.tid, ctx.nthreads)
    nb = len(s.batch)
    with for_range(b, r0, r1, name="row") as r:
        bg = b.udiv(r, c64(M))
        m = b.urem(r, c64(M))
        arow = gep(b, a.ptr, b.add(strided_offset(b, bg, s.batch, s.a_bstrides), b.mul(m, c64(K))))
        bvec = gep(b, bm.ptr, strided_offset(b, bg, s.batch, s.b_bstrides))

        def dot(b: ir.IRBuilder, k: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
            nxt = []
            for u in range(U):
                ku = b.add(k, c64(u * W))
                nxt.append(fma(b, vload(b, gep(b, arow, ku), W), vload(b, gep(b, bvec, ku), W), accs[u]))
            return nxt

        accs = carried_loop(b, 0, kmain, [ir.Constant(vty(W), None)] * U, dot, step=step, name="dot")
        tot = b.fadd(b.fadd(accs[0], accs[1]), b.fadd(accs[2], accs[3]))
        for t0 in range(kmain, K, W):
            cnt = min(W, K - t0)
            mask = ir.Constant(vty(W, ir.IntType(1)), [1 if i < cnt else 0 for i in range(W)])
            tot = fma(b, masked_load(b, gep(b, arow, t0), mask), masked_load(b, gep(b, bvec, t0), mask), tot)
        v = _hsum(b, tot)
        if bias is not None:
            bst = s.bias_strides
            off = b.add(strided_offset(b, bg, s.batch, bst[:nb]), b.mul(m, c64(bst[nb])))
            v = b.fadd(v, b.load(gep(b, bias.ptr, off), align=4))
        v = activation(b, v, act, lo, hi)
        b.store(v, gep(b, y.ptr, r), align=4)


# -- scalar path ------------------------------------------------------------------------------------------------

def emit_matmul_scalar(ctx: EmitContext, s: MatMulShape, a: Operand, bm: Operand, bias: Operand | None,
                       y: Operand, act: str, lo: float, hi: float, k_valid: ir.Value | None = None) -> None:
    b = ctx.builder
    elem = y.type.elem
    ct = dtypes.compute_type(elem)
    is_f = dtypes.is_float(elem)
    M, N, K = s.M, s.N, s.K
    nb = len(s.batch)
    total = s.BG * M * N
    e0, e1 = partition(b, total, ctx.tid, ctx.nthreads)
    with for_range(b, e0, e1, name="o") as e:
        n = b.urem(e, c64(N))
        mn = b.udiv(e, c64(N))
        m = b.urem(mn, c64(M))
        bg = b.udiv(mn, c64(M))
        arow = gep(b, a.ptr, b.add(strided_offset(b, bg, s.batch, s.a_bstrides), b.mul(m, c64(K))))
        bcol = gep(b, bm.ptr, b.add(strided_offset(b, bg, s.batch, s.b_bstrides), n))
        accp = b.alloca(ct)
        b.store(ir.Constant(ct, 0.0 if is_f else 0), accp)
        with for_range(b, 0, K if k_valid is None else k_valid, name="k") as k:
            xv = dtypes.to_compute(b, b.load(gep(b, arow, k)), elem)
            wv = dtypes.to_compute(b, b.load(gep(b, bcol, b.mul(k, c64(N)))), elem)
            acc = b.load(accp)
            b.store(b.fadd(acc, b.fmul(xv, wv)) if is_f else b.add(acc, b.mul(xv, wv)), accp)
        r = dtypes.round_trip(b, b.load(accp), elem)
        if bias is not None:
            bst = s.bias_strides
            off = b.add(strided_offset(b, bg, s.batch, bst[:nb]),
                        b.add(b.mul(m, c64(bst[nb])), b.mul(n, c64(bst[nb + 1]))))
            bv = dtypes.to_compute(b, b.load(gep(b, bias.ptr, off)), elem)
            r = dtypes.round_trip(b, b.fadd(r, bv), elem) if is_f else b.add(r, bv)
        if act != "none":
            r = _act_any(b, r, act, lo, hi, elem)
        b.store(dtypes.to_storage(b, r, elem), gep(b, y.ptr, e))


def _act_any(b: ir.IRBuilder, v: ir.Value, act: str, lo: float, hi: float, elem: ElemKind) -> ir.Value:
    if act == "hardswish":  # (float32 only)
        return activation(b, v, act, lo, hi)
    if dtypes.is_float(elem):
        if act == "relu":
            zero = ir.Constant(v.type, 0.0)
            return b.select(b.fcmp_ordered("<", v, zero), zero, v)
        if not math.isinf(lo):
            c = ir.Constant(v.type, lo)
            v = b.select(b.fcmp_ordered("<", v, c), c, v)
        if not math.isinf(hi):
            c = ir.Constant(v.type, hi)
            v = b.select(b.fcmp_ordered(">", v, c), c, v)
        return v
    signed = dtypes.is_signed(elem)
    cmp = b.icmp_signed if signed else b.icmp_unsigned
    if act == "relu":
        zero = ir.Constant(v.type, 0)
        return b.select(cmp("<", v, zero), zero, v)
    dt = elem.dtype
    if not math.isinf(lo):
        c = ir.Constant(v.type, int(np.asarray(int(lo)).astype(dt)))
        v = b.select(cmp("<", v, c), c, v)
    if not math.isinf(hi):
        c = ir.Constant(v.type, int(np.asarray(int(hi)).astype(dt)))
        v = b.select(cmp(">", v, c), c, v)
    return v
