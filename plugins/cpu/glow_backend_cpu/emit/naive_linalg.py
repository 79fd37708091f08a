"""Simple, correct fallbacks for convolution, matrix products and pooling.

The fast kernels (packing, blocked layouts, register-blocked micro-kernels)
live in ``gemm`` / ``conv`` / ``matmul`` / ``pool``; this module only
registers the kinds none of them registered (it is imported last), so the
backend runs every model even without them:

- MatMul / FusedMatMul: ``C[m, :] += A[m, k] * B[k, :]`` in vectors along the
  row of C, batches broadcast like numpy; bias and activation after;
- Conv / FusedConv (1-D and 2-D, groups, strides, dilations, pads): per output
  plane, ``out[oh, :] += w * in[ih, :]`` in vectors for stride 1 (scalar
  otherwise), bias first, activation after;
- MaxPool / AvgPool (1-D and 2-D): a scalar loop over each window.

Work is split over (batch, output channel) planes or matrix rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from llvmlite import ir

from glow_backend_cpu.emit.context import EMITTERS, EmitContext, Instr, Operand, register_emitter
from glow_backend_cpu.emit.dtypes import FLOATS, compute_type, to_compute, to_storage
from glow_backend_cpu.emit.elementwise import broadcast_strides
from glow_backend_cpu.emit.ew_ops import EW_OPS
from glow_backend_cpu.emit.reduce import REDUCERS, lowest
from glow_backend_cpu.helpers import (
    const_like,
    elem_ptr,
    for_range,
    i64,
    lane_mask,
    masked_vload,
    masked_vstore,
    partition,
    splat,
    strided_offset,
    vload,
    vstore,
)
from glow_core.ir.graph import Node
from glow_core.ir.types import ElemKind, broadcast_shapes

E = ElemKind
F = frozenset({E.FLOAT32, E.FLOAT64})


def _register(kind: str, fn, elems: frozenset[ElemKind], when=None, why: str = "") -> None:  # type: ignore[no-untyped-def]
    if kind not in EMITTERS:
        register_emitter(kind, elems=elems, when=when, why=why)(fn)


def _activation(b: ir.IRBuilder, v: ir.Value, attrs, elem: ElemKind) -> ir.Value:  # type: ignore[no-untyped-def]
    act = attrs.get("activation", "none")
    if act == "none":
        return v
    if act == "hardswish":  # the lowered nodes' element operations, in their order (float32 only)
        ee = [elem, elem]
        t = EW_OPS["Add"](b, [v, const_like(v.type, 3.0)], ee, elem, {})
        t = EW_OPS["Div"](b, [t, const_like(v.type, 6.0)], ee, elem, {})
        t = EW_OPS["Min"](b, [t, const_like(v.type, 1.0)], ee, elem, {})
        t = EW_OPS["Max"](b, [t, const_like(v.type, 0.0)], ee, elem, {})
        return EW_OPS["Mul"](b, [v, t], ee, elem, {})
    lo = 0.0 if act == "relu" else attrs["clip_min"]
    hi = math.inf if act == "relu" else attrs["clip_max"]
    if not math.isinf(lo):
        v = EW_OPS["Max"](b, [v, const_like(v.type, lo)], [elem, elem], elem, {})
    if not math.isinf(hi):
        v = EW_OPS["Min"](b, [v, const_like(v.type, hi)], [elem, elem], elem, {})
    return v


def _axpy_row(b: ir.IRBuilder, lanes: int, n: int, y: ir.Value, y_off: ir.Value, x: ir.Value, x_off: ir.Value,
              a: ir.Value, elem: ElemKind, x_stride: int = 1) -> None:
    """``y[y_off + j] += a * x[x_off + j * x_stride]`` for j < n (compute values held in y's storage)."""
    if n <= 0:
        return
    if x_stride != 1:
        with for_range(b, 0, n, name="j") as j:
            yp = elem_ptr(b, y, b.add(y_off, j))
            xv = to_compute(b, b.load(elem_ptr(b, x, b.add(x_off, b.mul(j, i64(x_stride))))), elem)
            b.store(to_storage(b, b.fadd(to_compute(b, b.load(yp), elem), b.fmul(a, xv)), elem), yp)
        return
    va = splat(b, a, lanes)
    nfull, tail = divmod(n, lanes)
    with for_range(b, 0, nfull, name="j") as j:
        pos = b.mul(j, i64(lanes))
        yv = to_compute(b, vload(b, y, b.add(y_off, pos), lanes, elem.itemsize), elem)
        xv = to_compute(b, vload(b, x, b.add(x_off, pos), lanes, elem.itemsize), elem)
        vstore(b, to_storage(b, b.fadd(yv, b.fmul(va, xv)), elem), y, b.add(y_off, pos), elem.itemsize)
    if tail:
        mask = lane_mask(b, i64(tail), lanes)
        yo, xo = b.add(y_off, i64(nfull * lanes)), b.add(x_off, i64(nfull * lanes))
        yv = to_compute(b, masked_vload(b, y, yo, mask, lanes, elem.itemsize), elem)
        xv = to_compute(b, masked_vload(b, x, xo, mask, lanes, elem.itemsize), elem)
        masked_vstore(b, to_storage(b, b.fadd(yv, b.fmul(va, xv)), elem), y, yo, mask, elem.itemsize)


# -- matrix products ---------------------------------------------------------------------------------

def emit_matmul(ctx: EmitContext, instr: Instr) -> None:
    a, bm = instr.ins[0], instr.ins[1]
    bias = instr.ins[2] if len(instr.ins) > 2 else None
    out = instr.outs[0]
    assert a is not None and bm is not None
    b = ctx.builder
    elem = out.type.elem
    if out.type.size == 0:
        return
    ash = (1,) + a.type.shape if a.type.rank == 1 else a.type.shape
    bsh = bm.type.shape + (1,) if bm.type.rank == 1 else bm.type.shape
    m, k = ash[-2], ash[-1]
    n = bsh[-1]
    batch = broadcast_shapes(tuple(ash[:-2]), tuple(bsh[:-2]))
    nb = math.prod(batch)
    a_bs = broadcast_strides(tuple(ash[:-2]), batch) if batch else []
    b_bs = broadcast_strides(tuple(bsh[:-2]), batch) if batch else []
    lanes = ctx.target.vector_lanes
    ct = compute_type(elem)
    items = nb * m
    start, end = partition(b, items, ctx.tid, ctx.nthreads)
    with for_range(b, start, end, name="row") as r:
        bi = b.udiv(r, i64(m))
        mi = b.urem(r, i64(m))
        a_off, b_off = i64(0), i64(0)
        rem = bi
        for d in reversed(range(len(batch))):
            idx = b.urem(rem, i64(batch[d]))
            rem = b.udiv(rem, i64(batch[d]))
            a_off = b.add(a_off, b.mul(idx, i64(a_bs[d] * m * k)))
            b_off = b.add(b_off, b.mul(idx, i64(b_bs[d] * k * n)))
        o_off = b.mul(r, i64(n))
        zero = to_storage(b, const_like(ct, 0), elem)
        with for_range(b, 0, n, name="z") as j:
            b.store(zero, elem_ptr(b, out.ptr, b.add(o_off, j)))
        with for_range(b, 0, k, name="k") as kk:
            av = to_compute(b, b.load(elem_ptr(b, a.ptr, b.add(a_off, b.add(b.mul(mi, i64(k)), kk)))), elem)
            _axpy_row(b, lanes, n, out.ptr, o_off, bm.ptr, b.add(b_off, b.mul(kk, i64(n))), av, elem)
        if bias is not None or instr.attrs.get("activation", "none") != "none":
            _epilogue(ctx, out, bias, r, o_off, n, instr.attrs)


def _epilogue(ctx: EmitContext, out: Operand, bias: Operand | None, row: ir.Value, o_off: ir.Value, n: int,
              attrs) -> None:  # type: ignore[no-untyped-def]
    b = ctx.builder
    elem = out.type.elem
    bs = broadcast_strides(bias.type.shape, out.type.shape) if bias is not None else None
    with for_range(b, 0, n, name="ep") as j:
        p = elem_ptr(b, out.ptr, b.add(o_off, j))
        v = to_compute(b, b.load(p), elem)
        if bias is not None and bs is not None:
            # bias offset of output element (row, j): decompose the flat index over the output shape
            off = strided_offset(b, b.add(o_off, j), out.type.shape, bs)
            v = b.fadd(v, to_compute(b, b.load(elem_ptr(b, bias.ptr, off)), elem))
        v = _activation(b, v, attrs, elem)
        b.store(to_storage(b, v, elem), p)


# -- convolution -------------------------------------------------------------------------------------

def _spatial(node_or_shape: Sequence[int]) -> tuple[int, int]:
    s = tuple(node_or_shape)
    return (1, s[0]) if len(s) == 1 else (s[0], s[1])


def _conv_ok(node: Node) -> bool:
    x = node.inputs[0]
    return x is not None and x.type.rank in (3, 4)


def emit_conv(ctx: EmitContext, instr: Instr) -> None:
    x, w = instr.ins[0], instr.ins[1]
    bias = instr.ins[2] if len(instr.ins) > 2 else None
    out = instr.outs[0]
    assert x is not None and w is not None
    b = ctx.builder
    elem = out.type.elem
    if out.type.size == 0:
        return
    nd = x.type.rank - 2
    n, c = x.type.shape[:2]
    mo = out.type.shape[1]
    ih, iw = _spatial(x.type.shape[2:])
    oh, ow = _spatial(out.type.shape[2:])
    kh, kw = _spatial(w.type.shape[2:])
    strides, dil, pads = instr.attrs["strides"], instr.attrs["dilations"], instr.attrs["pads"]
    sh, sw = (1, strides[0]) if nd == 1 else (strides[0], strides[1])
    dh, dw = (1, dil[0]) if nd == 1 else (dil[0], dil[1])
    ph, pw = (0, pads[0]) if nd == 1 else (pads[0], pads[1])
    g = instr.attrs["group"]
    cg, mg = c // g, mo // g
    lanes = ctx.target.vector_lanes
    ct = compute_type(elem)
    planes = n * mo
    start, end = partition(b, planes, ctx.tid, ctx.nthreads)
    with for_range(b, start, end, name="plane") as pl:
        ni = b.udiv(pl, i64(mo))
        mi = b.urem(pl, i64(mo))
        gi = b.udiv(mi, i64(mg))
        o_base = b.mul(pl, i64(oh * ow))
        init = to_compute(b, b.load(elem_ptr(b, bias.ptr, mi)), elem) if bias is not None else const_like(ct, 0)
        init_s = to_storage(b, init, elem)
        with for_range(b, 0, oh * ow, name="z") as j:
            b.store(init_s, elem_ptr(b, out.ptr, b.add(o_base, j)))
        with for_range(b, 0, cg, name="ic") as ic:
            ch = b.add(b.mul(gi, i64(cg)), ic)
            x_base = b.mul(b.add(b.mul(ni, i64(c)), ch), i64(ih * iw))
            w_base = b.mul(b.add(b.mul(mi, i64(cg)), ic), i64(kh * kw))
            for ky in range(kh):
                # output rows whose input row is inside the image
                oy_lo = max(0, -(-(ph - ky * dh) // sh))
                oy_hi = min(oh, (ih - 1 + ph - ky * dh) // sh + 1) if ih - 1 + ph - ky * dh >= 0 else 0
                if oy_hi <= oy_lo:
                    continue
                for kx in range(kw):
                    ox_lo = max(0, -(-(pw - kx * dw) // sw))
                    ox_hi = min(ow, (iw - 1 + pw - kx * dw) // sw + 1) if iw - 1 + pw - kx * dw >= 0 else 0
                    if ox_hi <= ox_lo:
                        continue
                    wv = to_compute(b, b.load(elem_ptr(b, w.ptr, b.add(w_base, i64(ky * kw + kx)))), elem)
                    with for_range(b, oy_lo, oy_hi, name="oy") as oy:
                        iy = b.sub(b.add(b.mul(oy, i64(sh)), i64(ky * dh)), i64(ph))
                        ix0 = ox_lo * sw + kx * dw - pw
                        _axpy_row(b, lanes, ox_hi - ox_lo, out.ptr, b.add(o_base, b.add(b.mul(oy, i64(ow)), i64(ox_lo))),
                                  x.ptr, b.add(x_base, b.add(b.mul(iy, i64(iw)), i64(ix0))), wv, elem, sw)
        if instr.attrs.get("activation", "none") != "none":
            with for_range(b, 0, oh * ow, name="act") as j:
                p = elem_ptr(b, out.ptr, b.add(o_base, j))
                b.store(to_storage(b, _activation(b, to_compute(b, b.load(p), elem), instr.attrs, elem), elem), p)


# -- pooling ----------------------------------------------------------------------------------------

def _pool_ok(node: Node) -> bool:
    x = node.inputs[0]
    return x is not None and x.type.rank in (3, 4)


def emit_pool(ctx: EmitContext, instr: Instr) -> None:
    x = instr.ins[0]
    out = instr.outs[0]
    assert x is not None
    b = ctx.builder
    elem = x.type.elem
    if out.type.size == 0:
        return
    nd = x.type.rank - 2
    is_max = instr.kind == "MaxPool"
    nc = x.type.shape[0] * x.type.shape[1]
    ih, iw = _spatial(x.type.shape[2:])
    oh, ow = _spatial(out.type.shape[2:])
    a = instr.attrs
    kh, kw = _spatial(a["kernel_shape"])
    sh, sw = _spatial(a["strides"])
    dh, dw = _spatial(a["dilations"])
    pads = a["pads"]
    ph, pw = (0, pads[0]) if nd == 1 else (pads[0], pads[1])
    peh, pew = (0, pads[1]) if nd == 1 else (pads[2], pads[3])
    include_pad = bool(a.get("count_include_pad", False))
    ct = compute_type(elem)
    combine = REDUCERS["ReduceMax"].combine(elem) if is_max else (lambda bb, p, q: bb.fadd(p, q))
    init = const_like(ct, lowest(elem) if is_max else 0)
    start, end = partition(b, nc, ctx.tid, ctx.nthreads)
    with b.goto_entry_block():
        acc = b.alloca(ct)
    with for_range(b, start, end, name="plane") as pl:
        x_base = b.mul(pl, i64(ih * iw))
        with for_range(b, 0, oh, name="oy") as oy, for_range(b, 0, ow, name="ox") as ox:
            b.store(init, acc)
            cnt = i64(0)
            y0 = b.sub(b.mul(oy, i64(sh)), i64(ph))
            x0 = b.sub(b.mul(ox, i64(sw)), i64(pw))
            for ky in range(kh):
                for kx in range(kw):
                    iy = b.add(y0, i64(ky * dh))
                    ix = b.add(x0, i64(kx * dw))
                    inside = b.and_(b.and_(b.icmp_signed(">=", iy, i64(0)), b.icmp_signed("<", iy, i64(ih))),
                                    b.and_(b.icmp_signed(">=", ix, i64(0)), b.icmp_signed("<", ix, i64(iw))))
                    if include_pad:
                        counted = b.and_(b.and_(b.icmp_signed(">=", iy, i64(-ph)),
                                                b.icmp_signed("<", iy, i64(ih + peh))),
                                         b.and_(b.icmp_signed(">=", ix, i64(-pw)),
                                                b.icmp_signed("<", ix, i64(iw + pew))))
                    else:
                        counted = inside
                    cnt = b.add(cnt, b.zext(counted, cnt.type))
                    with b.if_then(inside):
                        p = elem_ptr(b, x.ptr, b.add(x_base, b.add(b.mul(iy, i64(iw)), ix)))
                        b.store(combine(b, b.load(acc), to_compute(b, b.load(p), elem)), acc)
            v = b.load(acc)
            if not is_max:
                v = b.fdiv(v, b.sitofp(cnt, ct))
            o = b.add(b.mul(pl, i64(oh * ow)), b.add(b.mul(oy, i64(ow)), ox))
            b.store(to_storage(b, v, elem), elem_ptr(b, out.ptr, o))


def register_fallbacks() -> None:
    """Register these emitters for the kinds no other module registered (``load_all`` calls it after importing
    the others: importing this module alone, as the tests do, registers nothing, so the order of imports
    cannot make a fallback take a kind before its fast emitter)."""
    _register("MatMul", emit_matmul, F | {E.FLOAT16, E.BFLOAT16})
    _register("FusedMatMul", emit_matmul, F | {E.FLOAT16, E.BFLOAT16})
    _register("Conv", emit_conv, FLOATS, _conv_ok, "1-D and 2-D convolutions")
    _register("FusedConv", emit_conv, FLOATS, _conv_ok, "1-D and 2-D convolutions")
    _register("MaxPool", emit_pool, FLOATS, _pool_ok, "1-D and 2-D pooling")
    _register("AvgPool", emit_pool, FLOATS, _pool_ok, "1-D and 2-D pooling")
