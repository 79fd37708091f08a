"""Sequence-model kinds: scaled dot-product attention, rotary embedding, recurrent cells.

Attention works on 4-D ``[batch, heads, seq, head_size]`` operands (3-D
``[batch, seq, heads * head_size]`` ones when ``q_num_heads`` is set); key and
value heads are shared by groups of query heads (GQA / MQA).
"""

from __future__ import annotations

from glow_core.errors import GlowTypeError
from glow_core.ir.defs.common import Attrs, Types, check_elems, req
from glow_core.ir.kinds import AttrType as A
from glow_core.ir.kinds import Category as C
from glow_core.ir.kinds import attr, define_kind
from glow_core.ir.types import FLOAT_KINDS, ElemKind, TensorType, broadcast_shapes

E = ElemKind


def _heads(t: TensorType, heads: int, what: str) -> tuple[int, int, int, int]:
    """(batch, heads, seq, head_size) of a 4-D operand, or of a 3-D one split into ``heads``."""
    if t.rank == 4:
        b, h, s, d = t.shape
        return b, h, s, d
    if t.rank == 3 and heads > 0 and t.shape[2] % heads == 0:
        b, s, hidden = t.shape
        return b, heads, s, hidden // heads
    raise GlowTypeError(f"{what} {t} must be 4-D, or 3-D with a hidden size divisible by its head count ({heads})")


def attention_dims(types: Types, attrs: Attrs) -> dict[str, int]:
    q, k, v = req(types, 0), req(types, 1), req(types, 2)
    if not (q.rank == k.rank == v.rank and q.rank in (3, 4)):
        raise GlowTypeError(f"Q, K and V must all be 3-D or all 4-D, got {q}, {k}, {v}")
    three_d = q.rank == 3
    if three_d and (attrs["q_num_heads"] < 1 or attrs["kv_num_heads"] < 1):
        raise GlowTypeError("3-D Q, K and V need q_num_heads and kv_num_heads")
    b, hq, sq, d = _heads(q, attrs["q_num_heads"], "Q")
    bk, hk, skv, dk = _heads(k, attrs["kv_num_heads"], "K")
    bv, hv, sv, dv = _heads(v, attrs["kv_num_heads"], "V")
    if not (b == bk == bv) or hk != hv or skv != sv or d != dk:
        raise GlowTypeError(f"Q {q}, K {k} and V {v} do not agree in batch, heads, sequence or head size")
    if hk < 1 or hq % hk:
        raise GlowTypeError(f"{hq} query heads are not a multiple of {hk} key/value heads")
    past = 0
    pk = types[4] if len(types) > 4 else None
    pv = types[5] if len(types) > 5 else None
    if (pk is None) != (pv is None):
        raise GlowTypeError("past_key and past_value go together")
    if pk is not None and pv is not None:
        if pk.shape[:2] != (b, hk) or pk.rank != 4 or pk.shape[3] != d or pv.shape != (b, hk, pk.shape[2], dv):
            raise GlowTypeError(f"past key {pk} / value {pv} do not fit [batch {b}, heads {hk}, past, {d} / {dv}]")
        past = pk.shape[2]
    total = past + skv
    mask = types[3] if len(types) > 3 else None
    if mask is not None:
        if mask.elem != E.BOOL and mask.elem != q.elem:
            raise GlowTypeError(f"mask {mask} must be bool or of Q's element kind {q.elem.value}")
        if mask.rank < 1 or mask.rank > 4:
            raise GlowTypeError(f"mask {mask} must have rank 1 to 4")
        last = mask.shape[-1]
        if last > total or (last < total and not attrs["pad_mask"]):
            raise GlowTypeError(f"mask {mask}: last dimension must be {total}")
        broadcast_shapes(mask.shape[:-1] + (1,), (b, hq, sq, 1))
    nonpad = types[6] if len(types) > 6 else None
    if nonpad is not None:
        if nonpad.elem != E.INT64 or nonpad.shape != (b,):
            raise GlowTypeError(f"nonpad_kv_seqlen {nonpad} must be int64[{b}]")
        if pk is not None:
            raise GlowTypeError("nonpad_kv_seqlen cannot be combined with past_key / past_value")
    return {"b": b, "hq": hq, "hk": hk, "sq": sq, "skv": skv, "d": d, "dv": dv, "total": total, "three_d": three_d}


def _attention_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    q, k, v = req(types, 0), req(types, 1), req(types, 2)
    check_elems(q, FLOAT_KINDS, "Q")
    if k.elem != q.elem or v.elem != q.elem:
        raise GlowTypeError(f"Q, K and V must share an element kind, got {q}, {k}, {v}")
    if attrs["qk_mode"] not in (0, 1, 2, 3):
        raise GlowTypeError(f"qk_mode must be 0..3, got {attrs['qk_mode']}")
    dims = attention_dims(types, attrs)
    b, hq, hk, sq, d, dv, total = (dims[n] for n in ("b", "hq", "hk", "sq", "d", "dv", "total"))
    y = (b, sq, hq * dv) if dims["three_d"] else (b, hq, sq, dv)
    e = q.elem
    return [TensorType(e, y), TensorType(e, (b, hk, total, d)), TensorType(e, (b, hk, total, dv)),
            TensorType(e, (b, hq, sq, total))]


define_kind(
    "Attention",
    inputs=("Q", "K", "V", "Mask?", "PastKey?", "PastValue?", "NonPadKVSeqLen?"),
    outputs=("Result", "PresentKey", "PresentValue", "QK"),
    attrs=(
        attr("q_num_heads", A.INT, 0, doc="heads of a 3-D Q (0 for 4-D operands)"),
        attr("kv_num_heads", A.INT, 0, doc="heads of 3-D K and V"),
        attr("scale", A.FLOAT, doc="applied as sqrt(scale) to Q and to K before Q @ K^T"),
        attr("softcap", A.FLOAT, 0.0, doc="> 0: scores = softcap * tanh(scores / softcap)"),
        attr("is_causal", A.BOOL, False, doc="query i sees key j iff j <= i + offset (bottom-right aligned)"),
        attr("qk_mode", A.INT, 0, doc="QK result: 0 raw scores, 1 after softcap, 2 after the mask, 3 softmax"),
        attr("pad_mask", A.BOOL, False, doc="a mask shorter than the keys is padded with -inf"),
        attr("softmax_narrow", A.BOOL, False,
             doc="float16 / bfloat16 operands without a wider softmax_precision: each step of the softmax "
                 "rounds to the operands' type"),
    ),
    infer=_attention_rule,
    categories=(C.LINEAR_ALGEBRA,),
    elems=FLOAT_KINDS | {E.BOOL, E.INT64},
    doc="softmax(mask(softcap(Q K^T * scale))) V with GQA, a KV cache (PresentKey = concat(PastKey, K)) and "
        "per-batch valid key counts. A fully masked query row gives zeros. Computed in float32 (float64 for "
        "float64 operands); float16 / bfloat16 operands round after each step of the spec's function body.",
)


def _rotary_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x, cos, sin = req(types, 0), req(types, 1), req(types, 2)
    pos = types[3] if len(types) > 3 else None
    check_elems(x, FLOAT_KINDS, "RotaryEmbedding input")
    if cos.elem != x.elem or sin.elem != x.elem or cos.shape != sin.shape:
        raise GlowTypeError(f"cos {cos} and sin {sin} must match each other and the input's element kind")
    if x.rank == 4:
        b, _, s, d = x.shape
    elif x.rank == 3 and attrs["num_heads"] > 0 and x.shape[2] % attrs["num_heads"] == 0:
        b, s, hidden = x.shape
        d = hidden // attrs["num_heads"]
    else:
        raise GlowTypeError(f"input {x} must be 4-D [batch, heads, seq, head_size] or 3-D with num_heads")
    rot = attrs["rotary_dim"] or d
    if rot % 2 or rot > d:
        raise GlowTypeError(f"rotary_dim {rot} must be even and <= head size {d}")
    if pos is None:
        if cos.rank != 3 or cos.shape != (b, s, rot // 2):
            raise GlowTypeError(f"without position ids cos must be [{b}, {s}, {rot // 2}], got {cos}")
    else:
        if pos.elem != E.INT64 or pos.shape != (b, s):
            raise GlowTypeError(f"position ids {pos} must be int64[{b}, {s}]")
        if cos.rank != 2 or cos.shape[1] != rot // 2:
            raise GlowTypeError(f"with position ids cos must be [max_position, {rot // 2}], got {cos}")
    return [x]


define_kind(
    "RotaryEmbedding",
    inputs=("Input", "Cos", "Sin", "PositionIds?"),
    attrs=(attr("interleaved", A.BOOL, False), attr("num_heads", A.INT, 0), attr("rotary_dim", A.INT, 0)),
    infer=_rotary_rule,
    elems=FLOAT_KINDS | {E.INT64},
    doc="Rotates pairs of the first rotary_dim features (halves, or interleaved pairs) by the given angles.",
)


# -- recurrent layers ----------------------------------------------------------------------------

#: gates per cell kind (rows of W / R per direction, in hidden_size units)
RNN_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
#: activation functions a recurrent kind may name (lower case)
RNN_ACTIVATIONS = frozenset({"relu", "tanh", "sigmoid", "affine", "leakyrelu", "thresholdedrelu", "scaledtanh",
                             "hardsigmoid", "elu", "softsign", "softplus"})


def _recurrent_rule(kind: str):  # type: ignore[no-untyped-def]
    gates = RNN_GATES[kind]

    def rule(types: Types, attrs: Attrs) -> list[TensorType]:
        x, w, r = req(types, 0), req(types, 1), req(types, 2)
        check_elems(x, FLOAT_KINDS, f"{kind} input")
        if w.elem != x.elem or r.elem != x.elem:
            raise GlowTypeError("X, W and R must share an element kind")
        dirs = 2 if attrs["direction"] == "bidirectional" else 1
        if attrs["direction"] not in ("forward", "reverse", "bidirectional"):
            raise GlowTypeError(f"direction {attrs['direction']!r}")
        h = attrs["hidden_size"]
        acts = attrs["activations"]
        per_dir = {"RNN": 1, "GRU": 2, "LSTM": 3}[kind]
        if len(acts) != per_dir * dirs or any(a not in RNN_ACTIVATIONS for a in acts):
            raise GlowTypeError(f"activations {list(acts)}: need {per_dir * dirs} of {sorted(RNN_ACTIVATIONS)}")
        if len(attrs["alphas"]) != len(acts) or len(attrs["betas"]) != len(acts):
            raise GlowTypeError("alphas and betas need one value per activation")
        if x.rank != 3:
            raise GlowTypeError(f"X {x} must be 3-D")
        seq, batch, inp = (x.shape[1], x.shape[0], x.shape[2]) if attrs["layout"] else x.shape
        if w.shape != (dirs, gates * h, inp) or r.shape != (dirs, gates * h, h):
            raise GlowTypeError(f"W {w} / R {r} must be [{dirs}, {gates * h}, {inp} / {h}]")
        extra = {3: ("B", (dirs, 2 * gates * h)), 4: ("sequence_lens", (batch,))}
        state = (batch, dirs, h) if attrs["layout"] else (dirs, batch, h)
        extra[5] = ("initial_h", state)
        if kind == "LSTM":
            extra[6] = ("initial_c", state)
            extra[7] = ("P", (dirs, 3 * h))
        for i, (name, shape) in extra.items():
            t = types[i] if len(types) > i else None
            if t is None:
                continue
            if t.shape != shape or t.elem != (E.INT32 if i == 4 else x.elem):
                raise GlowTypeError(f"{name} {t} must have shape {list(shape)}")
        y = (batch, seq, dirs, h) if attrs["layout"] else (seq, dirs, batch, h)
        outs = [TensorType(x.elem, y), TensorType(x.elem, state)]
        if kind == "LSTM":
            outs.append(TensorType(x.elem, state))
        return outs

    return rule


_RECURRENT_ATTRS = (
    attr("hidden_size", A.INT),
    attr("direction", A.STRING, "forward", doc="forward, reverse or bidirectional"),
    attr("activations", A.STRINGS, doc="lower-case names, per direction"),
    attr("alphas", A.FLOATS, doc="one per activation (unused ones 0)"),
    attr("betas", A.FLOATS, doc="one per activation (unused ones 0)"),
    attr("clip", A.FLOAT, float("inf"), doc="gate pre-activations are clipped to [-clip, clip]"),
    attr("layout", A.INT, 0, doc="0: [seq, batch, ...]; 1: batch first"),
)
_RNN_DOC = (" Sequences shorter than the batch's (sequence_lens) keep their state and give zero outputs "
            "past their end; the reverse direction starts at each sequence's own end.")

define_kind("RNN", inputs=("X", "W", "R", "B?", "SequenceLens?", "InitialH?"), outputs=("Y", "YH"),
            attrs=_RECURRENT_ATTRS, infer=_recurrent_rule("RNN"), elems=FLOAT_KINDS | {E.INT32},
            doc="Elman RNN: H = f(X W^T + H R^T + Wb + Rb)." + _RNN_DOC)
define_kind("GRU", inputs=("X", "W", "R", "B?", "SequenceLens?", "InitialH?"), outputs=("Y", "YH"),
            attrs=_RECURRENT_ATTRS + (attr("linear_before_reset", A.BOOL, False),),
            infer=_recurrent_rule("GRU"), elems=FLOAT_KINDS | {E.INT32},
            doc="GRU with gates z, r, h (ONNX order)." + _RNN_DOC)
define_kind("LSTM", inputs=("X", "W", "R", "B?", "SequenceLens?", "InitialH?", "InitialC?", "P?"),
            outputs=("Y", "YH", "YC"), attrs=_RECURRENT_ATTRS + (attr("input_forget", A.BOOL, False),),
            infer=_recurrent_rule("LSTM"), elems=FLOAT_KINDS | {E.INT32},
            doc="LSTM with gates i, o, f, c (ONNX order) and optional peepholes." + _RNN_DOC)


# -- linear attention and causal convolution (state-space / linear-RNN models) ---------------------

LINEAR_ATTENTION_RULES = ("linear", "gated", "delta", "gated_delta")


def _linear_attention_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    q, k, v = req(types, 0), req(types, 1), req(types, 2)
    past = types[3] if len(types) > 3 else None
    decay = types[4] if len(types) > 4 else None
    beta = types[5] if len(types) > 5 else None
    check_elems(q, frozenset({E.FLOAT32, E.FLOAT16, E.BFLOAT16}), "LinearAttention query")
    hq, hk, rule = attrs["q_num_heads"], attrs["kv_num_heads"], attrs["update_rule"]
    if rule not in LINEAR_ATTENTION_RULES:
        raise GlowTypeError(f"update_rule {rule!r}")
    if q.rank != 3 or k.rank != 3 or v.rank != 3 or k.elem != q.elem or v.elem != q.elem:
        raise GlowTypeError(f"query {q}, key {k}, value {v} must be 3-D of one element kind")
    b, t = q.shape[:2]
    if hq < 1 or hk < 1 or hq % hk or q.shape[2] % hq or k.shape[2] % hk or v.shape[2] % hk:
        raise GlowTypeError(f"head counts {hq} / {hk} do not fit {q}, {k}, {v}")
    dk, dv = q.shape[2] // hq, v.shape[2] // hk
    if k.shape != (b, t, hk * dk) or v.shape[:2] != (b, t):
        raise GlowTypeError(f"key {k} / value {v} do not fit query {q}")
    state = (b, hk, dk, dv)
    if past is not None and (past.shape != state or past.elem != q.elem):
        raise GlowTypeError(f"past_state {past} must be {q.elem.value}{list(state)}")
    needs_decay, needs_beta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if needs_decay and (decay is None or decay.shape not in ((b, t, hk * dk), (b, t, hk)) or decay.elem != q.elem):
        raise GlowTypeError(f"update_rule {rule!r} needs decay [{b}, {t}, {hk * dk} or {hk}], got {decay}")
    if needs_beta and (beta is None or beta.shape not in ((b, t, hk), (b, t, 1)) or beta.elem != q.elem):
        raise GlowTypeError(f"update_rule {rule!r} needs beta [{b}, {t}, {hk} or 1], got {beta}")
    return [TensorType(q.elem, (b, t, hq * dv)), TensorType(q.elem, state)]


define_kind(
    "LinearAttention",
    inputs=("Query", "Key", "Value", "PastState?", "Decay?", "Beta?"),
    outputs=("Result", "PresentState"),
    attrs=(attr("q_num_heads", A.INT), attr("kv_num_heads", A.INT), attr("scale", A.FLOAT),
           attr("update_rule", A.STRING, "gated_delta", doc="linear, gated, delta or gated_delta")),
    infer=_linear_attention_rule,
    elems=frozenset({E.FLOAT32, E.FLOAT16, E.BFLOAT16}),
    doc="Recurrent linear attention over packed [B, T, H*D] operands with a [B, Hkv, dk, dv] state; decay "
        "(log space) is per key dimension or per head. Computed token by token in float32.",
)


def _causal_conv_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x, w = req(types, 0), req(types, 1)
    bias = types[2] if len(types) > 2 else None
    past = types[3] if len(types) > 3 else None
    check_elems(x, frozenset({E.FLOAT32, E.FLOAT16, E.BFLOAT16}), "CausalConvWithState input")
    if attrs["activation"] not in ("none", "silu"):
        raise GlowTypeError(f"activation {attrs['activation']!r}")
    if x.rank != 3 or w.rank != 3 or w.shape[:2] != (x.shape[1], 1) or w.shape[2] < 1 or w.elem != x.elem:
        raise GlowTypeError(f"input {x} must be [B, C, L] and weight {w} [C, 1, k]")
    b, c, _ = x.shape
    state = (b, c, w.shape[2] - 1)
    if bias is not None and (bias.shape != (c,) or bias.elem != x.elem):
        raise GlowTypeError(f"bias {bias} must be [{c}]")
    if past is not None and (past.shape != state or past.elem != x.elem):
        raise GlowTypeError(f"past_state {past} must be {list(state)}")
    return [x, TensorType(x.elem, state)]


define_kind(
    "CausalConvWithState",
    inputs=("Input", "Weight", "Bias?", "PastState?"),
    outputs=("Result", "PresentState"),
    attrs=(attr("activation", A.STRING, "none", doc="none or silu"),),
    infer=_causal_conv_rule,
    categories=(C.CONVOLUTION,),
    elems=frozenset({E.FLOAT32, E.FLOAT16, E.BFLOAT16}),
    doc="Depthwise causal 1-D convolution over concat(PastState or zeros, Input); PresentState keeps the "
        "last k-1 positions of that sequence.",
)
