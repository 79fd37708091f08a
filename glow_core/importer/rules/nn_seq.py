"""Import rules for ONNX sequence-model ops: Attention, RotaryEmbedding, RNN, GRU, LSTM."""

from __future__ import annotations

import math

from glow_core.errors import GlowTypeError
from glow_core.importer.context import NodeContext, import_rule
from glow_core.ir.graph import Value
from glow_core.ir.types import FLOAT_KINDS, ElemKind

E = ElemKind


@import_rule("Attention")
def _attention(ctx: NodeContext) -> list[Value | None]:
    ctx.check_attrs(["is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode", "scale", "softcap",
                     "softmax_precision"])
    q, k, v = ctx.req(0), ctx.req(1), ctx.req(2)
    mask, past_k, past_v, nonpad = ctx.input(3), ctx.input(4), ctx.input(5), ctx.input(6)
    if q.type.elem not in FLOAT_KINDS:
        raise ctx.unsupported(f"element type {q.type.elem.value}")
    if not (q.type.rank == k.type.rank == v.type.rank and q.type.rank in (3, 4)):
        raise ctx.unsupported(f"Q {q.type}, K {k.type}, V {v.type}: all 3-D or all 4-D operands are supported")
    if k.type.elem != q.type.elem or v.type.elem != q.type.elem:
        raise ctx.unsupported("Q, K and V of different element types")
    if mask is not None and mask.type.elem not in (E.BOOL, q.type.elem):
        raise ctx.unsupported(f"a {mask.type.elem.value} attn_mask (bool or Q's type are supported)")
    if (past_k is None) != (past_v is None):
        raise ctx.unsupported("past_key without past_value (or the reverse)")
    for what, past in (("past_key", past_k), ("past_value", past_v)):
        if past is not None and past.type.elem != q.type.elem:  # the spec's T1 / T2: one type with K and V
            raise GlowTypeError(f"{ctx.where()}: {what} is {past.type.elem.value}, Q, K and V are "
                                f"{q.type.elem.value}: they must have one element type")
    qh = int(ctx.attr("q_num_heads", 0))
    kh = int(ctx.attr("kv_num_heads", 0))
    if q.type.rank == 3:
        if qh < 1 or kh < 1:
            raise ctx.unsupported("3-D Q, K, V without q_num_heads and kv_num_heads")
        head = q.type.shape[2] // qh
    else:
        head = q.type.shape[3]
    scale = ctx.attr("scale")
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(head)
    mode = int(ctx.attr("qk_matmul_output_mode", 0))
    if mode not in (0, 1, 2, 3):
        raise ctx.unsupported(f"qk_matmul_output_mode {mode}")
    # softmax_precision: float (1) or double (11) run the softmax in float32 (float64 for float64 operands);
    # float16 (10), bfloat16 (16) or none with narrow operands round each step to the operands' type
    precision = ctx.attr("softmax_precision")
    if precision is not None and int(precision) not in (1, 10, 11, 16):
        raise ctx.unsupported(f"softmax_precision {precision}")
    if precision is not None and int(precision) == 11 and q.type.elem != E.FLOAT64:
        raise ctx.unsupported("softmax_precision double for non-double operands")
    attrs = {
        "q_num_heads": qh if q.type.rank == 3 else 0,
        "kv_num_heads": kh if q.type.rank == 3 else 0,
        "scale": scale,
        "softcap": float(ctx.attr("softcap", 0.0)),
        "is_causal": bool(ctx.attr("is_causal", 0)),
        "qk_mode": mode,
        "pad_mask": ctx.opset >= 24,
        # the spec: "If softmax precision is not provided, the same precision as the input of softmax (Q and
        # K) is used"; a float16 / bfloat16 softmax rounds each of its steps (a wider precision: float32)
        "softmax_narrow": q.type.elem in (E.FLOAT16, E.BFLOAT16) and precision in (None, 10, 16),
    }
    outs = ctx.emit("Attention", [q, k, v, mask, past_k, past_v, nonpad], attrs)
    return list(outs[: max(1, ctx.num_outputs)])


@import_rule("RotaryEmbedding")
def _rotary(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["interleaved", "num_heads", "rotary_embedding_dim"])
    x = ctx.req(0)
    if x.type.elem not in FLOAT_KINDS:
        raise ctx.unsupported(f"element type {x.type.elem.value}")
    if x.type.rank == 3 and int(ctx.attr("num_heads", 0)) < 1:
        raise ctx.unsupported("a 3-D input without num_heads")
    attrs = {"interleaved": bool(ctx.attr("interleaved", 0)), "num_heads": int(ctx.attr("num_heads", 0)),
             "rotary_dim": int(ctx.attr("rotary_embedding_dim", 0))}
    return ctx.emit("RotaryEmbedding", [x, ctx.req(1), ctx.req(2), ctx.input(3)], attrs)


# -- recurrent layers ----------------------------------------------------------------------------

#: (uses alpha, uses beta, default alpha, default beta) per activation; None: no default known
_ACT_PARAMS: dict[str, tuple[bool, bool, float | None, float | None]] = {
    "relu": (False, False, 0.0, 0.0),
    "tanh": (False, False, 0.0, 0.0),
    "sigmoid": (False, False, 0.0, 0.0),
    "softsign": (False, False, 0.0, 0.0),
    "softplus": (False, False, 0.0, 0.0),
    "leakyrelu": (True, False, 0.01, 0.0),
    "thresholdedrelu": (True, False, 1.0, 0.0),
    "elu": (True, False, 1.0, 0.0),
    "hardsigmoid": (True, True, 0.2, 0.5),
    "affine": (True, True, None, None),
    "scaledtanh": (True, True, None, None),
}
_DEFAULT_ACTS = {"RNN": ["tanh"], "GRU": ["sigmoid", "tanh"], "LSTM": ["sigmoid", "tanh", "tanh"]}


def _activations(ctx: NodeContext, kind: str, dirs: int) -> dict[str, object]:
    """Normalized activation names with one alpha and one beta each (consumed in order by the
    activations that take them, as onnxruntime does)."""
    names = [str(a).lower() for a in (ctx.attr("activations") or [])] or _DEFAULT_ACTS[kind] * dirs
    if len(names) != len(_DEFAULT_ACTS[kind]) * dirs:
        raise ctx.unsupported(f"activations {names} (need {len(_DEFAULT_ACTS[kind]) * dirs})")
    given_a = list(ctx.attr("activation_alpha") or [])
    given_b = list(ctx.attr("activation_beta") or [])
    alphas, betas = [], []
    for name in names:
        if name not in _ACT_PARAMS:
            raise ctx.unsupported(f"activation {name!r}")
        uses_a, uses_b, da, db = _ACT_PARAMS[name]
        a = given_a.pop(0) if uses_a and given_a else da
        b = given_b.pop(0) if uses_b and given_b else db
        if a is None or b is None:
            raise ctx.unsupported(f"activation {name!r} without explicit activation_alpha / activation_beta")
        alphas.append(float(a))
        betas.append(float(b))
    if given_a or given_b:
        raise ctx.unsupported("more activation_alpha / activation_beta values than the activations take")
    return {"activations": names, "alphas": alphas, "betas": betas}


def _recurrent(ctx: NodeContext, kind: str, n_inputs: int, extra: dict[str, object]) -> list[Value]:
    x = ctx.req(0)
    if x.type.elem not in FLOAT_KINDS:
        raise ctx.unsupported(f"element type {x.type.elem.value}")
    direction = str(ctx.attr("direction", "forward"))
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ctx.unsupported(f"direction {direction!r}")
    dirs = 2 if direction == "bidirectional" else 1
    hidden = ctx.attr("hidden_size")
    if hidden is None:
        hidden = ctx.type(2).shape[-1]
    clip = ctx.attr("clip")
    if clip is not None and float(clip) <= 0:
        raise ctx.unsupported(f"clip {clip}")
    lens = ctx.input(4)
    if lens is not None and lens.type.elem != E.INT32:
        raise ctx.unsupported(f"sequence_lens of type {lens.type.elem.value}")
    attrs = {"hidden_size": int(hidden), "direction": direction, "layout": int(ctx.attr("layout", 0)),
             "clip": float(clip) if clip is not None else float("inf"), **_activations(ctx, kind, dirs), **extra}
    if attrs["layout"] not in (0, 1):
        raise ctx.unsupported(f"layout {attrs['layout']}")
    return ctx.emit(kind, [ctx.input(i) for i in range(n_inputs)], attrs)


_RNN_KNOWN = ["activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "layout"]


@import_rule("RNN")
def _rnn(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(_RNN_KNOWN)
    return _recurrent(ctx, "RNN", 6, {})


@import_rule("GRU")
def _gru(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(_RNN_KNOWN + ["linear_before_reset"])
    return _recurrent(ctx, "GRU", 6, {"linear_before_reset": bool(ctx.attr("linear_before_reset", 0))})


@import_rule("LSTM")
def _lstm(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(_RNN_KNOWN + ["input_forget"])
    return _recurrent(ctx, "LSTM", 8, {"input_forget": bool(ctx.attr("input_forget", 0))})


# -- linear attention and causal convolution ------------------------------------------------------------

_HALF_OR_SINGLE = (E.FLOAT32, E.FLOAT16, E.BFLOAT16)


@import_rule("LinearAttention")
def _linear_attention(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["chunk_size", "kv_num_heads", "q_num_heads", "scale", "update_rule"])
    q = ctx.req(0)
    if q.type.elem not in _HALF_OR_SINGLE:
        raise ctx.unsupported(f"element type {q.type.elem.value}")
    past = ctx.input(3)
    if past is not None and past.type.elem != q.type.elem:
        raise ctx.unsupported(f"a {past.type.elem.value} state with {q.type.elem.value} operands")
    hq, hk = int(ctx.attr("q_num_heads", 0)), int(ctx.attr("kv_num_heads", 0))
    if hq < 1 or hk < 1 or q.type.rank != 3 or q.type.shape[2] % hq:
        raise ctx.unsupported(f"q_num_heads {hq} / kv_num_heads {hk} for query {q.type}")
    rule = str(ctx.attr("update_rule", "gated_delta"))
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise ctx.unsupported(f"update_rule {rule!r}")
    scale = float(ctx.attr("scale", 0.0))
    if scale == 0.0:
        scale = 1.0 / math.sqrt(q.type.shape[2] // hq)
    # chunk_size is a tuning hint that does not change results
    attrs = {"q_num_heads": hq, "kv_num_heads": hk, "scale": scale, "update_rule": rule}
    return ctx.emit("LinearAttention", [q, ctx.req(1), ctx.req(2), past, ctx.input(4), ctx.input(5)], attrs)


@import_rule("CausalConvWithState")
def _causal_conv(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["activation"])
    x = ctx.req(0)
    if x.type.elem not in _HALF_OR_SINGLE:
        raise ctx.unsupported(f"element type {x.type.elem.value}")
    act = str(ctx.attr("activation", "none"))
    act = {"swish": "silu"}.get(act, act)
    if act not in ("none", "silu"):
        raise ctx.unsupported(f"activation {act!r}")
    return ctx.emit("CausalConvWithState", [x, ctx.req(1), ctx.input(2), ctx.input(3)], {"activation": act})
