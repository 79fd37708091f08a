"""Regression tests for the campaign's `wrong` cases (issue 14): LRN judged by a corrected reference,
CausalConvWithState with overflowing products on the interpreter kernel."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import glow_core


def _model(node: object, inputs: dict[str, tuple[int, ...]], outputs: dict[str, tuple[int, ...]], opset: int) -> object:
    g = helper.make_graph([node], "g",
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_reference_lrn_is_corrected_to_normalize_every_channel() -> None:
    """Cases 5971/7723/9026: onnx.reference's LRN sums squares only for channels < N (its loop runs over the
    batch axis); the corrected kernel follows the spec, and glow (and onnxruntime) agree with it."""
    from glow_tools.fuzz.reference_fixes import new_ops
    m = _model(helper.make_node("LRN", ["x"], ["y"], size=5, alpha=1e-4, beta=0.75, bias=1e-45),
               {"x": (1, 6, 1, 1)}, {"y": (1, 6, 1, 1)}, 13)
    x = np.abs(np.random.default_rng(0).standard_normal((1, 6, 1, 1))).astype(np.float32)
    x[0, 3] = 1e30  # its square overflows to inf in float32: its window's channels come out 0
    raw = ReferenceEvaluator(m).run(None, {"x": x})[0]
    fixed = ReferenceEvaluator(m, new_ops=new_ops(13)).run(None, {"x": x})[0]
    assert raw[0, 1:, 0, 0].tolist() != [0.0] * 5  # the uncorrected reference leaves them unnormalized
    assert fixed[0, 1:, 0, 0].tolist() == [0.0] * 5
    for backend in ("interpreter", "interpreter-primitives", "cpu"):
        got = glow_core.compile(m, backend=backend).run({"x": x})["y"]
        np.testing.assert_allclose(got, fixed, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("backend", ["interpreter", "interpreter-primitives", "cpu"])
def test_causal_conv_overflowing_products_give_what_the_reference_gives(backend: str) -> None:
    """Case 4961: products of -inf then +inf magnitude; the interpreter kernel summed rounded products (NaN),
    the reference's depthwise Conv (and the lowering) give -inf."""
    m = _model(helper.make_node("CausalConvWithState", ["x", "w"], ["y", "s"]),
               {"x": (1, 1, 4), "w": (1, 1, 4)}, {"y": (1, 1, 4), "s": (1, 1, 3)}, 27)
    x = np.array([[[-1.42, -1.706, 1.95, -0.51]]], np.float32)
    w = np.array([[[-0.907, 3e38, 3e38, 0.129]]], np.float32)
    want = ReferenceEvaluator(m).run(None, {"x": x, "w": w})[0]
    got = glow_core.compile(m, backend=backend).run({"x": x, "w": w})["y"]
    np.testing.assert_array_equal(got, want)
