"""Answers that were silently wrong on hostile values; the ONNX reference decides."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import glow_core
from tests.robustness.util import F, model

pytestmark = pytest.mark.robustness
BACKENDS = ["interpreter", "interpreter-primitives", "cpu"]


def _backend(name: str) -> str:
    if name == "cpu":
        pytest.importorskip("glow_backend_cpu")
    return name


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("qk_mode", [0, 3])
def test_attention_fully_masked_row_with_nan_in_a_masked_key_is_zero(backend: str, qk_mode: int) -> None:
    """Row 1 masks every key: the reference gives 0 (decided on the mask), not the NaN of key 2's score."""
    node = helper.make_node("Attention", ["q", "k", "v", "m"], ["y", "", "", "qk"], qk_matmul_output_mode=qk_mode)
    m = model([node], [("q", F, [1, 1, 3, 4]), ("k", F, [1, 1, 3, 4]), ("v", F, [1, 1, 3, 4]),
                       ("m", TensorProto.BOOL, [3, 3])], [("y", F, [1, 1, 3, 4]), ("qk", F, [1, 1, 3, 3])], opset=23)
    r = np.random.default_rng(0)
    q, k, v = (r.standard_normal((1, 1, 3, 4)).astype(np.float32) for _ in range(3))
    k[0, 0, 2] = np.nan
    feeds = {"q": q, "k": k, "v": v, "m": np.array([[1, 1, 0], [0, 0, 0], [1, 0, 0]], bool)}
    want = ReferenceEvaluator(m).run(None, feeds)
    got = glow_core.compile(m, backend=_backend(backend)).run(feeds)
    assert not np.isnan(want[0][0, 0, 1]).any()
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-6, atol=1e-6)  # NaN where the reference has NaN
    np.testing.assert_allclose(got["qk"], want[1], rtol=1e-6, atol=1e-6)
    assert not np.isnan(got["y"][0, 0, 1]).any()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("constant_w", [False, True])
def test_conv_transpose_with_infinite_weights_gives_inf_not_nan(backend: str, constant_w: bool) -> None:
    w = np.ones((1, 2, 3, 3), np.float32)
    w[0, 0, 1, 1], w[0, 1, 0, 0] = -np.inf, np.inf
    inits = [numpy_helper.from_array(w, "w")] if constant_w else []
    inputs = [("x", F, [1, 1, 3, 3])] + ([] if constant_w else [("w", F, [1, 2, 3, 3])])
    m = model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 1], pads=[1, 0, 0, 1])],
              inputs, [("y", F, [1, 2, 6, 4])], inits, opset=17)
    feeds = {"x": np.arange(1, 10, dtype=np.float32).reshape(1, 1, 3, 3)}
    if not constant_w:
        feeds["w"] = w
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    got = glow_core.compile(m, backend=_backend(backend)).run(feeds)["y"]
    assert np.isinf(want).any() and not np.isnan(want).any()
    np.testing.assert_array_equal(got, want)
