"""FusedLayerNorm / FusedAttention on the cpu backend: the exported patterns (and the LayerNormalization
op) are fused and agree with onnx.reference on odd shapes, -inf masks, fully masked rows, batches and heads."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

import glow_core
from tests.transformer_models import attention_model, attention_op_model, feeds, layernorm_model, layernorm_op_model


def _run(model: onnx.ModelProto, inputs: dict[str, np.ndarray], backend: str = "cpu",
         **kw: Any) -> tuple[dict[str, int], list[np.ndarray]]:
    net = glow_core.compile(model, backend, **kw)
    out = net.run(inputs)
    return net.function.count_by_kind(), [np.asarray(out[o.name]) for o in model.graph.output]


def _reference(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(a) for a in ReferenceEvaluator(model).run(None, inputs)]


def _close(got: np.ndarray, want: np.ndarray, rtol: float = 2e-5, atol: float = 2e-5) -> None:
    assert got.shape == want.shape
    assert np.array_equal(np.isnan(got), np.isnan(want)), "NaN positions differ"
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


LN_SHAPES = [(1, 2), (3, 7), (2, 5, 37), (1, 4, 384), (2, 3, 2, 17), (4, 9)]


@pytest.mark.parametrize("shape", LN_SHAPES)
@pytest.mark.parametrize("square,bias", [("pow", True), ("mul", False)])
def test_exported_layernorm_fused_and_correct(shape: tuple[int, ...], square: str, bias: bool) -> None:
    model = layernorm_model(shape, eps=1e-6, square=square, bias=bias)
    x = feeds(model)
    kinds, (y,) = _run(model, x)
    assert kinds.get("FusedLayerNorm") == 1, kinds
    assert "ReduceSum" not in kinds and "Sqrt" not in kinds
    _close(y, _reference(model, x)[0])


@pytest.mark.parametrize("param_shape", [(1,), (1, 1, 23)])
def test_layernorm_parameters_of_one_value_or_leading_ones(param_shape: tuple[int, ...]) -> None:
    model = layernorm_model((3, 4, 23), param_shape=param_shape)
    x = feeds(model, seed=4)
    kinds, (y,) = _run(model, x)
    assert kinds.get("FusedLayerNorm") == 1, kinds
    _close(y, _reference(model, x)[0])


@pytest.mark.parametrize("shape", [(2, 6, 31), (1, 128, 384)])
def test_layernorm_op_lowered_then_fused(shape: tuple[int, ...]) -> None:
    model = layernorm_op_model(shape, eps=1e-5)
    x = feeds(model, seed=2)
    kinds, (y,) = _run(model, x)
    assert kinds == {"FusedLayerNorm": 1}, kinds
    _close(y, _reference(model, x)[0])


@pytest.mark.parametrize("variant", ["axis", "eps-after-sqrt", "shared", "no-square"])
def test_layernorm_look_alikes_not_fused_and_still_correct(variant: str) -> None:
    model = layernorm_model((4, 6, 9), variant=variant)
    x = feeds(model, seed=3)
    kinds, got = _run(model, x)
    assert "FusedLayerNorm" not in kinds, kinds
    for g, w in zip(got, _reference(model, x)):
        _close(g, w, rtol=1e-4, atol=1e-4)


def test_layernorm_threads_agree() -> None:
    model = layernorm_model((8, 64, 95))
    x = feeds(model, seed=5)
    _, (one,) = _run(model, x, threads=1)
    _, (two,) = _run(model, x, threads=2)
    np.testing.assert_array_equal(one, two)
    _close(one, _reference(model, x)[0])


ATTN = [
    # b, h, m, n, d, dv, scale_op, mask shape
    (1, 1, 1, 1, 1, 1, "Div", None),
    (1, 2, 5, 7, 3, 9, "Div", (1, 1, 1, 7)),
    (2, 3, 9, 13, 8, 5, "Mul", (2, 1, 9, 13)),
    (1, 12, 128, 128, 32, 32, "Div", (1, 1, 1, 128)),
    (2, 2, 17, 33, 16, 40, "Mul", (17, 33)),
    (3, 1, 4, 70, 6, 3, "Div", (3, 1, 4, 1)),
]


@pytest.mark.parametrize("b,h,m,n,d,dv,op,mask", ATTN)
def test_exported_attention_fused_and_correct(b: int, h: int, m: int, n: int, d: int, dv: int, op: str,
                                              mask: tuple[int, ...] | None) -> None:
    model = attention_model(b, h, m, n, d, dv, op, mask)
    x = feeds(model, mask="random" if mask is None or mask[-1] > 1 else "additive")
    kinds, (y,) = _run(model, x)
    assert kinds.get("FusedAttention") == 1, kinds
    assert "Softmax" not in kinds
    _close(y, _reference(model, x)[0], rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("mask", [(2, 3, 6, 11), (1, 1, 6, 11)])
def test_attention_fully_masked_rows_are_nan_as_the_reference(mask: tuple[int, ...]) -> None:
    model = attention_model(2, 3, 6, 11, 4, 7, "Div", mask)
    x = feeds(model, mask="full-rows")
    kinds, (y,) = _run(model, x)
    assert kinds.get("FusedAttention") == 1, kinds
    want = _reference(model, x)[0]
    assert np.isnan(want).any() and not np.isnan(want).all()
    _close(y, want, rtol=1e-4, atol=2e-5)


def test_attention_nan_inputs_propagate() -> None:
    model = attention_model(1, 2, 4, 9, 5, 3, "Div", (1, 1, 4, 9))
    x = feeds(model)
    x["k"][0, 1, 3, 2] = np.nan
    x["q"][0, 0, 2, 0] = np.inf
    _, (y,) = _run(model, x)
    _close(y, _reference(model, x)[0], rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("variant", ["softmax-axis", "shared"])
def test_attention_look_alikes_not_fused_and_still_correct(variant: str) -> None:
    model = attention_model(1, 2, 5, 5, 3, 4, "Div", (1, 1, 5, 5), variant=variant)
    x = feeds(model, mask="additive")
    kinds, got = _run(model, x)
    assert "FusedAttention" not in kinds, kinds
    for g, w in zip(got, _reference(model, x)):
        _close(g, w, rtol=1e-4, atol=2e-5)


def test_attention_without_scale_or_mask_fused() -> None:
    model = attention_model(2, 2, 6, 10, 4, 4, variant="no-scale")
    x = feeds(model)
    kinds, (y,) = _run(model, x)
    assert kinds.get("FusedAttention") == 1, kinds
    _close(y, _reference(model, x)[0], rtol=1e-4, atol=2e-5)


def test_attention_threads_agree() -> None:
    model = attention_model(2, 4, 33, 40, 8, 8, "Div", (2, 1, 1, 40))
    x = feeds(model)
    _, (one,) = _run(model, x, threads=1)
    _, (two,) = _run(model, x, threads=2)
    np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("dims,mask,causal", [
    ((2, 3, 5, 7, 4, 6), "bool", 0),
    ((1, 4, 9, 9, 8, 8), "", 1),
    ((2, 2, 6, 10, 5, 3), "float", 0),
])
def test_attention_op_lowered_to_the_fused_kernel(dims: tuple[int, ...], mask: str, causal: int) -> None:
    model = attention_op_model(*dims, mask=mask, causal=causal, scale=0.3)
    rng = np.random.default_rng(7)
    x = feeds(model)
    if mask == "bool":
        x["mask"] = rng.random(x["mask"].shape) < 0.6
        x["mask"][::2] = False  # fully masked rows: zeros, as the Attention op gives
    elif mask == "float":
        x["mask"][..., 1::3, :] = -np.inf
    kinds, (y,) = _run(model, x)
    assert kinds.get("FusedAttention") == 1, kinds
    want = _reference(model, x)[0]
    _close(y, want, rtol=1e-4, atol=2e-5)
    if mask == "bool":
        assert np.all(y[:, :, ::2] == 0.0)


def test_attention_op_fully_masked_rows_with_nan_scores_are_zero() -> None:
    model = attention_op_model(1, 2, 4, 6, 3, 5, mask="bool")
    x = feeds(model)
    x["mask"] = np.ones((4, 6), bool)
    x["mask"][1] = False
    x["q"][0, 0, 1, 0] = np.nan  # a NaN score in a row the mask hides entirely
    _, (y,) = _run(model, x)
    want = _reference(model, x)[0]
    _close(y, want, rtol=1e-4, atol=2e-5)
    assert np.all(y[0, :, 1] == 0.0)


def test_layernorm_constant_rows_with_zero_epsilon_are_nan_as_the_reference() -> None:
    model = layernorm_model((3, 4, 21), eps=0.0)
    x = feeds(model, seed=6)
    x["x"][1, 2, :] = 1.5  # variance 0, epsilon 0: 0 / 0
    kinds, (y,) = _run(model, x)
    assert kinds.get("FusedLayerNorm") == 1, kinds
    want = _reference(model, x)[0]
    assert np.isnan(want[1, 2]).all()
    _close(y, want)


def test_attention_with_too_many_keys_is_lowered_and_correct() -> None:
    from glow_backend_cpu.emit.transformer import MAX_KEYS

    model = attention_model(1, 1, 2, MAX_KEYS + 3, 2, 3, "Div", None)
    x = feeds(model)
    kinds, (y,) = _run(model, x)
    assert "FusedAttention" not in kinds and "Softmax" in kinds, kinds
    _close(y, _reference(model, x)[0], rtol=1e-4, atol=2e-5)
