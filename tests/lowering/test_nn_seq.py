"""Lowering of the sequence-model kinds: primitives-only interpreter vs interpreter.

Attention (GQA, 3-D operands, KV cache, masks, key padding, causal, softcap,
every QK mode), RotaryEmbedding, RNN / GRU / LSTM (unrolled; every activation,
directions, layouts, sequence lengths, clipping, peepholes),
LinearAttention (every update rule) and CausalConvWithState.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from glow_core.ir.kinds import get_kind
from tests.lowering.test_reduce import BF16, F16, F32, F64, I32, check_lowering, rand

FLOATS = [F32, F16, BF16, F64]
HALF = [F32, F16, BF16]


def check(kind: str, operands: list[np.ndarray | None], attrs: dict[str, Any]) -> list[np.ndarray]:
    """check_lowering with the omitted trailing operands passed as None."""
    n = len(get_kind(kind).inputs)
    return check_lowering(kind, list(operands) + [None] * (n - len(operands)), attrs)


# -- Attention -------------------------------------------------------------------------------------------

def _attn_attrs(**kw: Any) -> dict[str, Any]:
    return {"scale": 0.35, **kw}


@pytest.mark.parametrize("qk_mode", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_attention_4d(dtype: np.dtype, qk_mode: int) -> None:
    b, hq, hk, sq, skv, d, dv = 2, 4, 2, 3, 5, 4, 3
    q, k, v = rand((b, hq, sq, d), dtype, seed=1), rand((b, hk, skv, d), dtype, seed=2), rand((b, hk, skv, dv), dtype, 3)
    for softcap in (0.0, 2.0):
        for causal in (False, True):
            attrs = _attn_attrs(softcap=softcap, is_causal=causal, qk_mode=qk_mode)
            check("Attention", [q, k, v], attrs)


@pytest.mark.parametrize("dtype", HALF + [F64], ids=str)
def test_attention_masks(dtype: np.dtype) -> None:
    b, h, sq, skv, d = 2, 2, 3, 4, 4
    q, k, v = rand((b, h, sq, d), dtype, seed=1), rand((b, h, skv, d), dtype, seed=2), rand((b, h, skv, d), dtype, 3)
    bool_mask = rand((sq, skv), F32, seed=4) > -1
    bool_mask[1, :] = False  # a fully masked query row gives zeros
    float_mask = rand((b, 1, sq, skv), dtype, -1, 1, seed=5)
    float_mask[0, 0, 2, 1] = -np.inf
    for mask in (bool_mask, float_mask, float_mask[0], bool_mask[0]):
        for causal in (False, True):
            check("Attention", [q, k, v, mask], _attn_attrs(is_causal=causal, qk_mode=2))
    short = rand((b, h, sq, skv - 2), dtype, seed=6)  # padded with -inf when pad_mask
    check("Attention", [q, k, v, short], _attn_attrs(pad_mask=True, qk_mode=3))


@pytest.mark.parametrize("dtype", [F32, F16], ids=str)
def test_attention_kv_cache_and_3d(dtype: np.dtype) -> None:
    b, hq, hk, sq, skv, past, d = 2, 4, 1, 2, 3, 4, 4
    q3 = rand((b, sq, hq * d), dtype, seed=1)
    k3, v3 = rand((b, skv, hk * d), dtype, seed=2), rand((b, skv, hk * d), dtype, seed=3)
    pk, pv = rand((b, hk, past, d), dtype, seed=4), rand((b, hk, past, d), dtype, seed=5)
    attrs = _attn_attrs(q_num_heads=hq, kv_num_heads=hk)
    for causal in (False, True):
        check("Attention", [q3, k3, v3, None, pk, pv], {**attrs, "is_causal": causal, "qk_mode": 1})
        mask = rand((sq, past + skv), dtype, seed=6)
        check("Attention", [q3, k3, v3, mask, pk, pv], {**attrs, "is_causal": causal})


@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=str)
def test_attention_nonpad_kv_seqlen(dtype: np.dtype) -> None:
    b, h, sq, skv, d = 3, 2, 2, 5, 4
    q, k, v = rand((b, h, sq, d), dtype, seed=1), rand((b, h, skv, d), dtype, seed=2), rand((b, h, skv, d), dtype, 3)
    lens = np.array([5, 2, 0], np.int64)  # the last batch entry has no valid key: zeros
    for causal in (False, True):
        check("Attention", [q, k, v, None, None, None, lens], _attn_attrs(is_causal=causal, qk_mode=2))
        mask = rand((b, 1, sq, skv), dtype, seed=4) > 0
        check("Attention", [q, k, v, mask, None, None, lens], _attn_attrs(is_causal=causal))


# -- RotaryEmbedding ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_rotary(dtype: np.dtype, interleaved: bool) -> None:
    b, h, s, d = 2, 3, 4, 8
    for rot in (0, 4, 8):
        half = (rot or d) // 2
        attrs = {"interleaved": interleaved, "rotary_dim": rot}
        x4 = rand((b, h, s, d), dtype, seed=1)
        cos, sin = rand((b, s, half), dtype, -1, 1, 2), rand((b, s, half), dtype, -1, 1, 3)
        check("RotaryEmbedding", [x4, cos, sin, None], attrs)
        x3 = rand((b, s, h * d), dtype, seed=4)
        check("RotaryEmbedding", [x3, cos, sin, None], {**attrs, "num_heads": h})
        table_c, table_s = rand((10, half), dtype, -1, 1, 5), rand((10, half), dtype, -1, 1, 6)
        pos = np.array([[0, 3, 9, 2], [1, 1, 4, 8]], np.int64)
        check("RotaryEmbedding", [x4, table_c, table_s, pos], attrs)
        check("RotaryEmbedding", [x3, table_c, table_s, pos], {**attrs, "num_heads": h})


# -- RNN / GRU / LSTM ------------------------------------------------------------------------------------------

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
PER_DIR = {"RNN": 1, "GRU": 2, "LSTM": 3}
DEFAULT_ACTS = {"RNN": ["tanh"], "GRU": ["sigmoid", "tanh"], "LSTM": ["sigmoid", "tanh", "tanh"]}
ALL_ACTS = [("relu", 0, 0), ("tanh", 0, 0), ("sigmoid", 0, 0), ("affine", 0.7, 0.2), ("leakyrelu", 0.1, 0),
            ("thresholdedrelu", 0.3, 0), ("scaledtanh", 1.2, 0.8), ("hardsigmoid", 0.3, 0.4), ("elu", 0.9, 0),
            ("softsign", 0, 0), ("softplus", 0, 0)]


def _recurrent_case(kind: str, dtype: np.dtype, direction: str = "forward", layout: int = 0,
                    lens: bool = False, init: bool = True, bias: bool = True, peep: bool = False,
                    acts: list[tuple[str, float, float]] | None = None, clip: float = float("inf"),
                    **extra: Any) -> tuple[list[np.ndarray | None], dict[str, Any]]:
    seq, batch, inp, hid = 4, 3, 5, 3
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[kind]
    x = rand((batch, seq, inp) if layout else (seq, batch, inp), dtype, seed=1)
    w, r = rand((dirs, g * hid, inp), dtype, -0.7, 0.7, 2), rand((dirs, g * hid, hid), dtype, -0.7, 0.7, 3)
    state = (batch, dirs, hid) if layout else (dirs, batch, hid)
    ops: list[np.ndarray | None] = [
        x, w, r,
        rand((dirs, 2 * g * hid), dtype, -0.5, 0.5, 4) if bias else None,
        np.array([4, 1, 2], np.int32) if lens else None,
        rand(state, dtype, seed=5) if init else None]
    if kind == "LSTM":
        ops += [rand(state, dtype, seed=6) if init else None, rand((dirs, 3 * hid), dtype, seed=7) if peep else None]
    chosen = acts or [(n, 0.0, 0.0) for n in DEFAULT_ACTS[kind]]
    chosen = (chosen * PER_DIR[kind])[:PER_DIR[kind]] * dirs
    attrs = {"hidden_size": hid, "direction": direction, "layout": layout, "clip": clip,
             "activations": [a[0] for a in chosen], "alphas": [a[1] for a in chosen],
             "betas": [a[2] for a in chosen], **extra}
    return ops, attrs


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_recurrent_variants(kind: str, dtype: np.dtype) -> None:
    for direction in ("forward", "reverse", "bidirectional"):
        for layout in (0, 1):
            for lens in (False, True):
                ops, attrs = _recurrent_case(kind, dtype, direction, layout, lens)
                check_lowering(kind, ops, attrs)
    ops, attrs = _recurrent_case(kind, dtype, "bidirectional", init=False, bias=False, clip=0.8)
    check_lowering(kind, ops, attrs)


@pytest.mark.parametrize("act", ALL_ACTS, ids=lambda a: a[0])
@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
def test_recurrent_activations(kind: str, act: tuple[str, float, float]) -> None:
    acts = [act, ("tanh", 0, 0), ("sigmoid", 0, 0)]
    ops, attrs = _recurrent_case(kind, F32, "bidirectional", lens=True, acts=acts)
    check_lowering(kind, ops, attrs)


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_gru_linear_before_reset(dtype: np.dtype) -> None:
    for lbr in (False, True):
        ops, attrs = _recurrent_case("GRU", dtype, "bidirectional", lens=True, linear_before_reset=lbr)
        check("GRU", ops, attrs)


@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=str)
def test_lstm_peepholes_and_input_forget(dtype: np.dtype) -> None:
    for peep in (False, True):
        for coupled in (False, True):
            ops, attrs = _recurrent_case("LSTM", dtype, "bidirectional", lens=True, peep=peep, input_forget=coupled,
                                         clip=1.5)
            check("LSTM", ops, attrs)


# -- LinearAttention / CausalConvWithState -------------------------------------------------------------------

@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_linear_attention(dtype: np.dtype, rule: str) -> None:
    b, t, hq, hk, dk, dv = 2, 3, 4, 2, 3, 2
    q, k = rand((b, t, hq * dk), dtype, -1, 1, 1), rand((b, t, hk * dk), dtype, -1, 1, 2)
    v = rand((b, t, hk * dv), dtype, -1, 1, 3)
    past = rand((b, hk, dk, dv), dtype, -1, 1, 4)
    decays = [rand((b, t, hk * dk), dtype, -1, 0, 5), rand((b, t, hk), dtype, -1, 0, 6)]
    betas = [rand((b, t, hk), dtype, 0, 1, 7), rand((b, t, 1), dtype, 0, 1, 8)]
    attrs = {"q_num_heads": hq, "kv_num_heads": hk, "scale": 0.6, "update_rule": rule}
    for decay in decays if rule.startswith("gated") else [None]:
        for beta in betas if rule.endswith("delta") else [None]:
            for p in (None, past):
                check("LinearAttention", [q, k, v, p, decay, beta], attrs)


@pytest.mark.parametrize("activation", ["none", "silu"])
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_causal_conv_with_state(dtype: np.dtype, activation: str) -> None:
    b, c, length = 2, 3, 5
    for k in (1, 2, 4):
        x, w = rand((b, c, length), dtype, seed=1), rand((c, 1, k), dtype, seed=2)
        for bias in (None, rand((c,), dtype, seed=3)):
            for past in (None, rand((b, c, k - 1), dtype, seed=4)):
                check("CausalConvWithState", [x, w, bias, past], {"activation": activation})
    check("CausalConvWithState", [rand((1, 2, 1), dtype), rand((2, 1, 4), dtype, seed=2), None,
                                           rand((1, 2, 3), dtype, seed=3)], {"activation": activation})


def test_recurrent_lengths_are_int32_run_time_values() -> None:
    ops, attrs = _recurrent_case("LSTM", F32, "reverse", lens=True)
    ops[4] = np.array([0, 4, 3], I32.type)  # an empty sequence keeps its initial state, gives zeros
    check("LSTM", ops, attrs)
