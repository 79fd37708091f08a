"""Normalization ops and losses against onnxruntime."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
import pytest
from onnx import helper

from glow_core.errors import GlowError, ModelError, UnsupportedError
from tests.ops.oputil import NP_TO_ONNX, assert_same, one_node_model, run_glow, run_ort
from tests.ops.test_reduce import F16, F32, F64, check, rand, tol


def with_outputs(model: onnx.ModelProto, specs: Sequence[tuple[np.dtype, Sequence[int]]]) -> onnx.ModelProto:
    """Declare output types where onnx shape inference leaves them unknown (function-defined ops)."""
    for out, (dtype, shape) in zip(model.graph.output, specs):
        out.CopyFrom(helper.make_tensor_value_info(out.name, NP_TO_ONNX[np.dtype(dtype)], list(shape)))
    return model


def compare(model: onnx.ModelProto, feeds: dict[str, np.ndarray], dtype: np.dtype) -> list[np.ndarray]:
    got = run_glow(model, feeds)
    assert_same(got, run_ort(model, feeds), *tol(dtype))
    return got


def params(c: int, dtype: np.dtype, *names: str, seed: int = 1) -> dict[str, np.ndarray]:
    out = {}
    for i, n in enumerate(names):
        lo, hi = (0.5, 2.0) if n in ("var", "scale") else (-1.0, 1.0)
        out[n] = rand((c,), dtype, lo, hi, seed + i)
    return out


# -- BatchNormalization ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=str)
@pytest.mark.parametrize("opset", [7, 9, 15])
def test_batchnorm(opset: int, dtype: np.dtype) -> None:
    for shape in ((2, 3), (2, 3, 5), (2, 3, 4, 5)):
        x = rand(shape, dtype)
        inits = params(3, dtype, "scale", "bias", "mean", "var")
        check("BatchNormalization", {"x": x}, dtype=dtype, opset=opset, initializers=inits, epsilon=1e-3)


def test_batchnorm_mixed_parameter_kinds() -> None:
    x = rand((2, 3, 4), F16)
    inits = params(3, F32, "scale", "bias", "mean", "var")
    check("BatchNormalization", {"x": x}, dtype=F16, opset=15, initializers=inits)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_batchnorm_training_mode_matches_onnx_reference(backend: str) -> None:
    from onnx.reference import ReferenceEvaluator

    x = rand((2, 3, 4, 5), F32)
    inits = params(3, F32, "scale", "bias", "mean", "var")
    inits["var"] = np.abs(inits["var"]) + 0.5
    model = with_outputs(one_node_model("BatchNormalization", {"x": x}, 3, opset=15, initializers=inits,
                                        training_mode=1, momentum=0.7, epsilon=1e-3),
                         [(F32, x.shape), (F32, (3,)), (F32, (3,))])
    want = ReferenceEvaluator(model).run(None, {"x": x})
    got = run_glow(model, {"x": x}, backend)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_batchnorm_unsupported_forms() -> None:
    x = rand((2, 3, 4), F32)
    inits = params(3, F32, "scale", "bias", "mean", "var")
    model = with_outputs(one_node_model("BatchNormalization", {"x": x}, 5, opset=9, initializers=inits),
                         [(F32, x.shape)] + [(F32, (3,))] * 4)
    with pytest.raises(UnsupportedError, match="only inference"):
        run_glow(model, {"x": x})
    model = one_node_model("BatchNormalization", {"x": x}, opset=7, initializers=inits, spatial=0)
    with pytest.raises(UnsupportedError, match="spatial=0"):
        run_glow(model, {"x": x})


# -- InstanceNormalization / GroupNormalization -----------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16], ids=str)
def test_instancenorm(dtype: np.dtype) -> None:
    for shape in ((2, 3, 7), (2, 3, 4, 5), (1, 2, 3, 4, 2)):
        x = rand(shape, dtype)
        check("InstanceNormalization", {"x": x}, dtype=dtype, opset=7, epsilon=1e-4,
              initializers=params(shape[1], dtype, "scale", "bias"))


def _groupnorm_reference(x: np.ndarray, g: int, scale: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """GroupNormalization through onnxruntime's InstanceNormalization on [N, G, rest]."""
    n, c = x.shape[:2]
    xr = x.reshape(n, g, -1)
    inits = {"s": np.ones(g, x.dtype), "b": np.zeros(g, x.dtype)}
    norm = run_ort(one_node_model("InstanceNormalization", {"x": xr}, opset=7, initializers=inits, epsilon=eps),
                   {"x": xr})[0].reshape(x.shape)
    shape = (c,) + (1,) * (x.ndim - 2)
    return norm * scale.reshape(shape) + bias.reshape(shape)


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_groupnorm_opset21(groups: int) -> None:
    x = rand((2, 4, 3, 5), F32)
    p = params(4, F32, "scale", "bias")
    model = with_outputs(one_node_model("GroupNormalization", {"x": x}, opset=21, initializers=p,
                                        num_groups=groups, epsilon=1e-3), [(F32, x.shape)])
    got = compare(model, {"x": x}, F32)
    want = _groupnorm_reference(x, groups, p["scale"], p["bias"], 1e-3)
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-5)


def test_groupnorm_opset18_is_refused() -> None:
    x = rand((2, 6, 4), F32)
    model = with_outputs(one_node_model("GroupNormalization", {"x": x}, opset=18,
                                        initializers=params(3, F32, "scale", "bias"), num_groups=3),
                         [(F32, x.shape)])
    with pytest.raises(GlowError, match="deprecated"):
        run_glow(model, {"x": x})


def test_groupnorm_bad_groups_is_unsupported() -> None:
    x = rand((2, 6, 4), F32)
    model = with_outputs(one_node_model("GroupNormalization", {"x": x}, opset=21,
                                        initializers=params(6, F32, "scale", "bias"), num_groups=4),
                         [(F32, x.shape)])
    with pytest.raises(UnsupportedError, match="num_groups=4"):
        run_glow(model, {"x": x})


# -- LayerNormalization / RMSNormalization -----------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=str)
def test_layernorm(dtype: np.dtype) -> None:
    x = rand((2, 3, 4, 5), dtype)
    for axis in (0, 1, -1, -2):
        norm_shape = x.shape[axis:]
        for with_bias in (False, True):
            for n_out in (1, 3):
                inits: dict[str, Any] = {"scale": rand(norm_shape, dtype, 0.5, 2, 3)}
                order = ["x", "scale"]
                if with_bias:
                    inits["bias"] = rand(norm_shape, dtype, -1, 1, 4)
                    order.append("bias")
                model = one_node_model("LayerNormalization", {"x": x}, n_out, opset=17, initializers=inits,
                                       input_order=order, axis=axis, epsilon=1e-3)
                got = run_glow(model, {"x": x})
                # float64 inputs: the default stash_type computes in float32 (onnxruntime uses float64)
                assert_same(got, run_ort(model, {"x": x}), *((1e-6, 1e-7) if dtype == F64 else tol(dtype)))
                if n_out == 3:
                    assert got[1].dtype == np.float32 and got[1].shape == x.shape[:axis % 4] + (1,) * (4 - axis % 4)


def test_layernorm_broadcast_scale_and_float64_stash() -> None:
    x = rand((2, 3, 4), F32)
    inits = {"scale": rand((1, 4), F32, 0.5, 2), "bias": rand((4,), F32)}
    check("LayerNormalization", {"x": x}, dtype=F32, opset=17, initializers=inits, axis=1)
    # stash_type=11 (float64): onnxruntime lacks it; compare Y with its float32-stash result
    m64 = one_node_model("LayerNormalization", {"x": x}, 1, opset=17, initializers=inits, axis=1, stash_type=11)
    got = run_glow(m64, {"x": x})
    m32 = one_node_model("LayerNormalization", {"x": x}, 1, opset=17, initializers=inits, axis=1)
    np.testing.assert_allclose(got[0], run_ort(m32, {"x": x})[0], rtol=1e-5, atol=1e-5)
    # Mean and InvStdDev have the type U, which the opset-17 schema allows as float or bfloat16 only: a float64
    # stash exposed as those outputs breaks the op's definition
    m64_all = one_node_model("LayerNormalization", {"x": x}, 3, opset=17, initializers=inits, axis=1, stash_type=11)
    with pytest.raises(ModelError, match=r"output 1 .* is double, which LayerNormalization does not accept"):
        run_glow(m64_all, {"x": x})


def test_layernorm_float16_stash_is_unsupported() -> None:
    x = rand((2, 3), F16)
    model = one_node_model("LayerNormalization", {"x": x}, opset=17, initializers={"s": np.ones(3, F16)},
                           stash_type=10)
    with pytest.raises(UnsupportedError, match="stash_type 10"):
        run_glow(model, {"x": x})


@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=str)
def test_rmsnorm(dtype: np.dtype) -> None:
    x = rand((2, 3, 4), dtype)
    stash: dict[str, Any] = {"stash_type": 11} if dtype == F64 else {}
    for axis in (0, 1, -1):
        scale = rand(x.shape[axis:], dtype, 0.5, 2)
        model = with_outputs(one_node_model("RMSNormalization", {"x": x}, opset=23, initializers={"s": scale},
                                            axis=axis, epsilon=1e-3, **stash), [(dtype, x.shape)])
        compare(model, {"x": x}, dtype)


@pytest.mark.parametrize("op", ["LayerNormalization", "RMSNormalization"])
def test_float64_input_with_float32_stash_computes_in_float32(op: str) -> None:
    """The spec casts to stash_type (default float32); onnxruntime computes float64 inputs in float64."""
    x = rand((2, 3, 4), F64)
    model = with_outputs(one_node_model(op, {"x": x}, opset=23, initializers={"s": np.ones(4, F64)}),
                         [(F64, x.shape)])
    got = run_glow(model, {"x": x})[0]
    want = run_ort(model, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    rounded = run_glow(model, {"x": x.astype(np.float32).astype(F64)})[0]
    np.testing.assert_array_equal(got, rounded)  # only float32 precision of x was used


def test_rmsnorm_mixed_kinds_is_unsupported() -> None:
    x = rand((2, 3), F16)
    model = with_outputs(one_node_model("RMSNormalization", {"x": x}, opset=23,
                                        initializers={"s": np.ones(3, F32)}), [(F32, x.shape)])
    with pytest.raises(UnsupportedError, match="mixed-precision"):
        run_glow(model, {"x": x})


# -- LpNormalization / MeanVarianceNormalization / LRN -------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=str)
def test_lpnorm(dtype: np.dtype) -> None:
    x = rand((3, 4, 5), dtype)
    x[1, :, 2] = 0  # a zero vector along axis 1: output 0
    for axis in (0, 1, -1):
        for p in (1, 2):
            check("LpNormalization", {"x": x}, dtype=dtype, opset=7 if dtype != F64 else 22, axis=axis, p=p)


@pytest.mark.parametrize("dtype", [F32, F16], ids=str)
def test_mvn(dtype: np.dtype) -> None:
    x = rand((2, 3, 4, 5), dtype)
    cases: list[tuple[int, dict[str, Any]]] = [(13, {}), (9, {"axes": [1, 3]}), (13, {"axes": [0, -1]})]
    for opset, kw in cases:
        model = with_outputs(one_node_model("MeanVarianceNormalization", {"x": x}, opset=opset, **kw),
                             [(dtype, x.shape)])
        if dtype == F32:
            compare(model, {"x": x}, dtype)
            continue
        # onnxruntime's float16 expansion is ill-typed: compare with its float32 result
        x32 = x.astype(F32)
        m32 = with_outputs(one_node_model("MeanVarianceNormalization", {"x": x32}, opset=opset, **kw),
                           [(F32, x.shape)])
        want = run_ort(m32, {"x": x32})[0].astype(F16)
        assert_same(run_glow(model, {"x": x}), [want], *tol(F16))


@pytest.mark.parametrize("opset", [9, 13])
def test_lrn(opset: int) -> None:
    x = rand((2, 7, 4, 3), F32)
    for size in (1, 3, 5, 9):
        check("LRN", {"x": x}, dtype=F32, opset=opset, size=size, alpha=1e-2, beta=0.6, bias=1.5)
    check("LRN", {"x": x}, dtype=F32, opset=opset, size=5)


def test_lrn_even_size() -> None:
    """onnxruntime refuses even sizes; the window is [c - (size-1)//2, c + size//2] (ceil on the right)."""
    x = rand((1, 6, 2, 2), F32)
    got = run_glow(one_node_model("LRN", {"x": x}, opset=13, size=4, alpha=0.5, beta=0.75, bias=1.0), {"x": x})[0]
    sq = np.pad(x * x, [(0, 0), (1, 2), (0, 0), (0, 0)])
    window = sum(sq[:, i:i + 6] for i in range(4))
    np.testing.assert_allclose(got, x / (1.0 + 0.5 / 4 * window) ** 0.75, rtol=1e-6)


# -- losses ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_nllloss(reduction: str, dtype: np.dtype) -> None:
    for shape in ((4, 5), (3, 5, 2, 3)):
        x = rand(shape, dtype)
        base = rand((shape[0],) + shape[2:], np.dtype(np.int64), 0, 4, seed=5)
        base.flat[0] = 2
        for weighted in (False, True):
            for ii in (None, 2, -1):
                inits = {"w": rand((5,), dtype, 0.1, 1, 6)} if weighted else {}
                kw = {} if ii is None else {"ignore_index": ii}
                t = base.copy()
                if ii == -1:
                    t.flat[1] = -1
                check("NegativeLogLikelihoodLoss", {"x": x, "t": t.astype(np.int32 if weighted else np.int64)},
                      dtype=dtype, opset=13, initializers=inits, reduction=reduction, **kw)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_softmax_cross_entropy(reduction: str) -> None:
    x = rand((3, 4, 2), F32)
    t = rand((3, 2), np.dtype(np.int64), 0, 3, seed=7)
    t[0, 0] = 1
    for weighted in (False, True):
        for ii in (None, 1):
            inits = {"w": rand((4,), F32, 0.1, 1, 8)} if weighted else {}
            kw = {} if ii is None else {"ignore_index": ii}
            for n_out in (1, 2):
                check("SoftmaxCrossEntropyLoss", {"x": x, "t": t}, dtype=F32, n_outputs=n_out, opset=13,
                      initializers=inits, reduction=reduction, **kw)


def test_loss_reduction_name_is_checked() -> None:
    x, t = rand((2, 3), F32), np.zeros(2, np.int64)
    model = with_outputs(one_node_model("NegativeLogLikelihoodLoss", {"x": x, "t": t}, opset=13), [(F32, ())])
    model.graph.node[0].attribute.append(helper.make_attribute("reduction", "average"))
    with pytest.raises(GlowError, match="average"):
        run_glow(model, {"x": x, "t": t})
