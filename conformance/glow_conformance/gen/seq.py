"""Generators of the sequence kinds: recurrent layers, attention, rotary embedding, causal convolution."""

from __future__ import annotations

import numpy as np

from glow_conformance.gen import Build, Variant, generator
from glow_conformance.gen.common import BF16, F16, F32, FLOATS, arr
from glow_core.ir.types import ElemKind

E = ElemKind

#: activations per direction of each cell kind
_ACTS = {"RNN": ["tanh"], "GRU": ["sigmoid", "tanh"], "LSTM": ["sigmoid", "tanh", "tanh"]}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _recurrent(kind: str, elem: ElemKind, direction: str, layout: int, full: bool, **extra: object) -> Build:
    def build(rng: np.random.Generator) -> Variant:
        seq, batch, inp, h = 4, 3, 5, 3
        dirs = 2 if direction == "bidirectional" else 1
        g = _GATES[kind]
        x = arr(elem, (batch, seq, inp) if layout else (seq, batch, inp), rng, "small")
        w = (rng.standard_normal((dirs, g * h, inp)) * 0.4).astype(elem.dtype)
        r = (rng.standard_normal((dirs, g * h, h)) * 0.4).astype(elem.dtype)
        ops: list[np.ndarray | None] = [x, w, r]
        if full:
            state = (batch, dirs, h) if layout else (dirs, batch, h)
            ops += [(rng.standard_normal((dirs, 2 * g * h)) * 0.2).astype(elem.dtype),
                    np.array([4, 2, 3], dtype=np.int32), arr(elem, state, rng, "unit")]
            if kind == "LSTM":
                ops += [arr(elem, state, rng, "unit"), (rng.standard_normal((dirs, 3 * h)) * 0.2).astype(elem.dtype)]
        acts = _ACTS[kind] * dirs
        attrs = {"hidden_size": h, "direction": direction, "activations": acts, "alphas": [0.0] * len(acts),
                 "betas": [0.0] * len(acts), "layout": layout, **extra}
        return Variant(ops, attrs)

    return build


@generator("RNN", "GRU", "LSTM", elems=FLOATS)
def _recurrent_variants(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    out = {"forward": _recurrent(kind, elem, "forward", 0, False),
           "reverse-full": _recurrent(kind, elem, "reverse", 0, True),
           "bidirectional-batch-first": _recurrent(kind, elem, "bidirectional", 1, True),
           "clipped": _recurrent(kind, elem, "forward", 0, True, clip=0.5)}
    if kind == "GRU":
        out["linear-before-reset"] = _recurrent(kind, elem, "forward", 0, True, linear_before_reset=True)
    return out


@generator("Attention", elems=FLOATS)
def _attention(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(mask: bool, past: bool, causal: bool, three_d: bool, softcap: float = 0.0) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            bsz, hq, hk, sq, skv, d = 2, 4, 2, 3, 5, 4
            if three_d:
                q, k, v = (arr(elem, (bsz, sq, hq * d), rng), arr(elem, (bsz, skv, hk * d), rng),
                           arr(elem, (bsz, skv, hk * d), rng))
            else:
                q, k, v = (arr(elem, (bsz, hq, sq, d), rng), arr(elem, (bsz, hk, skv, d), rng),
                           arr(elem, (bsz, hk, skv, d), rng))
            total = skv + (2 if past else 0)
            m = (rng.random((sq, total)) < 0.8) if mask else None
            pk = arr(elem, (bsz, hk, 2, d), rng) if past else None
            pv = arr(elem, (bsz, hk, 2, d), rng) if past else None
            attrs = {"scale": 1.0 / np.sqrt(d), "is_causal": causal, "softcap": softcap,
                     "q_num_heads": hq if three_d else 0, "kv_num_heads": hk if three_d else 0}
            return Variant([q, k, v, m, pk, pv], attrs)

        return b

    return {"basic": build(False, False, False, False), "masked-cache": build(True, True, False, False),
            "causal-3d": build(False, False, True, True), "softcap": build(False, False, False, False, 5.0)}


@generator("RotaryEmbedding", elems=FLOATS)
def _rotary(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(interleaved: bool, with_pos: bool, rotary_dim: int) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            bsz, heads, s, d = 2, 2, 3, 8
            rot = rotary_dim or d
            x = arr(elem, (bsz, heads, s, d), rng)
            angles = rng.uniform(0, 6.3, ((10,) if with_pos else (bsz, s)) + (rot // 2,))
            pos = rng.integers(0, 10, (bsz, s)).astype(np.int64) if with_pos else None
            return Variant([x, np.cos(angles).astype(elem.dtype), np.sin(angles).astype(elem.dtype), pos],
                           {"interleaved": interleaved, "rotary_dim": rotary_dim})

        return b

    return {"halves": build(False, False, 0), "interleaved-positions": build(True, True, 0),
            "partial": build(False, True, 4)}


@generator("LinearAttention", elems=frozenset({F32, F16, BF16}))
def _linear_attention(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(rule: str, past: bool) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            bsz, t, hq, hk, dk, dv = 2, 3, 2, 1, 4, 3
            q = arr(elem, (bsz, t, hq * dk), rng, "unit")
            k = arr(elem, (bsz, t, hk * dk), rng, "unit")
            v = arr(elem, (bsz, t, hk * dv), rng, "unit")
            state = arr(elem, (bsz, hk, dk, dv), rng, "unit") if past else None
            decay = (-rng.uniform(0.01, 0.5, (bsz, t, hk))).astype(elem.dtype) if "gated" in rule else None
            beta = rng.uniform(0.1, 0.9, (bsz, t, hk)).astype(elem.dtype) if "delta" in rule else None
            return Variant([q, k, v, state, decay, beta],
                           {"q_num_heads": hq, "kv_num_heads": hk, "scale": 0.5, "update_rule": rule})

        return b

    return {"linear": build("linear", False), "gated-past": build("gated", True), "delta": build("delta", False),
            "gated-delta-past": build("gated_delta", True)}


@generator("CausalConvWithState", elems=frozenset({F32, F16, BF16}))
def _causal_conv(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(full: bool, activation: str) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            x = arr(elem, (2, 3, 5), rng)
            w = arr(elem, (3, 1, 4), rng, "small")
            bias = arr(elem, (3,), rng) if full else None
            past = arr(elem, (2, 3, 3), rng) if full else None
            return Variant([x, w, bias, past], {"activation": activation})

        return b

    return {"basic": build(False, "none"), "state-silu": build(True, "silu")}


# -- the fused transformer blocks -------------------------------------------------------------------------

def _layernorm(elem: ElemKind, shape: tuple[int, ...], param: tuple[int, ...], bias: bool, eps: float) -> Build:
    def build(rng: np.random.Generator) -> Variant:
        ops: list[np.ndarray | None] = [arr(elem, shape, rng), arr(elem, param, rng),
                                        arr(elem, param, rng) if bias else None]
        return Variant(ops, {"epsilon": eps})

    return build


@generator("FusedLayerNorm", elems=FLOATS)
def _fused_layernorm(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"odd-rows": _layernorm(elem, (3, 5, 37), (37,), True, 1e-5),
            "no-bias": _layernorm(elem, (4, 19), (1, 19), False, 1e-3),
            "one-value-params": _layernorm(elem, (2, 3, 2, 8), (1,), True, 0.0)}


def _attention_block(elem: ElemKind, dims: tuple[int, ...], mask: tuple[int, ...] | None, scale_op: str,
                     dead_rows: bool = False, masked_rows: str = "nan") -> Build:
    def build(rng: np.random.Generator) -> Variant:
        *lead, m, n, d, dv = dims
        q, kt = arr(elem, (*lead, m, d), rng, "small"), arr(elem, (*lead, d, n), rng, "small")
        ops: list[np.ndarray | None] = [q, kt, arr(elem, (*lead, n, dv), rng, "small"), None]
        if mask is not None:
            mk = np.where(rng.random(mask) < 0.3, -np.inf, 0.0)
            mk[..., 0] = 0.0
            if dead_rows:  # every key of these rows masked: the rows are NaN, as Softmax gives
                mk[..., ::2, :] = -np.inf
            ops[3] = mk.astype(elem.dtype)
        return Variant(ops, {"scale": 2.0 if scale_op == "div" else 0.5, "scale_op": scale_op,
                             "masked_rows": masked_rows})

    return build


@generator("FusedAttention", elems=FLOATS)
def _fused_attention(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"heads-key-mask": _attention_block(elem, (2, 3, 5, 7, 4, 6), (2, 1, 1, 7), "div"),
            "full-mask": _attention_block(elem, (1, 2, 6, 9, 3, 5), (1, 2, 6, 9), "mul"),
            "dead-rows": _attention_block(elem, (2, 4, 11, 3, 2), (2, 4, 11), "div", dead_rows=True),
            "dead-rows-zero": _attention_block(elem, (2, 3, 4, 9, 5, 4), (1, 3, 4, 9), "mul", dead_rows=True,
                                               masked_rows="zero"),
            "no-mask": _attention_block(elem, (3, 4, 10, 8, 8), None, "mul")}
