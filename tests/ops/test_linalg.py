"""Det (reference kernel; lowered by Gaussian elimination for interpreter-primitives and cpu), AffineGrid and
SwiGLU (import-time compositions), against numpy / onnx.reference; errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from glow_core import onnx_backend
from glow_core.api import compile as glow_compile
from glow_core.errors import GlowTypeError, ModelError

BACKENDS = ["interpreter", "interpreter-primitives", "cpu"]
RNG = np.random.default_rng(2)


def _model(op: str, inputs: dict[str, np.ndarray], out_shape, inits=(), opset: int = 22, **attrs) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
           for k, v in inputs.items()]
    elem = helper.np_dtype_to_tensor_dtype(next(iter(inputs.values())).dtype)
    node = helper.make_node(op, list(inputs) + [t.name for t in inits], ["y"], **attrs)
    g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", elem, out_shape)], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _run(m: onnx.ModelProto, feeds: list[np.ndarray], backend: str) -> np.ndarray:
    return onnx_backend.prepare(m, backend=backend).run(feeds)[0]


def _matrices() -> dict[str, np.ndarray]:
    swap = np.array([[0.0, 1.0], [1.0, 0.0]])                      # needs a row exchange: det -1
    singular = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])
    zero_col = np.array([[0.0, 1.0, 2.0], [0.0, 3.0, 4.0], [0.0, 5.0, 7.0]])
    return {"swap": swap, "singular": singular, "zero-column": zero_col,
            "batch": RNG.uniform(-2, 2, (2, 3, 4, 4)), "one": RNG.uniform(-2, 2, (5, 1, 1)),
            "big": RNG.uniform(-1, 1, (7, 7)) + 3 * np.eye(7)}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(_matrices()))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_det(backend: str, name: str, dtype) -> None:
    x = _matrices()[name].astype(dtype)
    got = _run(_model("Det", {"x": x}, list(x.shape[:-2])), [x], backend)
    assert got.dtype == dtype and got.shape == x.shape[:-2]
    np.testing.assert_allclose(got, np.linalg.det(x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    if name in ("singular", "zero-column"):
        assert float(got) == 0.0 or abs(float(got)) < 1e-12


def test_det_of_empty_matrices_is_one() -> None:
    x = np.zeros((3, 0, 0), np.float32)
    np.testing.assert_array_equal(_run(_model("Det", {"x": x}, [3]), [x], "interpreter"), np.ones(3, np.float32))


def test_det_needs_square_matrices() -> None:
    x = np.zeros((2, 3), np.float32)
    with pytest.raises((GlowTypeError, ModelError), match="square|Det"):
        glow_compile(_model("Det", {"x": x}, []), "interpreter")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size,align", [((2, 3, 4, 5), 0), ((2, 3, 4, 5), 1), ((1, 1, 2, 3, 4), 0), ((1, 1, 2, 3, 4), 1),
                                        ((3, 1, 1, 6), 0)])
def test_affine_grid_matches_onnx_reference(backend: str, size, align) -> None:
    nd = len(size) - 2
    theta = RNG.uniform(-1, 1, (size[0], nd, nd + 1)).astype(np.float32)
    inits = [helper.make_tensor("size", TensorProto.INT64, [len(size)], list(size))]
    m = _model("AffineGrid", {"theta": theta}, [size[0], *size[2:], nd], inits, opset=20, align_corners=align)
    want = ReferenceEvaluator(m).run(None, {"theta": theta})[0]
    got = _run(m, [theta], backend)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_affine_grid_size_must_match_theta() -> None:
    theta = np.zeros((2, 2, 3), np.float32)
    inits = [helper.make_tensor("size", TensorProto.INT64, [4], [3, 1, 4, 4])]
    with pytest.raises(ModelError, match="size \\[3, 1, 4, 4\\] must be"):
        glow_compile(_model("AffineGrid", {"theta": theta}, [3, 4, 4, 2], inits, opset=20), "interpreter")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("alpha", [1.0, 0.5, 2.5])
def test_swiglu(backend: str, alpha: float) -> None:
    a, b = RNG.standard_normal((2, 3, 4)).astype(np.float32), RNG.standard_normal((2, 3, 4)).astype(np.float32)
    m = _model("SwiGLU", {"a": a, "b": b}, [2, 3, 4], opset=28, alpha=alpha)
    want = a / (1 + np.exp(-alpha * a.astype(np.float64))) * b
    np.testing.assert_allclose(_run(m, [a, b], backend), want, rtol=1e-5, atol=1e-6)


def test_swiglu_does_not_broadcast() -> None:
    a, b = np.zeros((2, 4), np.float32), np.zeros((1, 4), np.float32)
    with pytest.raises((GlowTypeError, ModelError), match="same type and shape|SwiGLU"):
        glow_compile(_model("SwiGLU", {"a": a, "b": b}, [2, 4], opset=28), "interpreter")


def _flex_model(q, k, v, **attrs) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
           for n, a in (("Q", q), ("K", k), ("V", v))]
    out = helper.make_tensor_value_info("Y", helper.np_dtype_to_tensor_dtype(v.dtype),
                                        [q.shape[0], q.shape[1], q.shape[2], v.shape[3]])
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain="ai.onnx.preview", **attrs)
    return helper.make_model(helper.make_graph([node], "g", ins, [out]),
                             opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)])


def _causal_score_mod() -> onnx.GraphProto:
    """Scores + a [L, S] mask constant (0 / -inf above the diagonal), through an initializer of the subgraph."""
    mask = np.triu(np.full((4, 6), -np.inf, np.float32), 1)
    return helper.make_graph([helper.make_node("Add", ["s", "mask"], ["out"])], "score_mod",
                             [helper.make_tensor_value_info("s", TensorProto.FLOAT, None)],
                             [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                             [onnx.numpy_helper.from_array(mask, "mask")])


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("case", ["plain", "gqa-scaled", "fp16", "causal", "precision64"])
def test_flex_attention_matches_onnx_reference(backend: str, case: str) -> None:
    dtype = np.float16 if case == "fp16" else np.float32
    hk = 2 if case == "gqa-scaled" else 4
    q = RNG.standard_normal((2, 4, 4, 8)).astype(dtype)
    k = RNG.standard_normal((2, hk, 6, 8)).astype(dtype)
    v = RNG.standard_normal((2, hk, 6, 5)).astype(dtype)
    attrs = {"gqa-scaled": {"scale": 0.3}, "causal": {"score_mod": _causal_score_mod()},
             "precision64": {"softmax_precision": TensorProto.DOUBLE}}.get(case, {})
    m = _flex_model(q, k, v, **attrs)
    want = ReferenceEvaluator(m).run(None, {"Q": q, "K": k, "V": v})[0]
    got = _run(m, [q, k, v], backend)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=2e-3 if case == "fp16" else 1e-5,
                               atol=2e-3 if case == "fp16" else 1e-6)


def test_flex_attention_head_counts_must_divide() -> None:
    q, k = np.zeros((1, 3, 2, 4), np.float32), np.zeros((1, 2, 2, 4), np.float32)
    with pytest.raises((GlowTypeError, ModelError)):
        glow_compile(_flex_model(q, k, k), "interpreter")
