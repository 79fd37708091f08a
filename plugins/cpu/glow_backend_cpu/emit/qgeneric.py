"""The quantized primitives in their general form: IntConv, IntMatMul (scalar int32 loops) and Requantize.

These run every shape and attribute combination the kinds allow
(``glow_core.ir.defs.nn_qprim``): any number of spatial axes, groups, batch
broadcasting, per-row / per-column / broadcast zero points. The fast int8
kernels (``qconv.py``: FusedIntConv and FusedIntMatMul on VNNI) take the common
cases; what they decline is lowered onto these. A grouped IntConv (depthwise
included) with 1 or 2 spatial axes is vectorized over the output width
(``qdirect.py``).

Integer products accumulate in int64 and wrap to int32 once, as the reference
kernels do (the exact sum modulo 2**32). Requantize is an element-wise
operation (``ew_ops``) so the loop generator vectorizes, broadcasts and fuses it:
``clip(roundeven(float(acc) * mult) + zp, lo, hi)`` in float32.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from llvmlite import ir

from glow_backend_cpu.emit.conv import conv_shape
from glow_backend_cpu.emit.context import EmitContext, Instr, Operand, register_emitter
from glow_backend_cpu.emit.conv_coords import conv_coords
from glow_backend_cpu.emit.dtypes import UNSIGNED
from glow_backend_cpu.emit.elementwise import broadcast_strides, emit_single
from glow_backend_cpu.emit.ew_ops import EW_ELEMS, EW_OPS
from glow_backend_cpu.emit.qdirect import direct_fits, emit_intconv_direct
from glow_backend_cpu.helpers import (
    F32,
    I32,
    I64,
    call_intrinsic,
    const_like,
    elem_ptr,
    for_range,
    i64,
    partition,
    unravel,
    window_tap,
)
from glow_core.ir.types import ElemKind

E = ElemKind
Q8 = frozenset({E.INT8, E.UINT8})
QPRIM_ELEMS = Q8 | {E.INT32}


def widen(b: ir.IRBuilder, v: ir.Value, elem: ElemKind) -> ir.Value:
    """An 8/32-bit integer as i64 (zero-extended when unsigned)."""
    return b.zext(v, I64) if elem in UNSIGNED else b.sext(v, I64)


def load_int(b: ir.IRBuilder, op: Operand, index: ir.Value | int) -> ir.Value:
    return widen(b, b.load(elem_ptr(b, op.ptr, index)), op.type.elem)


# -- Requantize: an element-wise operation ---------------------------------------------------------------------

def requantize_op(b: ir.IRBuilder, a: Sequence[ir.Value], ie: Sequence[ElemKind], oe: ElemKind,
                  attrs: Mapping[str, Any]) -> ir.Value:
    """``clip(roundeven(float32(a0) * a1) + float32(a2), lo, hi)`` converted to ``oe``."""
    acc, mult, zp = a
    ft = ir.VectorType(F32, acc.type.count) if isinstance(acc.type, ir.VectorType) else F32
    v = call_intrinsic(b, "roundeven", [b.fmul(b.sitofp(acc, ft), mult)])
    zf = b.uitofp(zp, ft) if ie[2] in UNSIGNED else b.sitofp(zp, ft)
    v = b.fadd(v, zf)
    info = np.iinfo(oe.dtype)
    lo, hi = max(int(info.min), int(attrs["clamp_lo"])), min(int(info.max), int(attrs["clamp_hi"]))
    v = call_intrinsic(b, "maxnum", [v, const_like(ft, float(lo))])
    v = call_intrinsic(b, "minnum", [v, const_like(ft, float(hi))])
    it = ir.VectorType(I32, acc.type.count) if isinstance(acc.type, ir.VectorType) else I32
    return b.trunc(b.fptosi(v, it), zp.type)


EW_OPS["Requantize"] = requantize_op
EW_ELEMS["Requantize"] = Q8 | {E.INT32, E.FLOAT32}
register_emitter("Requantize", elems=EW_ELEMS["Requantize"])(emit_single)


# -- IntConv: scalar loop nest ----------------------------------------------------------------------------------------

@register_emitter("IntConv", elems=QPRIM_ELEMS)
def emit_qconv(ctx: EmitContext, instr: Instr) -> None:
    b = ctx.builder
    y = instr.outs[0]
    x, w, xz, wz = instr.ins[:4]
    bias = instr.ins[4] if len(instr.ins) > 4 else None
    a = instr.attrs
    xs, ws, ys = x.type.shape, w.type.shape, y.type.shape
    G = a["group"]
    C, M = xs[1], ws[0]
    Cg, Mg = C // G, M // G
    sp_in, kern, sp_out = xs[2:], ws[2:], ys[2:]
    KP, OP, IP = math.prod(kern), math.prod(sp_out), math.prod(sp_in)
    total = ys[0] * M * OP
    if total == 0:
        return
    if direct_fits(ctx, instr):
        emit_intconv_direct(ctx, instr, conv_shape(xs, ws, ys, a))
        return
    xzv = load_int(b, xz, 0)
    e0, e1 = partition(b, total, ctx.tid, ctx.nthreads)
    with for_range(b, e0, e1, name="o") as e:
        cc = conv_coords(b, e, OP, M, Mg)
        o, oc, nb, g = cc.pixel, cc.channel, cc.image, cc.group
        wzv = load_int(b, wz, oc if wz.type.size > 1 else 0)
        ocoord = unravel(b, o, sp_out)
        accp = b.alloca(I64)
        b.store(load_int(b, bias, oc) if bias is not None else i64(0), accp)
        with for_range(b, 0, Cg, name="ic") as ic:
            cin = b.add(b.mul(nb, i64(C)), b.add(b.mul(g, i64(Cg)), ic))
            with for_range(b, 0, KP, name="kk") as kk:
                inb, flat = window_tap(b, ocoord, unravel(b, kk, kern), sp_in, a["strides"], a["pads"],
                                       a["dilations"])
                with b.if_then(inb):
                    xv = b.sub(load_int(b, x, b.add(b.mul(cin, i64(IP)), flat)), xzv)
                    wv = b.sub(load_int(b, w, b.add(b.mul(b.add(b.mul(oc, i64(Cg)), ic), i64(KP)), kk)), wzv)
                    b.store(b.add(b.load(accp), b.mul(xv, wv)), accp)
        b.store(b.trunc(b.load(accp), I32), elem_ptr(b, y.ptr, e))


# -- IntMatMul: scalar loop with numpy batch broadcasting -----------------------------------------------------------

def _promoted(a: Sequence[int], bsh: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """A's and B's shapes with 1-D operands promoted, and the full (unsqueezed) result shape."""
    pa = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    pb = tuple(bsh) + (1,) if len(bsh) == 1 else tuple(bsh)
    batch = np.broadcast_shapes(pa[:-2], pb[:-2])
    return pa, pb, tuple(batch) + (pa[-2], pb[-1])


def _zero_strides(zp: Operand | None, operand: Sequence[int], full: Sequence[int], per: str) -> list[int] | None:
    """Broadcast strides of a zero point over ``full`` (the promoted operand's index space)."""
    if zp is None:
        return None
    zs = zp.type.shape
    if zp.type.size == 1:
        return [0] * len(full)
    if len(zs) == 1:  # one per row of A (axis -2) / per column of B (axis -1)
        out = [0] * len(full)
        out[-2 if per == "row" else -1] = 1
        return out
    return broadcast_strides([1] * (len(full) - len(zs)) + list(zs), full)


def _offset(b: ir.IRBuilder, coords: Sequence[ir.Value], strides: Sequence[int]) -> ir.Value:
    off: ir.Value = i64(0)
    for c, st in zip(coords, strides):
        if st:
            off = b.add(off, b.mul(c, i64(st)))
    return off


#: faster IntMatMul emitters a performance module adds (qconv.py: a constant 8-bit weight on the u8 x s8 GEMM),
#: as (accepts, emit): the first that accepts an instruction emits it, else the int64 loop below
INT_MATMUL_PATHS: list[tuple[Callable[[Instr], bool], Callable[[EmitContext, Instr], None]]] = []


@register_emitter("IntMatMul", elems=QPRIM_ELEMS)
def emit_qmatmul(ctx: EmitContext, instr: Instr) -> None:
    for accepts, emit in INT_MATMUL_PATHS:
        if accepts(instr):
            emit(ctx, instr)
            return
    b = ctx.builder
    y = instr.outs[0]
    A, B = instr.ins[0], instr.ins[1]
    az = instr.ins[2] if len(instr.ins) > 2 else None
    bz = instr.ins[3] if len(instr.ins) > 3 else None
    pa, pb, full = _promoted(A.type.shape, B.type.shape)
    K = pa[-1]
    total = math.prod(full)
    if total == 0:
        return
    rank = len(full)
    a_space, b_space = full[:-1] + (K,), full[:-2] + (K, full[-1])
    a_st = broadcast_strides(pa, a_space)
    b_st = broadcast_strides(pb, b_space)
    az_st = _zero_strides(az, A.type.shape, a_space, "row")
    bz_st = _zero_strides(bz, B.type.shape, b_space, "column")
    e0, e1 = partition(b, total, ctx.tid, ctx.nthreads)
    with for_range(b, e0, e1, name="o") as e:
        coords = unravel(b, e, full)
        batch, i, j = coords[:rank - 2], coords[-2], coords[-1]
        accp = b.alloca(I64)
        b.store(i64(0), accp)
        with for_range(b, 0, K, name="k") as k:
            ac, bc = batch + [i, k], batch + [k, j]
            av = load_int(b, A, _offset(b, ac, a_st))
            if az is not None:
                av = b.sub(av, load_int(b, az, _offset(b, ac, az_st)))
            bv = load_int(b, B, _offset(b, bc, b_st))
            if bz is not None:
                bv = b.sub(bv, load_int(b, bz, _offset(b, bc, bz_st)))
            b.store(b.add(b.load(accp), b.mul(av, bv)), accp)
        b.store(b.trunc(b.load(accp), I32), elem_ptr(b, y.ptr, e))


from glow_backend_cpu.emit import qlookup as _qlookup  # noqa: E402,F401  (registers the QLookup emitter)
