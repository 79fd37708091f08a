"""Lowerings of the sequence-model kinds onto primitives (``glow_core.ir.defs.nn_seq``).

In: Attention, RotaryEmbedding, RNN, GRU, LSTM, LinearAttention,
CausalConvWithState. Out: MatMul, Conv, element-wise arithmetic (Tanh, Exp,
...), ReduceMax / ReduceSum, Where, Cast, Gather and data movement.

Each rule repeats its interpreter kernel (``kernels/nn_seq.py``) in the same
working kind (float32, or float64 for float64 operands where the kernel does)
and rounds once at the end (Attention on float16 / bfloat16 operands also rounds
after each step of the spec's function body, as its kernel does). The recurrent kinds are unrolled over the static
sequence length: one MatMul per step and direction, with the per-batch
sequence lengths turned into run-time masks (Less + Where).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from glow_core.ir.graph import Node, Value
from glow_core.ir.types import ElemKind
from glow_core.lowering.builder import Builder
from glow_core.lowering.rules.elementwise import expm1
from glow_core.lowering.rules.nn import last, matmul, zeros
from glow_core.lowering.table import lowering

E = ElemKind
F32, F64 = E.FLOAT32, E.FLOAT64


def _work(elem: ElemKind) -> ElemKind:
    return F64 if elem == F64 else F32


def _c(b: Builder, value: float, like: Value) -> Value:
    """A scalar of ``like``'s kind that broadcasts against it."""
    return b.scalar(value, like, like.type.rank)


def _sigmoid(b: Builder, x: Value) -> Value:
    """0.5 * (tanh(0.5 x) + 1): the kernels' overflow-free logistic."""
    return b.mul(_c(b, 0.5, x), b.add(b.unary("Tanh", b.mul(_c(b, 0.5, x), x)), _c(b, 1.0, x)))


def _repeat_heads(b: Builder, x: Value, group: int) -> Value:
    """np.repeat(x, group, axis=1) for [B, H, ...]."""
    if group == 1:
        return x
    shape = x.type.shape
    y = b.reshape(x, shape[:2] + (1,) + shape[2:])
    y = b.broadcast(y, shape[:2] + (group,) + shape[2:])
    return b.reshape(y, (shape[0], shape[1] * group) + shape[2:])


def _step(b: Builder, x: Value, axis: int, i: int) -> Value:
    """Element ``i`` of ``axis``, the axis kept (size 1)."""
    return b.slice(x, axis, i, 1)


# -- Attention ---------------------------------------------------------------------------------------------

def _to4d(b: Builder, x: Value, heads: int) -> Value:
    """[batch, seq, heads*size] -> [batch, heads, seq, size]; 4-D operands pass through."""
    if x.type.rank == 4:
        return x
    bs, s, hidden = x.type.shape
    return b.transpose(b.reshape(x, (bs, s, heads, hidden // heads)), (0, 2, 1, 3))


def masked_softmax(b: Builder, scores: Value, rnd: Callable[[Value], Value] | None = None) -> Value:
    """Softmax over the last axis; a row whose every score is -inf gives zeros (not NaN). ``rnd``: rounding
    after each step (the difference, the exponential, the sum, the quotient), as the kernel's."""
    r = rnd or (lambda x: x)
    ax = (scores.type.rank - 1,)
    top = b.reduce("ReduceMax", scores, ax)
    dead = b.emit1("IsInf", [top], detect_positive=False, detect_negative=True)
    zero, one = _c(b, 0.0, top), _c(b, 1.0, top)
    e = r(b.unary("Exp", r(b.sub(scores, b.where(dead, zero, top)))))
    total = r(b.reduce("ReduceSum", e, ax))
    return b.where(dead, zero, r(b.div(e, b.where(dead, one, total))))


def _attention_bias(b: Builder, node: Node, wt: ElemKind, bsz: int, sq: int, total: int) -> Value | None:
    """The additive mask (mask, key padding, causal) as the kernel sums it, or None."""
    mask, nonpad = b.opt_input(3), b.opt_input(6)
    neg = -np.inf
    terms: list[Value] = []
    if mask is not None:
        m = b.where(mask, b.scalar(0.0, wt, mask.type.rank), b.scalar(neg, wt, mask.type.rank)) \
            if mask.type.elem == E.BOOL else b.cast(mask, wt)
        short = total - m.type.shape[-1]
        if short > 0:  # a short mask is padded with -inf
            m = b.concat([m, b.broadcast(b.scalar(neg, wt, m.type.rank), m.type.shape[:-1] + (short,))],
                         m.type.rank - 1)
        terms.append(b.reshape(m, (1,) * (4 - m.type.rank) + m.type.shape))
    if nonpad is not None:
        keys = b.const(np.arange(total, dtype=np.int64).reshape(1, total))
        padded = b.binary("LessOrEqual", b.reshape(nonpad, (bsz, 1)), keys)  # key j >= valid count
        terms.append(b.reshape(b.where(padded, b.scalar(neg, wt, 2), b.scalar(0.0, wt, 2)), (bsz, 1, 1, total)))
    if node.attrs["is_causal"]:
        rows = np.arange(sq).reshape(1, 1, sq, 1)
        cols = np.arange(total).reshape(1, 1, 1, total)
        if nonpad is not None:
            offset = b.reshape(b.sub(nonpad, b.scalar(sq, nonpad)), (bsz, 1, 1, 1))
            limit = b.add(b.const(rows.astype(np.int64)), offset)
            seen = b.binary("LessOrEqual", b.const(cols.astype(np.int64)), limit)
            terms.append(b.where(seen, b.scalar(0.0, wt, 4), b.scalar(neg, wt, 4)))
        else:
            k = b.input(1)
            shift = total - (k.type.shape[-2] if k.type.rank == 4 else k.type.shape[1])
            terms.append(b.const(np.where(cols <= rows + shift, 0, neg).astype(wt.dtype)))
    if not terms:
        return None
    bias = terms[0]
    for t in terms[1:]:
        bias = b.add(bias, t)
    return bias


def _rounder(b: Builder, elem: ElemKind) -> Callable[[Value], Value] | None:
    """Rounding to ``elem`` and back (a Cast pair) for operands narrower than float32, None otherwise: the
    steps of the spec's function body round to the operands' type (the interpreter kernel's ``_rounder``)."""
    if elem not in (E.FLOAT16, E.BFLOAT16):
        return None
    return lambda x: b.cast(b.cast(x, elem), x.type.elem)


@lowering("Attention")
def _attention(b: Builder, node: Node) -> list[Value]:
    q, k, v = b.input(0), b.input(1), b.input(2)
    past_k, past_v = b.opt_input(4), b.opt_input(5)
    wt = _work(q.type.elem)
    q4 = b.cast(_to4d(b, q, node.attrs["q_num_heads"]), wt)
    k4 = b.cast(_to4d(b, k, node.attrs["kv_num_heads"]), wt)
    v4 = b.cast(_to4d(b, v, node.attrs["kv_num_heads"]), wt)
    if past_k is not None and past_v is not None:
        k4 = b.concat([b.cast(past_k, wt), k4], 2)
        v4 = b.concat([b.cast(past_v, wt), v4], 2)
    present_k, present_v = k4, v4
    bsz, hq, sq, _ = q4.type.shape
    group = hq // k4.type.shape[1]
    k4, v4 = _repeat_heads(b, k4, group), _repeat_heads(b, v4, group)
    total = k4.type.shape[2]
    rnd = _rounder(b, q.type.elem)
    root = float(np.sqrt(wt.dtype.type(node.attrs["scale"])))
    qk_used = bool(node.outputs[3].users) or b.fn.is_output(node.outputs[3])
    if node.attrs["softcap"] <= 0 and not qk_used and rnd is None:  # the block in one node (a backend may fuse it)
        y = b.emit1("FusedAttention", [b.mul(q4, _c(b, root, q4)),
                                       b.transpose(b.mul(k4, _c(b, root, k4)), (0, 1, 3, 2)), v4,
                                       _attention_bias(b, node, wt, bsz, sq, total)],
                    scale=1.0, scale_op="mul", masked_rows="zero")
        return _attention_results(b, node, q, y, (present_k, present_v, zeros(b, wt, b.out_type(3).shape)))
    r = rnd or (lambda x: x)
    if rnd is not None:
        root = float(np.asarray(root, wt.dtype).astype(q.type.elem.dtype))
    scores = r(matmul(b, r(b.mul(q4, _c(b, root, q4))), b.transpose(r(b.mul(k4, _c(b, root, k4))), (0, 1, 3, 2))))
    qk = [scores]
    cap = node.attrs["softcap"]
    if cap > 0:
        c = float(np.asarray(cap, np.float32).astype(q.type.elem.dtype)) if rnd is not None else cap
        scores = r(b.mul(_c(b, c, scores), r(b.unary("Tanh", r(b.div(scores, _c(b, c, scores)))))))
    qk.append(scores)
    bias = _attention_bias(b, node, wt, bsz, sq, total)
    if bias is not None:
        scores = r(b.add(scores, r(bias)))
    qk.append(scores)
    probs = masked_softmax(b, scores, rnd if node.attrs.get("softmax_narrow") else None)
    if bias is not None:  # a row whose bias masks every key gives zeros, whatever its (NaN) scores
        top = b.reduce("ReduceMax", bias, (bias.type.rank - 1,))
        dead = b.emit1("IsInf", [top], detect_positive=False, detect_negative=True)
        probs = b.where(dead, _c(b, 0.0, probs), probs)
    probs = r(probs)
    qk.append(probs)
    y = matmul(b, probs, v4)  # B, Hq, Sq, Dv
    qk_out = b.broadcast(qk[node.attrs["qk_mode"]], b.out_type(3).shape)
    return _attention_results(b, node, q, y, (present_k, present_v, qk_out))


def _attention_results(b: Builder, node: Node, q: Value, y: Value, rest: tuple[Value, ...]) -> list[Value]:
    """The four results of Attention in their kinds: y [B, Hq, Sq, Dv] (3-D when q is), then ``rest``."""
    bsz, hq, sq, dv = y.type.shape
    if q.type.rank == 3:
        y = b.reshape(b.transpose(y, (0, 2, 1, 3)), (bsz, sq, hq * dv))
    return [b.cast(a, b.out_type(i).elem) for i, a in enumerate((y, *rest))]


# -- RotaryEmbedding ---------------------------------------------------------------------------------------

@lowering("RotaryEmbedding")
def _rotary(b: Builder, node: Node) -> list[Value]:
    x, cos, sin, pos = b.input(0), b.input(1), b.input(2), b.opt_input(3)
    four_d = x.type.rank == 4
    if four_d:
        xs = b.transpose(x, (0, 2, 1, 3))  # B, S, H, D
    else:
        bs, s, hidden = x.type.shape
        heads = node.attrs["num_heads"]
        xs = b.reshape(x, (bs, s, heads, hidden // heads))
    xs = b.cast(xs, F32)
    d = xs.type.shape[-1]
    rot = node.attrs["rotary_dim"] or d
    half = rot // 2
    if pos is not None:
        cos, sin = (b.emit1("Gather", [t, pos], axis=0) for t in (cos, sin))
    bs, s = xs.type.shape[:2]
    c = b.reshape(b.cast(cos, F32), (bs, s, 1, half))
    sn = b.reshape(b.cast(sin, F32), (bs, s, 1, half))
    if node.attrs["interleaved"]:
        x1, x2 = last(b, xs, 0, half, 2), last(b, xs, 1, half, 2)
    else:
        x1, x2 = last(b, xs, 0, half), last(b, xs, half, half)
    real = b.sub(b.mul(c, x1), b.mul(sn, x2))
    imag = b.add(b.mul(sn, x1), b.mul(c, x2))
    if node.attrs["interleaved"]:
        pair = real.type.shape + (1,)
        part = b.reshape(b.concat([b.reshape(real, pair), b.reshape(imag, pair)], 4), xs.type.shape[:3] + (rot,))
    else:
        part = b.concat([real, imag], 3)
    if rot < d:
        part = b.concat([part, last(b, xs, rot, d - rot)], 3)
    res = b.transpose(part, (0, 2, 1, 3)) if four_d else b.reshape(part, x.type.shape)
    return [b.cast(res, b.out_type().elem)]


# -- recurrent layers ----------------------------------------------------------------------------------------

Act = Callable[[Builder, Value, float, float], Value]


def _softplus(b: Builder, x: Value, a: float, c: float) -> Value:
    # logaddexp(0, x) = max(x, 0) + log(1 + exp(-|x|))
    tail = b.unary("Log", b.add(_c(b, 1.0, x), b.unary("Exp", b.unary("Neg", b.unary("Abs", x)))))
    return b.add(b.maximum(x, _c(b, 0.0, x)), tail)


def _elu(b: Builder, x: Value, a: float, c: float) -> Value:
    zero = _c(b, 0.0, x)
    neg = b.mul(_c(b, a, x), expm1(b, b.minimum(x, zero)))
    return b.where(b.binary("LessOrEqual", zero, x), x, neg)


#: activation name -> lowering over (value, alpha, beta), as the kernel's table
_ACTIVATIONS: dict[str, Act] = {
    "relu": lambda b, x, a, c: b.maximum(x, _c(b, 0.0, x)),
    "tanh": lambda b, x, a, c: b.unary("Tanh", x),
    "sigmoid": lambda b, x, a, c: _sigmoid(b, x),
    "affine": lambda b, x, a, c: b.add(b.mul(_c(b, a, x), x), _c(b, c, x)),
    "leakyrelu": lambda b, x, a, c: b.where(b.binary("LessOrEqual", _c(b, 0.0, x), x), x, b.mul(_c(b, a, x), x)),
    "thresholdedrelu": lambda b, x, a, c: b.where(b.binary("Less", _c(b, a, x), x), x, _c(b, 0.0, x)),
    "scaledtanh": lambda b, x, a, c: b.mul(_c(b, a, x), b.unary("Tanh", b.mul(_c(b, c, x), x))),
    "hardsigmoid": lambda b, x, a, c: b.minimum(b.maximum(b.add(b.mul(_c(b, a, x), x), _c(b, c, x)),
                                                          _c(b, 0.0, x)), _c(b, 1.0, x)),
    "elu": _elu,
    "softsign": lambda b, x, a, c: b.div(x, b.add(_c(b, 1.0, x), b.unary("Abs", x))),
    "softplus": _softplus,
}


class _Acts:
    """The activation functions of one direction, applied after clipping."""

    def __init__(self, b: Builder, attrs: Mapping[str, Any], direction: int, per_dir: int) -> None:
        lo = direction * per_dir
        self.b = b
        self.fns = list(zip(attrs["activations"][lo:lo + per_dir], attrs["alphas"][lo:lo + per_dir],
                            attrs["betas"][lo:lo + per_dir]))
        self.clip = attrs["clip"]

    def __call__(self, i: int, x: Value, clip: bool = True) -> Value:
        b = self.b
        if clip and np.isfinite(self.clip):
            x = b.minimum(b.maximum(x, _c(b, -self.clip, x)), _c(b, self.clip, x))
        name, a, c = self.fns[i]
        return _ACTIVATIONS[name](b, x, a, c)


class _Dir:
    """Per-direction weights: W^T, R^T (split as the cell needs), biases, peepholes."""

    def __init__(self, b: Builder, node: Node, d: int, wt: ElemKind) -> None:
        w, r, bias = b.input(1), b.input(2), b.opt_input(3)
        peep = b.opt_input(7) if node.kind.name == "LSTM" else None
        hid = node.attrs["hidden_size"]
        gh = w.type.shape[1]
        self.w = b.cast(b.reshape(b.slice(w, 0, d, 1), w.type.shape[1:]), wt)  # G*H, I
        self.r = b.cast(b.reshape(b.slice(r, 0, d, 1), r.type.shape[1:]), wt)  # G*H, H
        self.wb = self.rb = None
        if bias is not None:
            bd = b.cast(b.reshape(b.slice(bias, 0, d, 1), (2 * gh,)), wt)
            self.wb, self.rb = b.slice(bd, 0, 0, gh), b.slice(bd, 0, gh, gh)
        self.p = None if peep is None else b.cast(b.reshape(b.slice(peep, 0, d, 1), (3 * hid,)), wt)

    def rt(self, b: Builder, start: int, size: int) -> Value:
        """Rows [start, start + size) of R, transposed: [H, size]."""
        return b.transpose(b.slice(self.r, 0, start, size), (1, 0))

    def rbias(self, b: Builder, x: Value, start: int, size: int) -> Value:
        return x if self.rb is None else b.add(x, b.slice(self.rb, 0, start, size))


def _cell(kind: str, b: Builder, node: Node, wd: _Dir, act: _Acts, g: Value, h: Value,
          c: Value | None) -> tuple[Value, Value | None]:
    """One step of the cell: (h_new, c_new) from the input projection ``g`` [B, G*H]."""
    hid = node.attrs["hidden_size"]
    if kind == "RNN":
        return act(0, wd.rbias(b, b.add(g, matmul(b, h, wd.rt(b, 0, hid))), 0, hid)), c
    if kind == "GRU":
        rz = wd.rbias(b, b.add(last(b, g, 0, 2 * hid), matmul(b, h, wd.rt(b, 0, 2 * hid))), 0, 2 * hid)
        z, rr = act(0, last(b, rz, 0, hid)), act(0, last(b, rz, hid, hid))
        gx = last(b, g, 2 * hid, hid)
        if node.attrs["linear_before_reset"]:
            hh = act(1, b.add(gx, b.mul(rr, wd.rbias(b, matmul(b, h, wd.rt(b, 2 * hid, hid)), 2 * hid, hid))))
        else:
            hh = act(1, wd.rbias(b, b.add(gx, matmul(b, b.mul(rr, h), wd.rt(b, 2 * hid, hid))), 2 * hid, hid))
        return b.add(b.mul(b.sub(_c(b, 1.0, z), z), hh), b.mul(z, h)), c
    assert c is not None
    pre = wd.rbias(b, b.add(g, matmul(b, h, wd.rt(b, 0, 4 * hid))), 0, 4 * hid)

    def peep(x: Value, i: int, cell: Value) -> Value:
        return x if wd.p is None else b.add(x, b.mul(b.slice(wd.p, 0, i * hid, hid), cell))

    i_g = act(0, peep(last(b, pre, 0, hid), 0, c))
    if node.attrs["input_forget"]:
        f_g = b.sub(_c(b, 1.0, i_g), i_g)
    else:
        f_g = act(0, peep(last(b, pre, 2 * hid, hid), 2, c))
    c_g = act(1, last(b, pre, 3 * hid, hid))
    c_new = b.add(b.mul(f_g, c), b.mul(i_g, c_g))
    o_g = act(0, peep(last(b, pre, hid, hid), 1, c_new))
    return b.mul(o_g, act(2, c_new, clip=False)), c_new


def _recurrent(b: Builder, node: Node) -> list[Value]:
    kind = node.kind.name
    x = b.input(0)
    lens, h0 = b.opt_input(4), b.opt_input(5)
    c0 = b.opt_input(6) if kind == "LSTM" else None
    wt = _work(x.type.elem)
    layout = node.attrs["layout"]
    xs = b.cast(b.transpose(x, (1, 0, 2)) if layout else x, wt)  # T, B, I
    seq, batch, _ = xs.type.shape
    hid = node.attrs["hidden_size"]
    dirs = b.input(1).type.shape[0]
    per_dir = {"RNN": 1, "GRU": 2, "LSTM": 3}[kind]
    lens64 = None if lens is None else b.reshape(b.cast(lens, E.INT64), (batch, 1))

    def state(v: Value | None, d: int) -> Value:
        if v is None:
            return zeros(b, wt, (batch, hid))
        s = b.slice(v, 1 if layout else 0, d, 1)
        return b.cast(b.reshape(s, (batch, hid)), wt)

    ys, hs, cs = [], [], []
    for d in range(dirs):
        reverse = node.attrs["direction"] == "reverse" or (node.attrs["direction"] == "bidirectional" and d == 1)
        act = _Acts(b, node.attrs, d, per_dir)
        wd = _Dir(b, node, d, wt)
        xw = matmul(b, xs, b.transpose(wd.w, (1, 0)))  # T, B, G*H
        if wd.wb is not None:
            xw = b.add(xw, wd.wb)
        h, c = state(h0, d), (state(c0, d) if kind == "LSTM" else None)
        out: list[Value | None] = [None] * seq
        for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
            g = b.reshape(_step(b, xw, 0, t), xw.type.shape[1:])
            h_new, c_new = _cell(kind, b, node, wd, act, g, h, c)
            if lens64 is None:
                h, c, out[t] = h_new, c_new, h_new
            else:
                active = b.binary("Less", b.scalar(t, E.INT64, 2), lens64)  # B, 1
                h = b.where(active, h_new, h)
                if c is not None and c_new is not None:
                    c = b.where(active, c_new, c)
                out[t] = b.where(active, h_new, _c(b, 0.0, h_new))
        ys.append(b.concat([b.reshape(o, (1, 1, batch, hid)) for o in out if o is not None], 0) if seq
                  else zeros(b, wt, (0, 1, batch, hid)))
        hs.append(b.reshape(h, (1, batch, hid)))
        if c is not None:
            cs.append(b.reshape(c, (1, batch, hid)))
    res = [b.concat(ys, 1), b.concat(hs, 0)] + ([b.concat(cs, 0)] if kind == "LSTM" else [])
    if layout:
        res = [b.transpose(res[0], (2, 0, 1, 3))] + [b.transpose(r, (1, 0, 2)) for r in res[1:]]
    return [b.cast(r, b.out_type(i).elem) for i, r in enumerate(res)]


lowering("RNN", "GRU", "LSTM")(_recurrent)


# -- LinearAttention / CausalConvWithState ---------------------------------------------------------------------

def _unpack(b: Builder, x: Value, heads: int) -> Value:
    """[B, T, H*D] -> [B, H, T, D] in float32."""
    bs, t, hd = x.type.shape
    return b.transpose(b.reshape(b.cast(x, F32), (bs, t, heads, hd // heads)), (0, 2, 1, 3))


def _read_out(b: Builder, q: Value, state: Value) -> Value:
    """q [B, H, 1, dk] times state [B, H, dk, dv]: each product rounded, then summed over dk (the reference's
    order: a product past the float range is an infinity, and infinities of both signs give NaN, where a
    fused multiply-add would carry the exact product into the sum)."""
    bs, h, _, dk = q.type.shape
    return b.reduce("ReduceSum", b.mul(b.reshape(q, (bs, h, dk, 1)), state), (2,), keepdims=True)


@lowering("LinearAttention")
def _linear_attention(b: Builder, node: Node) -> list[Value]:
    past, decay, beta = b.opt_input(3), b.opt_input(4), b.opt_input(5)
    hq, hk, rule = node.attrs["q_num_heads"], node.attrs["kv_num_heads"], node.attrs["update_rule"]
    qs, ks, vs = _unpack(b, b.input(0), hq), _unpack(b, b.input(1), hk), _unpack(b, b.input(2), hk)
    bs, _, t, dk = ks.type.shape
    dv = vs.type.shape[3]
    state = zeros(b, F32, (bs, hk, dk, dv)) if past is None else b.cast(past, F32)
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    g = bt = None
    if gated and decay is not None:
        if decay.type.shape[2] == hk * dk:
            g = _unpack(b, decay, hk)  # B, H, T, dk
        else:
            g = b.reshape(b.transpose(b.cast(decay, F32), (0, 2, 1)), (bs, hk, t, 1))
    if delta and beta is not None:
        bt = b.transpose(b.cast(beta, F32), (0, 2, 1))  # B, H|1, T
    group = hq // hk
    scale = b.scalar(node.attrs["scale"], F32, 4)
    ys = []
    for i in range(t):
        kt, vt = _step(b, ks, 2, i), _step(b, vs, 2, i)  # B, Hkv, 1, d
        if g is not None:
            gi = _step(b, g, 2, i)
            state = b.mul(b.reshape(b.unary("Exp", gi), (bs, hk, gi.type.shape[3], 1)), state)
        if bt is not None:
            recalled = matmul(b, kt, state)  # B, Hkv, 1, dv
            bi = _step(b, bt, 2, i)
            update = b.mul(b.sub(vt, recalled), b.reshape(bi, bi.type.shape[:2] + (1, 1)))
        else:
            update = vt
        state = b.add(state, b.mul(b.reshape(kt, (bs, hk, dk, 1)), update))
        ys.append(b.mul(scale, _read_out(b, _step(b, qs, 2, i), _repeat_heads(b, state, group))))
    y = b.concat(ys, 2) if ys else zeros(b, F32, (bs, hq, 0, dv))
    res = b.reshape(b.transpose(y, (0, 2, 1, 3)), (bs, t, hq * dv))
    return [b.cast(res, b.out_type(0).elem), b.cast(state, b.out_type(1).elem)]


@lowering("CausalConvWithState")
def _causal_conv(b: Builder, node: Node) -> list[Value]:
    x, w, bias, past = b.input(0), b.input(1), b.opt_input(2), b.opt_input(3)
    bs, c = x.type.shape[:2]
    k = w.type.shape[2]
    xf = b.cast(x, F32)
    if k > 1:
        head = zeros(b, F32, (bs, c, k - 1)) if past is None else b.cast(past, F32)
        full = b.concat([head, xf], 2)  # B, C, L + k - 1
    else:
        full = xf
    bias_f = None if bias is None else b.cast(bias, F32)
    y = b.emit1("Conv", [full, b.cast(w, F32), bias_f], strides=(1,), pads=(0, 0), dilations=(1,), group=c)
    if node.attrs["activation"] == "silu":
        y = b.mul(y, _sigmoid(b, y))
    state = b.slice(full, 2, full.type.shape[2] - (k - 1), k - 1)
    return [b.cast(y, b.out_type(0).elem), b.cast(state, b.out_type(1).elem)]
