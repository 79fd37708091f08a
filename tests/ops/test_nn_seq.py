"""Sequence-model ops on the interpreter vs onnxruntime: Attention, RotaryEmbedding, RNN, GRU, LSTM."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from glow_core.errors import UnsupportedError
from tests.ops.oputil import assert_same, check_against_ort, one_node_model, run_glow, run_ort

RNG = np.random.default_rng(2)


def rand(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


# -- Attention -------------------------------------------------------------------------------------

ATTN_CASES = [
    ({"q": (2, 3, 4, 8), "k": (2, 3, 6, 8), "v": (2, 3, 6, 8)}, {}),
    ({"q": (2, 6, 4, 8), "k": (2, 2, 6, 8), "v": (2, 2, 6, 5)}, {"is_causal": 1}),
    ({"q": (2, 3, 4, 8), "k": (2, 3, 6, 8), "v": (2, 3, 6, 8)}, {"scale": 0.3, "softcap": 2.0}),
    ({"q": (2, 4, 24), "k": (2, 6, 12), "v": (2, 6, 12)}, {"q_num_heads": 4, "kv_num_heads": 2}),
    ({"q": (1, 5, 16), "k": (1, 5, 16), "v": (1, 5, 8)}, {"q_num_heads": 2, "kv_num_heads": 2, "is_causal": 1}),
]


@pytest.mark.parametrize("shapes,attrs", ATTN_CASES)
def test_attention(shapes: dict[str, tuple[int, ...]], attrs: dict[str, Any]) -> None:
    inputs = {n: rand(*s) for n, s in shapes.items()}
    check_against_ort("Attention", inputs, opset=23, rtol=1e-4, atol=1e-5, **attrs)


@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("mask_shape", [(4, 6), (2, 1, 4, 6), (2, 3, 4, 6)])
def test_attention_mask(kind: str, mask_shape: tuple[int, ...]) -> None:
    inputs = {"q": rand(2, 3, 4, 8), "k": rand(2, 3, 6, 8), "v": rand(2, 3, 6, 8)}
    if kind == "bool":
        mask = RNG.random(mask_shape) > 0.3
        mask[..., 0] = True  # keep every row alive (fully masked rows: see test below)
    else:
        mask = rand(*mask_shape)
    inputs["m"] = mask
    check_against_ort("Attention", inputs, opset=23, rtol=1e-4, atol=1e-5)


def test_attention_fully_masked_row_is_zero() -> None:
    inputs = {"q": rand(1, 1, 2, 4), "k": rand(1, 1, 3, 4), "v": rand(1, 1, 3, 4),
              "m": np.array([[True, True, False], [False, False, False]])}
    got = run_glow(one_node_model("Attention", inputs, opset=23), inputs)[0]
    assert np.isfinite(got).all() and not got[0, 0, 1].any()


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_attention_past_and_qk_output(mode: int) -> None:
    inputs = {"q": rand(2, 3, 4, 8), "k": rand(2, 3, 2, 8), "v": rand(2, 3, 2, 8), "m": rand(4, 7),
              "pk": rand(2, 3, 5, 8), "pv": rand(2, 3, 5, 8)}
    # mode 2 shows the causal bias: -inf by the spec (and the ONNX node tests), -FLT_MAX in onnxruntime
    check_against_ort("Attention", inputs, n_outputs=4, opset=23, qk_matmul_output_mode=mode, softcap=3.0,
                      is_causal=int(mode != 2), rtol=1e-4, atol=1e-5)


def test_attention_fp16() -> None:
    inputs = {"q": rand(1, 2, 3, 8, dtype=np.float16), "k": rand(1, 2, 5, 8, dtype=np.float16),
              "v": rand(1, 2, 5, 8, dtype=np.float16)}
    check_against_ort("Attention", inputs, opset=23, rtol=5e-3, atol=5e-3)


def test_attention_int_mask_unsupported() -> None:
    inputs = {"q": rand(1, 1, 2, 4), "k": rand(1, 1, 3, 4), "v": rand(1, 1, 3, 4), "m": np.ones((2, 3), np.int32)}
    model = one_node_model("Attention", inputs, opset=23)
    with pytest.raises(UnsupportedError, match="attn_mask"):
        run_glow(model, inputs)


# -- RotaryEmbedding ----------------------------------------------------------------------------------

@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotary_dim", [0, 4])
@pytest.mark.parametrize("with_pos", [False, True])
def test_rotary_embedding(interleaved: int, rotary_dim: int, with_pos: bool) -> None:
    x = rand(2, 3, 5, 8)
    half = (rotary_dim or 8) // 2
    if with_pos:
        cos, sin = rand(20, half), rand(20, half)
        inputs = {"x": x, "cos": cos, "sin": sin, "pos": RNG.integers(0, 20, (2, 5)).astype(np.int64)}
    else:
        inputs = {"x": x, "cos": rand(2, 5, half), "sin": rand(2, 5, half)}
    attrs = {"interleaved": interleaved}
    if rotary_dim:
        attrs["rotary_embedding_dim"] = rotary_dim
    check_against_ort("RotaryEmbedding", inputs, opset=23, **attrs)


def test_rotary_embedding_3d() -> None:
    inputs = {"x": rand(2, 5, 12), "cos": rand(2, 5, 2), "sin": rand(2, 5, 2)}
    check_against_ort("RotaryEmbedding", inputs, opset=23, num_heads=3)


# -- recurrent layers ----------------------------------------------------------------------------------

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def recurrent_inputs(op: str, seq: int, batch: int, inp: int, hid: int, dirs: int, layout: int,
                     full: bool) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], list[str]]:
    g = GATES[op]
    x = rand(batch, seq, inp) if layout else rand(seq, batch, inp)
    inputs = {"x": x}
    inits = {"w": rand(dirs, g * hid, inp) * 0.5, "r": rand(dirs, g * hid, hid) * 0.5}
    order = ["x", "w", "r"]
    if full:
        state = (batch, dirs, hid) if layout else (dirs, batch, hid)
        inits["b"] = rand(dirs, 2 * g * hid)
        inits["lens"] = RNG.integers(1, seq + 1, batch).astype(np.int32)
        inits["h0"] = rand(*state)
        order += ["b", "lens", "h0"]
        if op == "LSTM":
            inits["c0"] = rand(*state)
            inits["p"] = rand(dirs, 3 * hid)
            order += ["c0", "p"]
    return inputs, {k: v.astype(np.float32) for k, v in inits.items() if k != "lens"} | (
        {"lens": inits["lens"]} if "lens" in inits else {}), order


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("full", [False, True])
def test_recurrent(op: str, direction: str, full: bool) -> None:
    dirs = 2 if direction == "bidirectional" else 1
    inputs, inits, order = recurrent_inputs(op, 5, 3, 4, 6, dirs, 0, full)
    n_out = 3 if op == "LSTM" else 2
    check_against_ort(op, inputs, initializers=inits, input_order=order, n_outputs=n_out, opset=14,
                      hidden_size=6, direction=direction, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_recurrent_batch_first(op: str) -> None:
    # onnxruntime has no layout=1: compare with layout 0 on transposed operands
    inputs, inits, order = recurrent_inputs(op, 4, 2, 3, 5, 2, 1, True)
    n_out = 3 if op == "LSTM" else 2
    kw = {"input_order": order, "n_outputs": n_out, "opset": 14, "hidden_size": 5, "direction": "bidirectional"}
    got = run_glow(one_node_model(op, inputs, initializers=inits, layout=1, **kw), inputs)
    t_inputs = {"x": inputs["x"].transpose(1, 0, 2)}
    t_inits = {k: (v.transpose(1, 0, 2) if k in ("h0", "c0") else v) for k, v in inits.items()}
    want = run_ort(one_node_model(op, t_inputs, initializers=t_inits, **kw), t_inputs)
    want = [want[0].transpose(2, 0, 1, 3)] + [w.transpose(1, 0, 2) for w in want[1:]]
    assert_same(got, want, rtol=1e-4, atol=1e-5)


def test_gru_linear_before_reset() -> None:
    inputs, inits, order = recurrent_inputs("GRU", 4, 2, 3, 5, 2, 0, True)
    check_against_ort("GRU", inputs, initializers=inits, input_order=order, n_outputs=2, opset=14, hidden_size=5,
                      direction="bidirectional", linear_before_reset=1, rtol=1e-4, atol=1e-5)


def test_lstm_input_forget_and_clip() -> None:
    inputs, inits, order = recurrent_inputs("LSTM", 4, 2, 3, 5, 1, 0, True)
    check_against_ort("LSTM", inputs, initializers=inits, input_order=order, n_outputs=3, opset=14, hidden_size=5,
                      input_forget=1, clip=0.7, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op,acts,alpha,beta", [
    ("RNN", ["LeakyRelu"], [0.2], []),
    ("GRU", ["HardSigmoid", "Softsign"], [0.3], [0.4]),
    ("LSTM", ["HardSigmoid", "Elu", "Softplus"], [0.25, 0.8], [0.45]),
])
def test_recurrent_activations(op: str, acts: list[str], alpha: list[float], beta: list[float]) -> None:
    inputs, inits, order = recurrent_inputs(op, 3, 2, 3, 4, 1, 0, False)
    attrs: dict[str, Any] = {"activations": acts}
    if alpha:
        attrs["activation_alpha"] = alpha
    if beta:
        attrs["activation_beta"] = beta
    check_against_ort(op, inputs, initializers=inits, input_order=order, n_outputs=3 if op == "LSTM" else 2,
                      opset=14, hidden_size=4, rtol=1e-4, atol=1e-5, **attrs)


def test_recurrent_affine_without_params_unsupported() -> None:
    inputs, inits, order = recurrent_inputs("RNN", 3, 2, 3, 4, 1, 0, False)
    model = one_node_model("RNN", inputs, initializers=inits, input_order=order, n_outputs=2, opset=14,
                           hidden_size=4, activations=["Affine"])
    with pytest.raises(UnsupportedError, match="affine"):
        run_glow(model, inputs)


# -- LinearAttention / CausalConvWithState (onnxruntime has no opset 27: independent formulations) ---------

def _model27(op: str, inputs: dict[str, np.ndarray], order: list[str], **attrs: Any) -> Any:
    import onnx

    node = onnx.helper.make_node(op, order, ["y", "state"], **attrs)
    graph = onnx.helper.make_graph(
        [node], "g", [onnx.helper.make_tensor_value_info(k, onnx.TensorProto.FLOAT, v.shape) for k, v in inputs.items()],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None),
         onnx.helper.make_tensor_value_info("state", onnx.TensorProto.FLOAT, None)])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 27)], ir_version=10)
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize("past", [False, True])
@pytest.mark.parametrize("activation", ["none", "silu"])
def test_causal_conv_with_state_matches_concat_conv(past: bool, activation: str) -> None:
    x, w, b = rand(2, 3, 7), rand(3, 1, 4), rand(3)
    inputs = {"x": x, "w": w, "b": b}
    order = ["x", "w", "b"]
    state = rand(2, 3, 3) if past else np.zeros((2, 3, 3), np.float32)
    if past:
        inputs["p"] = state
        order.append("p")
    y, present = run_glow(_model27("CausalConvWithState", inputs, order, activation=activation), inputs)
    full = np.concatenate([state, x], axis=2)
    conv = one_node_model("Conv", {"full": full, "w": w, "b": b}, group=3)
    want = run_ort(conv, {"full": full, "w": w, "b": b})[0]
    if activation == "silu":
        want = want / (1 + np.exp(-want))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(present, full[:, :, -3:])


def test_linear_attention_linear_is_unnormalized_causal_attention() -> None:
    q, k, v = rand(2, 5, 12), rand(2, 5, 6), rand(2, 5, 8)  # 4 query heads, 2 kv heads, dk 3, dv 4
    inputs = {"q": q, "k": k, "v": v}
    y, state = run_glow(_model27("LinearAttention", inputs, ["q", "k", "v"], q_num_heads=4, kv_num_heads=2,
                                 update_rule="linear"), inputs)
    qh = q.reshape(2, 5, 4, 3).transpose(0, 2, 1, 3)
    kh = np.repeat(k.reshape(2, 5, 2, 3).transpose(0, 2, 1, 3), 2, axis=1)
    vh = np.repeat(v.reshape(2, 5, 2, 4).transpose(0, 2, 1, 3), 2, axis=1)
    scores = np.tril(qh @ kh.transpose(0, 1, 3, 2)) / np.sqrt(3)
    want = (scores @ vh).transpose(0, 2, 1, 3).reshape(2, 5, 16)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    kv = k.reshape(2, 5, 2, 3).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(state, kv.transpose(0, 1, 3, 2) @ v.reshape(2, 5, 2, 4).transpose(0, 2, 1, 3),
                               rtol=1e-4, atol=1e-5)


def test_linear_attention_gated_delta_per_token_loop() -> None:
    q, k, v = rand(1, 4, 6), rand(1, 4, 6), rand(1, 4, 4)  # 2 heads, dk 3, dv 2
    k = k / np.linalg.norm(k.reshape(1, 4, 2, 3), axis=-1, keepdims=True).reshape(1, 4, 2, 1).repeat(3, -1).reshape(
        1, 4, 6)
    g = -np.abs(rand(1, 4, 6)) * 0.3
    beta = RNG.uniform(0, 1, (1, 4, 2)).astype(np.float32)
    past = rand(1, 2, 3, 2)
    inputs = {"q": q, "k": k, "v": v, "s": past, "g": g, "beta": beta}
    y, state = run_glow(_model27("LinearAttention", inputs, ["q", "k", "v", "s", "g", "beta"], q_num_heads=2,
                                 kv_num_heads=2, scale=0.5), inputs)
    want = np.zeros((1, 4, 2, 2), np.float32)
    s = past[0].astype(np.float64).copy()
    for t in range(4):
        for h in range(2):
            kt, vt, qt = k[0, t, 3 * h:3 * h + 3], v[0, t, 2 * h:2 * h + 2], q[0, t, 3 * h:3 * h + 3]
            decayed = np.exp(g[0, t, 3 * h:3 * h + 3])[:, None] * s[h]
            s[h] = decayed + beta[0, t, h] * np.outer(kt, vt - decayed.T @ kt)
            want[0, t, h] = 0.5 * qt @ s[h]
    np.testing.assert_allclose(y, want.reshape(1, 4, 4), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(state[0], s, rtol=1e-4, atol=1e-5)
