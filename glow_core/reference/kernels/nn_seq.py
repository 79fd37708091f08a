"""Sequence-model kernels: attention, rotary embedding, recurrent layers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from glow_core.ir.types import TensorType
from glow_core.reference.kernels import KERNELS
from glow_core.reference.kernels.nn import conv_nd

Attrs = Mapping[str, Any]
Types = Sequence[TensorType]


def _work_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def _to4d(x: np.ndarray, heads: int) -> np.ndarray:
    """[batch, seq, heads*size] -> [batch, heads, seq, size]; 4-D operands pass through."""
    if x.ndim == 4:
        return x
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def masked_softmax(scores: np.ndarray, rnd: Any = None) -> np.ndarray:
    """Softmax over the last axis; a row whose every score is -inf gives zeros (not NaN). ``rnd``: rounding
    after each step (the difference, the exponential, the sum, the quotient)."""
    r = rnd or (lambda a: a)
    top = scores.max(axis=-1, keepdims=True)
    dead = np.isneginf(top)
    e = r(np.exp(r(scores - np.where(dead, 0, top))))
    total = r(e.sum(axis=-1, keepdims=True))
    return np.where(dead, 0, r(e / np.where(dead, 1, total)))


def _rounder(elem: np.dtype, wt: np.dtype) -> Any:
    """Rounding to ``elem`` and back, for operands narrower than float32 (identity otherwise): the spec's
    function body computes each of its steps (the scaled Q and K, their product, the softcap, the masked
    scores, the softmax, the product with V) in the operands' type, so a float16 attention rounds there; the
    softmax rounds each of its own steps too (``softmax_narrow``) unless ``softmax_precision`` asks for float32
    or wider."""
    if np.dtype(elem).itemsize >= 4:
        return lambda a: a
    return lambda a: np.asarray(a).astype(elem).astype(wt)


@KERNELS.register("Attention")
def _attention(attrs: Attrs, out: Types, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None,
               past_k: np.ndarray | None, past_v: np.ndarray | None,
               nonpad: np.ndarray | None) -> tuple[np.ndarray, ...]:
    wt = _work_dtype(q.dtype)
    q4 = _to4d(q, attrs["q_num_heads"]).astype(wt)
    k4 = _to4d(k, attrs["kv_num_heads"]).astype(wt)
    v4 = _to4d(v, attrs["kv_num_heads"]).astype(wt)
    if past_k is not None and past_v is not None:
        k4 = np.concatenate([past_k.astype(wt), k4], axis=2)
        v4 = np.concatenate([past_v.astype(wt), v4], axis=2)
    present_k, present_v = k4, v4
    b, hq, sq, _ = q4.shape
    group = hq // k4.shape[1]
    if group > 1:
        k4 = np.repeat(k4, group, axis=1)
        v4 = np.repeat(v4, group, axis=1)
    total = k4.shape[2]
    rnd = _rounder(q.dtype, wt)
    root = rnd(np.sqrt(wt.type(attrs["scale"])))
    scores = rnd(np.matmul(rnd(q4 * root), np.swapaxes(rnd(k4 * root), -1, -2)))  # B, Hq, Sq, total
    qk = [scores]
    if attrs["softcap"] > 0:
        cap = rnd(wt.type(attrs["softcap"]))
        scores = rnd(cap * rnd(np.tanh(rnd(scores / cap))))
    qk.append(scores)
    bias = np.zeros((1, 1, 1, total), dtype=wt)
    if mask is not None:
        m = np.where(mask, wt.type(0), wt.type(-np.inf)) if mask.dtype == np.bool_ else mask.astype(wt)
        if m.shape[-1] < total:  # (opset 24) a short mask is padded with -inf
            pad = np.full(m.shape[:-1] + (total - m.shape[-1],), -np.inf, dtype=wt)
            m = np.concatenate([m, pad], axis=-1)
        bias = bias + m.reshape((1,) * (4 - m.ndim) + m.shape)
    if nonpad is not None:
        keys = np.arange(total)
        padded = keys[None, :] >= nonpad[:, None]  # B, total
        bias = bias + np.where(padded, -np.inf, 0).astype(wt)[:, None, None, :]
    if attrs["is_causal"]:
        if nonpad is not None:
            offset = (nonpad - sq).reshape(b, 1, 1, 1)
        else:
            offset = np.full((1, 1, 1, 1), total - k.shape[-2] if k.ndim == 4 else total - k.shape[1])
        rows = np.arange(sq).reshape(1, 1, sq, 1)
        cols = np.arange(total).reshape(1, 1, 1, total)
        bias = bias + np.where(cols <= rows + offset, 0, -np.inf).astype(wt)
    scores = rnd(scores + rnd(bias))
    qk.append(scores)
    # a query row whose bias masks every key gives zeros, decided on the bias, not on the scores
    # (a NaN score of a masked key would make the row NaN): the ONNX reference's guard
    soft = masked_softmax(scores, rnd if attrs.get("softmax_narrow") else None)
    probs = rnd(np.where(np.isneginf(bias.max(axis=-1, keepdims=True)), wt.type(0), soft))
    qk.append(probs)
    y = np.matmul(probs, v4)  # B, Hq, Sq, Dv
    if q.ndim == 3:
        y = y.transpose(0, 2, 1, 3).reshape(b, sq, -1)
    qk_out = np.broadcast_to(qk[attrs["qk_mode"]], out[3].shape)
    return tuple(a.astype(t.dtype) for a, t in zip((y, present_k, present_v, qk_out), out))


@KERNELS.register("RotaryEmbedding")
def _rotary(attrs: Attrs, out: Types, x: np.ndarray, cos: np.ndarray, sin: np.ndarray,
            pos: np.ndarray | None) -> np.ndarray:
    wt = np.dtype(np.float32)
    four_d = x.ndim == 4
    if four_d:
        xs = x.transpose(0, 2, 1, 3)  # B, S, H, D
    else:
        b, s, hidden = x.shape
        xs = x.reshape(b, s, attrs["num_heads"], hidden // attrs["num_heads"])
    xs = xs.astype(wt)
    d = xs.shape[-1]
    rot = attrs["rotary_dim"] or d
    if pos is not None:
        if pos.size and (pos.min() < 0 or pos.max() >= cos.shape[0]):
            raise ValueError(f"position ids must lie in [0, {cos.shape[0]}), got [{pos.min()}, {pos.max()}]")
        cos, sin = cos[pos], sin[pos]
    c = cos.astype(wt)[:, :, None, :]
    s_ = sin.astype(wt)[:, :, None, :]
    part = xs[..., :rot]
    if attrs["interleaved"]:
        x1, x2 = part[..., 0::2], part[..., 1::2]
    else:
        x1, x2 = part[..., : rot // 2], part[..., rot // 2:]
    real = c * x1 - s_ * x2
    imag = s_ * x1 + c * x2
    res = xs.copy()
    if attrs["interleaved"]:
        res[..., 0:rot:2] = real
        res[..., 1:rot:2] = imag
    else:
        res[..., : rot // 2] = real
        res[..., rot // 2: rot] = imag
    res = res.transpose(0, 2, 1, 3) if four_d else res.reshape(x.shape)
    return np.ascontiguousarray(res).astype(out[0].dtype)


# -- recurrent layers ----------------------------------------------------------------------------

def _sigmoid(x: np.ndarray, a: float, b: float) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1)  # overflow-free logistic


_ACTIVATIONS: dict[str, Any] = {
    "relu": lambda x, a, b: np.maximum(x, 0),
    "tanh": lambda x, a, b: np.tanh(x),
    "sigmoid": _sigmoid,
    "affine": lambda x, a, b: a * x + b,
    "leakyrelu": lambda x, a, b: np.where(x >= 0, x, a * x),
    "thresholdedrelu": lambda x, a, b: np.where(x > a, x, 0),
    "scaledtanh": lambda x, a, b: a * np.tanh(b * x),
    "hardsigmoid": lambda x, a, b: np.clip(a * x + b, 0, 1),
    "elu": lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0))),
    "softsign": lambda x, a, b: x / (1 + np.abs(x)),
    "softplus": lambda x, a, b: np.logaddexp(0, x),
}


class _Acts:
    """The activation functions of one direction, applied after clipping."""

    def __init__(self, attrs: Attrs, direction: int, per_dir: int, dtype: np.dtype) -> None:
        lo = direction * per_dir
        self.fns = [(_ACTIVATIONS[n], dtype.type(a), dtype.type(b)) for n, a, b in
                    zip(attrs["activations"][lo:lo + per_dir], attrs["alphas"][lo:lo + per_dir],
                        attrs["betas"][lo:lo + per_dir])]
        self.clip = attrs["clip"]

    def __call__(self, i: int, x: np.ndarray, clip: bool = True) -> np.ndarray:
        if clip and np.isfinite(self.clip):
            x = np.clip(x, -self.clip, self.clip)
        fn, a, b = self.fns[i]
        return fn(x, a, b)


def _recurrent(kind: str, attrs: Attrs, out: Types, x: np.ndarray, w: np.ndarray, r: np.ndarray,
               bias: np.ndarray | None, lens: np.ndarray | None, h0: np.ndarray | None,
               c0: np.ndarray | None = None, peep: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    wt = _work_dtype(x.dtype)
    layout = attrs["layout"]
    xs = (x.transpose(1, 0, 2) if layout else x).astype(wt)  # T, B, I
    seq, batch, _ = xs.shape
    hid = attrs["hidden_size"]
    dirs = w.shape[0]
    gates = w.shape[1] // hid
    per_dir = {"RNN": 1, "GRU": 2, "LSTM": 3}[kind]
    lens_ = np.full(batch, seq) if lens is None else lens.astype(np.int64)

    def state(v: np.ndarray | None) -> np.ndarray:
        if v is None:
            return np.zeros((dirs, batch, hid), wt)
        return (v.transpose(1, 0, 2) if layout else v).astype(wt)

    hs, cs = state(h0), state(c0)
    y = np.zeros((seq, dirs, batch, hid), wt)
    h_last = np.zeros((dirs, batch, hid), wt)
    c_last = np.zeros((dirs, batch, hid), wt)
    for d in range(dirs):
        reverse = attrs["direction"] == "reverse" or (attrs["direction"] == "bidirectional" and d == 1)
        act = _Acts(attrs, d, per_dir, wt)
        wd, rd = w[d].astype(wt), r[d].astype(wt)
        b = np.zeros(2 * gates * hid, wt) if bias is None else bias[d].astype(wt)
        wb, rb = b[: gates * hid], b[gates * hid:]
        xw = np.matmul(xs, wd.T) + wb  # T, B, G*H
        h, c = hs[d], cs[d]
        p = np.zeros(3 * hid, wt) if peep is None else peep[d].astype(wt)
        for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
            active = (t < lens_)[:, None]
            g = xw[t]
            if kind == "RNN":
                h_new = act(0, g + h @ rd.T + rb)
                c_new = c
            elif kind == "GRU":
                rz = g[:, : 2 * hid] + h @ rd[: 2 * hid].T + rb[: 2 * hid]
                z = act(0, rz[:, :hid])
                rr = act(0, rz[:, hid:])
                if attrs["linear_before_reset"]:
                    hh = act(1, g[:, 2 * hid:] + rr * (h @ rd[2 * hid:].T + rb[2 * hid:]))
                else:
                    hh = act(1, g[:, 2 * hid:] + (rr * h) @ rd[2 * hid:].T + rb[2 * hid:])
                h_new = (1 - z) * hh + z * h
                c_new = c
            else:
                pre = g + h @ rd.T + rb
                i_g = act(0, pre[:, :hid] + p[:hid] * c)
                if attrs["input_forget"]:
                    f_g = 1 - i_g
                else:
                    f_g = act(0, pre[:, 2 * hid: 3 * hid] + p[2 * hid:] * c)
                c_g = act(1, pre[:, 3 * hid:])
                c_new = f_g * c + i_g * c_g
                o_g = act(0, pre[:, hid: 2 * hid] + p[hid: 2 * hid] * c_new)
                h_new = o_g * act(2, c_new, clip=False)
            h = np.where(active, h_new, h)
            c = np.where(active, c_new, c)
            y[t, d] = np.where(active, h_new, 0)
        h_last[d], c_last[d] = h, c
    if layout:
        res = [y.transpose(2, 0, 1, 3), h_last.transpose(1, 0, 2), c_last.transpose(1, 0, 2)]
    else:
        res = [y, h_last, c_last]
    return tuple(a.astype(t.dtype) for a, t in zip(res, out))


@KERNELS.register("RNN")
def _rnn(attrs: Attrs, out: Types, *args: np.ndarray | None) -> tuple[np.ndarray, ...]:
    return _recurrent("RNN", attrs, out, *args)  # type: ignore[arg-type]


@KERNELS.register("GRU")
def _gru(attrs: Attrs, out: Types, *args: np.ndarray | None) -> tuple[np.ndarray, ...]:
    return _recurrent("GRU", attrs, out, *args)  # type: ignore[arg-type]


@KERNELS.register("LSTM")
def _lstm(attrs: Attrs, out: Types, *args: np.ndarray | None) -> tuple[np.ndarray, ...]:
    return _recurrent("LSTM", attrs, out, *args)  # type: ignore[arg-type]


# -- linear attention and causal convolution ------------------------------------------------------------

def _unpack(x: np.ndarray, heads: int) -> np.ndarray:
    """[B, T, H*D] -> [B, H, T, D] in float32."""
    b, t, hd = x.shape
    return x.astype(np.float32).reshape(b, t, heads, hd // heads).transpose(0, 2, 1, 3)


@KERNELS.register("LinearAttention")
def _linear_attention(attrs: Attrs, out: Types, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                      past: np.ndarray | None, decay: np.ndarray | None,
                      beta: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    hq, hk, rule = attrs["q_num_heads"], attrs["kv_num_heads"], attrs["update_rule"]
    qs, ks, vs = _unpack(q, hq), _unpack(k, hk), _unpack(v, hk)  # B, H, T, D
    b, _, t, dk = ks.shape
    dv = vs.shape[3]
    state = np.zeros((b, hk, dk, dv), np.float32) if past is None else past.astype(np.float32)
    if decay is not None:
        per_dim = decay.shape[2] == hk * dk
        g = _unpack(decay, hk) if per_dim else decay.astype(np.float32).transpose(0, 2, 1)[..., None]  # B,H,T,dk|1
    if beta is not None:
        bt = beta.astype(np.float32).transpose(0, 2, 1)  # B, H|1, T
    group = hq // hk
    scale = np.float32(attrs["scale"])
    y = np.zeros((b, hq, t, dv), np.float32)
    for i in range(t):
        kt, vt = ks[:, :, i, :], vs[:, :, i, :]  # B, Hkv, d
        if rule in ("gated", "gated_delta"):
            state = np.exp(g[:, :, i, :])[..., None] * state
        if rule in ("delta", "gated_delta"):
            recalled = np.einsum("bhkv,bhk->bhv", state, kt)
            update = (vt - recalled) * bt[:, :, i][..., None]
        else:
            update = vt
        state = state + kt[..., None] * update[:, :, None, :]
        shared = np.repeat(state, group, axis=1) if group > 1 else state  # B, Hq, dk, dv
        y[:, :, i, :] = scale * np.einsum("bhk,bhkv->bhv", qs[:, :, i, :], shared)
    res = y.transpose(0, 2, 1, 3).reshape(b, t, hq * dv)
    return res.astype(out[0].dtype), state.astype(out[1].dtype)


@KERNELS.register("CausalConvWithState")
def _causal_conv(attrs: Attrs, out: Types, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None,
                 past: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    b, c, length = x.shape
    k = w.shape[2]
    head = np.zeros((b, c, k - 1), np.float32) if past is None else past.astype(np.float32)
    full = np.concatenate([head, x.astype(np.float32)], axis=2)  # B, C, L + k - 1
    wf = w.astype(np.float32)[:, 0, :]  # C, k
    # the depthwise Conv the lowering emits and the reference runs: its products are summed the way a
    # matrix product sums them (a sum of separately rounded products makes inf - inf = NaN where it gives +-inf)
    y = conv_nd(full, w.astype(np.float32), (1,), (0, 0), (1,), c, (length,))
    if bias is not None:
        y += bias.astype(np.float32)[None, :, None]
    if attrs["activation"] == "silu":
        y = y * (0.5 * (np.tanh(0.5 * y) + 1))
    state = full[:, :, full.shape[2] - (k - 1):]
    return y.astype(out[0].dtype), np.ascontiguousarray(state).astype(out[1].dtype)
