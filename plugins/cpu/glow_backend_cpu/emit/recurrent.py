"""GRU and LSTM as one native kernel each: the whole sequence loop runs in compiled code.

Without this emitter the core lowers a recurrent node into one small graph per time step (a MatMul
and a dozen element-wise nodes each, ``glow_core/lowering/rules/nn_seq.py``): hundreds of kernels
for a short sequence, each too small to pay for its own call. Here, per direction:

1. the **input projection** of every step at once, ``XW = X[T*B, I] @ W^T + bias``, is one GEMM
   (the MatMul emitter's register-blocked kernel, ``W^T`` packed at compile time) into this
   thread's scratch; the bias is ``Wb + Rb`` pre-summed wherever the cell adds both outside a
   product (every gate but a GRU's candidate with ``linear_before_reset``);
2. the **recurrent product** of each step, ``h @ R^T``, is a matrix-vector product over ``R^T``
   packed at compile time into panels of ``4 x lanes`` output columns (``[panel][H][4 x lanes]``),
   so each step streams R once with four vector accumulators;
3. the **gates** of a step are one vectorized pass over the hidden units (sigmoid and tanh are
   the vectorized ``ew_math`` functions), writing ``h`` (and ``c``) in place and into ``Y``.

Directions are independent: the threads claim them one at a time from an atomic counter, so with
two threads a bidirectional layer runs one direction on each, and a worker that starts late (the
machine is busy) leaves both to the calling thread instead of delaying it (``workload.py`` gives a
one-direction layer to the calling thread alone). The emitter accepts the
common form (float32, constant weights, the default activations, no clip, no sequence lengths,
``layout = 0``, LSTM without peepholes or ``input_forget``); every other recurrent node is lowered
by the core as before.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from llvmlite import ir

from glow_backend_cpu.emit.context import EmitContext, Instr, Operand, register_emitter
from glow_backend_cpu.emit.ew_math import sigmoid_f32, tanh_f32
from glow_backend_cpu.emit.vecops import F32P, fma, gep, vload, vstore, vty
from glow_backend_cpu.emit.matmul import emit_matmul_gemm, emit_matmul_scalar, matmul_shape
from glow_backend_cpu.helpers import F32, I64, carried_loop, for_range, i64
from glow_core.ir.graph import Constant, Node
from glow_core.ir.types import ElemKind, TensorType

#: vector accumulators per panel of the recurrent product
UNROLL = 4
#: the activations the kernel implements, per kind and direction (ONNX defaults)
DEFAULT_ACTS = {"GRU": ("sigmoid", "tanh"), "LSTM": ("sigmoid", "tanh", "tanh")}


def _const(node: Node, i: int) -> bool:
    v = node.inputs[i] if len(node.inputs) > i else None
    return v is None or isinstance(v, Constant)


def _absent(node: Node, i: int) -> bool:
    return len(node.inputs) <= i or node.inputs[i] is None


def supported(node: Node) -> bool:
    """The form this kernel computes (see the module doc); everything else is lowered."""
    a = node.attrs
    kind = node.kind.name
    dirs = 2 if a["direction"] == "bidirectional" else 1
    if tuple(a["activations"]) != DEFAULT_ACTS[kind] * dirs or not math.isinf(a["clip"]) or a["layout"]:
        return False
    if any(o.type.elem is not ElemKind.FLOAT32 for o in node.outputs):
        return False
    if not (_const(node, 1) and _const(node, 2) and _const(node, 3) and _absent(node, 4)):
        return False
    if kind == "LSTM" and (a["input_forget"] or not _absent(node, 7)):
        return False
    return True


@dataclasses.dataclass
class _Dir:
    """Compile-time data of one direction: packed weights and the biases split as the cell adds them."""

    w_t: np.ndarray  # I, G*H (the projection's right operand)
    proj_bias: np.ndarray  # G*H
    r_panels: np.ndarray  # packed R^T of the product with h
    rn_panels: np.ndarray | None  # GRU without linear_before_reset: packed R_n^T (product with r * h)
    rb_n: np.ndarray | None  # GRU with linear_before_reset: Rb of the candidate gate
    reverse: bool


def pack_columns(rt: np.ndarray, width: int) -> np.ndarray:
    """``rt[K, N]`` -> ``[ceil(N / width)][K][width]`` (zero-padded): panels of output columns."""
    k, n = rt.shape
    panels = -(-n // width)
    out = np.zeros((panels, k, width), np.float32)
    for p in range(panels):
        cols = rt[:, p * width:(p + 1) * width]
        out[p, :, :cols.shape[1]] = cols
    return out


def _directions(instr: Instr, hid: int, width: int) -> list[_Dir]:
    kind = instr.kind
    w = np.asarray(instr.ins[1].const_value, np.float32)  # type: ignore[union-attr]
    r = np.asarray(instr.ins[2].const_value, np.float32)  # type: ignore[union-attr]
    bias_op = instr.ins[3] if len(instr.ins) > 3 else None
    dirs, gh, _ = w.shape
    bias = (np.zeros((dirs, 2 * gh), np.float32) if bias_op is None
            else np.asarray(bias_op.const_value, np.float32))
    lbr = kind == "GRU" and bool(instr.attrs.get("linear_before_reset"))
    out = []
    for d in range(dirs):
        wb, rb = bias[d, :gh], bias[d, gh:]
        proj = wb + rb
        rows = r[d]
        rn_panels = rb_n = None
        if kind == "GRU":
            if lbr:  # the candidate's Rb sits inside r * (h R_n^T + Rb_n)
                proj = np.concatenate([proj[:2 * hid], wb[2 * hid:]])
                rb_n = rb[2 * hid:].copy()
            else:  # the candidate multiplies r * h by R_n: a second product per step
                rn_panels = pack_columns(np.ascontiguousarray(rows[2 * hid:].T), width)
                rows = rows[:2 * hid]
        reverse = instr.attrs["direction"] == "reverse" or (instr.attrs["direction"] == "bidirectional" and d == 1)
        out.append(_Dir(np.ascontiguousarray(w[d].T), proj.astype(np.float32),
                        pack_columns(np.ascontiguousarray(rows.T), width), rn_panels, rb_n, reverse))
    return out


def _matvec(ctx: EmitContext, panels: ir.Value, n_panels: int, k: int, width: int, vec: ir.Value,
            out: ir.Value) -> None:
    """``out[0 : n_panels * width] = vec[0:k] @ (packed columns)``; ``out`` has room for the padding."""
    b = ctx.builder
    lanes = width // UNROLL
    zero = ir.Constant(vty(lanes), None)
    with for_range(b, 0, n_panels, name="panel") as p:
        base = gep(b, panels, b.mul(p, i64(k * width)))

        def step(bb: ir.IRBuilder, kk: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
            hk = bb.load(gep(bb, vec, kk), align=4)
            hv = bb.insert_element(ir.Constant(vty(lanes), ir.Undefined), hk, ir.Constant(ir.IntType(32), 0))
            hv = bb.shuffle_vector(hv, ir.Constant(vty(lanes), ir.Undefined),
                                   ir.Constant(vty(lanes, ir.IntType(32)), [0] * lanes))
            row = gep(bb, base, bb.mul(kk, i64(width)))
            return [fma(bb, vload(bb, gep(bb, row, u * lanes), lanes, 64 if lanes >= 16 else 4 * lanes), hv, accs[u])
                    for u in range(UNROLL)]

        accs = carried_loop(b, 0, k, [zero] * UNROLL, step, name="rk")
        dst = gep(b, out, b.mul(p, i64(width)))
        for u in range(UNROLL):
            vstore(b, accs[u], gep(b, dst, u * lanes), 4)


def _over_hidden(b: ir.IRBuilder, hid: int, lanes: int, body) -> None:  # type: ignore[no-untyped-def]
    """``body(j, lanes)`` for j in steps of ``lanes`` over [0, hid), then the tail one lane at a time."""
    main = hid - hid % lanes
    if main:
        with for_range(b, 0, main, step=lanes, name="j") as j:
            body(j, lanes)
    if main < hid:
        with for_range(b, main, hid, name="jt") as j:
            body(j, 1)


def _ld(b: ir.IRBuilder, base: ir.Value, j: ir.Value, lanes: int) -> ir.Value:
    p = gep(b, base, j)
    return vload(b, p, lanes) if lanes > 1 else b.load(p, align=4)


def _st(b: ir.IRBuilder, v: ir.Value, base: ir.Value, j: ir.Value) -> None:
    p = gep(b, base, j)
    if isinstance(v.type, ir.VectorType):
        vstore(b, v, p)
    else:
        b.store(v, p, align=4)


def _one(b: ir.IRBuilder, like: ir.Value) -> ir.Value:
    t = like.type
    return ir.Constant(t, [1.0] * t.count) if isinstance(t, ir.VectorType) else ir.Constant(F32, 1.0)


@register_emitter("GRU", "LSTM", elems=frozenset({ElemKind.FLOAT32}), when=supported,
                  why="float32, constant W/R/B, default activations, no clip, no sequence_lens, layout 0, "
                      "LSTM without peepholes or input_forget")
def emit_recurrent(ctx: EmitContext, instr: Instr) -> None:
    kind = instr.kind
    ins = list(instr.ins) + [None] * 8
    x, h0 = ins[0], ins[5]
    c0 = ins[6] if kind == "LSTM" else None
    outs = list(instr.outs) + [None] * 3
    y, yh, yc = outs[0], outs[1], (outs[2] if kind == "LSTM" else None)
    assert x is not None
    seq, batch, inp = x.type.shape
    hid = int(instr.attrs["hidden_size"])
    lanes = max(1, min(ctx.target.vector_lanes, 16))
    width = lanes * UNROLL
    dirs = _directions(instr, hid, width)
    gh = dirs[0].w_t.shape[1]
    ndirs = len(dirs)
    if seq == 0 or batch == 0:
        return
    b = ctx.builder
    # per-thread scratch: XW, the products, h (and c), r * h
    n_panels = dirs[0].r_panels.shape[0]
    xw = b.bitcast(ctx.scratch(4 * seq * batch * gh), F32P)
    hr = b.bitcast(ctx.scratch(4 * batch * n_panels * width), F32P)
    hbuf = b.bitcast(ctx.scratch(4 * batch * hid), F32P)
    cbuf = b.bitcast(ctx.scratch(4 * batch * hid), F32P) if kind == "LSTM" else None
    rh = hn = None
    if dirs[0].rn_panels is not None:
        rh = b.bitcast(ctx.scratch(4 * batch * hid), F32P)
        hn = b.bitcast(ctx.scratch(4 * batch * dirs[0].rn_panels.shape[0] * width), F32P)
    solo = dataclasses.replace(ctx, tid=i64(0), nthreads=i64(1))
    claim, finished, head, exit_ = _claim_loop(ctx)
    d_claimed = b.atomic_rmw("add", claim, i64(1), "monotonic")
    body = b.append_basic_block("dir.body")
    b.cbranch(b.icmp_signed("<", d_claimed, i64(ndirs)), body, exit_)
    b.position_at_end(body)
    for d, dd in enumerate(dirs):
        with b.if_then(b.icmp_signed("==", d_claimed, i64(d))):
            _project(solo, x, dd, xw, seq * batch, inp, gh)
            _init_state(b, h0, hbuf, d, batch * hid)
            if cbuf is not None:
                _init_state(b, c0, cbuf, d, batch * hid)
            panels = b.bitcast(ctx.add_constant(dd.r_panels, "rnn.r.packed"), F32P)
            rn = b.bitcast(ctx.add_constant(dd.rn_panels, "rnn.rn.packed"), F32P) if dd.rn_panels is not None else None
            rbn = b.bitcast(ctx.add_constant(dd.rb_n, "rnn.rbn"), F32P) if dd.rb_n is not None else None
            with for_range(b, 0, seq, name="s") as s:
                t = b.sub(i64(seq - 1), s) if dd.reverse else s
                with for_range(b, 0, batch, name="bt") as bi:
                    h = gep(b, hbuf, b.mul(bi, i64(hid)))
                    hrow = gep(b, hr, b.mul(bi, i64(n_panels * width)))
                    g = gep(b, xw, b.mul(b.add(b.mul(t, i64(batch)), bi), i64(gh)))
                    yrow = None if y is None else gep(b, y.ptr, b.mul(
                        b.add(b.mul(b.add(b.mul(t, i64(ndirs)), i64(d)), i64(batch)), bi), i64(hid)))
                    _matvec(ctx, panels, n_panels, hid, width, h, hrow)
                    if kind == "GRU":
                        _gru_gates(ctx, hid, lanes, g, hrow, h, yrow, rbn, rn, rh, hn, bi, width)
                    else:
                        assert cbuf is not None
                        _lstm_gates(ctx, hid, lanes, g, hrow, h, gep(b, cbuf, b.mul(bi, i64(hid))), yrow)
            _copy_state(b, hbuf, yh, d, batch * hid)
            if cbuf is not None:
                _copy_state(b, cbuf, yc, d, batch * hid)
    b.branch(head)
    b.position_at_end(exit_)
    # the last thread out resets the counters for the next run (no thread claims again before a barrier)
    out = b.atomic_rmw("add", finished, i64(1), "acq_rel")
    with b.if_then(b.icmp_signed("==", out, b.sub(ctx.nthreads, i64(1)))):
        b.store_atomic(i64(0), claim, "monotonic", 8)
        b.store_atomic(i64(0), finished, "release", 8)


def _claim_loop(ctx: EmitContext) -> tuple[ir.Value, ir.Value, ir.Block, ir.Block]:
    """Counters of this kernel (module globals of its own) and the loop head every thread returns to
    after a direction: a thread claims the next unclaimed direction, so a worker that starts late
    (descheduled on a busy machine) leaves its share to the threads that are running."""
    b = ctx.builder
    mod = ctx.module
    made = []
    for what in ("claim", "finished"):
        name = f"glow_rnn_{what}_{len(mod.globals)}"
        g = ir.GlobalVariable(mod, I64, name=name)
        g.initializer = ir.Constant(I64, 0)
        g.linkage = "internal"
        g.align = 64
        made.append(g)
    head = b.append_basic_block("dir.claim")
    exit_ = b.append_basic_block("dir.done")
    b.branch(head)
    b.position_at_end(head)
    return made[0], made[1], head, exit_


def _project(ctx: EmitContext, x: Operand, dd: _Dir, xw: ir.Value, rows: int, inp: int, gh: int) -> None:
    """XW[rows, G*H] = X[rows, I] @ W^T + bias, on this thread alone (``ctx`` has tid 0 of 1)."""
    s = matmul_shape((rows, inp), (inp, gh), (rows, gh), (gh,))
    a = Operand(x.ptr, TensorType(ElemKind.FLOAT32, (rows, inp)), x.align)
    wt = Operand(x.ptr, TensorType(ElemKind.FLOAT32, (inp, gh)), 64, dd.w_t)
    bias = Operand(ctx.builder.bitcast(ctx.add_constant(dd.proj_bias, "rnn.bias"), F32P),
                   TensorType(ElemKind.FLOAT32, (gh,)), 64)
    out = Operand(xw, TensorType(ElemKind.FLOAT32, (rows, gh)), 64)
    if ctx.target.vector_lanes >= 4 and inp > 0:
        emit_matmul_gemm(ctx, s, a, wt, bias, out, "none", -math.inf, math.inf, "rnn.proj")
    else:  # the scalar path reads the right operand in place: give it the transposed weights
        wt = Operand(ctx.builder.bitcast(ctx.add_constant(dd.w_t, "rnn.wt"), F32P), wt.type, 64)
        emit_matmul_scalar(ctx, s, a, wt, bias, out, "none", -math.inf, math.inf)


def _init_state(b: ir.IRBuilder, src: Operand | None, dst: ir.Value, d: int, n: int) -> None:
    with for_range(b, 0, n, name="init") as i:
        v = ir.Constant(F32, 0.0) if src is None else b.load(gep(b, src.ptr, b.add(i, i64(d * n))), align=4)
        b.store(v, gep(b, dst, i), align=4)


def _copy_state(b: ir.IRBuilder, src: ir.Value, dst: Operand | None, d: int, n: int) -> None:
    if dst is None:
        return
    with for_range(b, 0, n, name="fin") as i:
        b.store(b.load(gep(b, src, i), align=4), gep(b, dst.ptr, b.add(i, i64(d * n))), align=4)


def _gru_gates(ctx: EmitContext, hid: int, lanes: int, g: ir.Value, hr: ir.Value, h: ir.Value,
               yrow: ir.Value | None, rbn: ir.Value | None, rn: ir.Value | None, rh: ir.Value | None,
               hn: ir.Value | None, bi: ir.Value, width: int) -> None:
    """One GRU step over the hidden units: z, r, the candidate, ``h = (1 - z) * n + z * h``."""
    b = ctx.builder
    if rn is None:  # linear_before_reset: n = tanh(xn + r * (h R_n^T + Rb_n))
        def body(j: ir.Value, w: int) -> None:
            z = sigmoid_f32(b, b.fadd(_ld(b, g, j, w), _ld(b, hr, j, w)))
            jr, jn = b.add(j, i64(hid)), b.add(j, i64(2 * hid))
            r = sigmoid_f32(b, b.fadd(_ld(b, g, jr, w), _ld(b, hr, jr, w)))
            rec = _ld(b, hr, jn, w)
            if rbn is not None:
                rec = b.fadd(rec, _ld(b, rbn, j, w))
            n = tanh_f32(b, b.fadd(_ld(b, g, jn, w), b.fmul(r, rec)))
            hv = _ld(b, h, j, w)
            new = b.fadd(b.fmul(b.fsub(_one(b, z), z), n), b.fmul(z, hv))
            _st(b, new, h, j)
            if yrow is not None:
                _st(b, new, yrow, j)
        _over_hidden(b, hid, lanes, body)
        return
    assert rh is not None and hn is not None
    rhb = gep(b, rh, b.mul(bi, i64(hid)))

    def gates_rz(j: ir.Value, w: int) -> None:  # z into hr's z slot, r * h into rh
        z = sigmoid_f32(b, b.fadd(_ld(b, g, j, w), _ld(b, hr, j, w)))
        jr = b.add(j, i64(hid))
        r = sigmoid_f32(b, b.fadd(_ld(b, g, jr, w), _ld(b, hr, jr, w)))
        _st(b, z, hr, j)
        _st(b, b.fmul(r, _ld(b, h, j, w)), rhb, j)
    _over_hidden(b, hid, lanes, gates_rz)
    hnb = gep(b, hn, b.mul(bi, i64(-(-hid // width) * width)))
    _matvec(ctx, rn, -(-hid // width), hid, width, rhb, hnb)

    def candidate(j: ir.Value, w: int) -> None:
        z = _ld(b, hr, j, w)
        n = tanh_f32(b, b.fadd(_ld(b, g, b.add(j, i64(2 * hid)), w), _ld(b, hnb, j, w)))
        new = b.fadd(b.fmul(b.fsub(_one(b, z), z), n), b.fmul(z, _ld(b, h, j, w)))
        _st(b, new, h, j)
        if yrow is not None:
            _st(b, new, yrow, j)
    _over_hidden(b, hid, lanes, candidate)


def _lstm_gates(ctx: EmitContext, hid: int, lanes: int, g: ir.Value, hr: ir.Value, h: ir.Value, c: ir.Value,
                yrow: ir.Value | None) -> None:
    """One LSTM step (gates i, o, f, c in ONNX order): ``c = f * c + i * tanh(.)``, ``h = o * tanh(c)``."""
    b = ctx.builder

    def pre(j: ir.Value, gate: int, w: int) -> ir.Value:
        jj = b.add(j, i64(gate * hid))
        return b.fadd(_ld(b, g, jj, w), _ld(b, hr, jj, w))

    def body(j: ir.Value, w: int) -> None:
        i_g = sigmoid_f32(b, pre(j, 0, w))
        f_g = sigmoid_f32(b, pre(j, 2, w))
        c_g = tanh_f32(b, pre(j, 3, w))
        c_new = b.fadd(b.fmul(f_g, _ld(b, c, j, w)), b.fmul(i_g, c_g))
        o_g = sigmoid_f32(b, pre(j, 1, w))
        new = b.fmul(o_g, tanh_f32(b, c_new))
        _st(b, c_new, c, j)
        _st(b, new, h, j)
        if yrow is not None:
            _st(b, new, yrow, j)
    _over_hidden(b, hid, lanes, body)


__all__ = ["emit_recurrent", "pack_columns", "supported"]
