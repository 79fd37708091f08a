"""Findings of the campaign with seed 8 (docs/robustness.md), reduced to small models.

- case 676 (wrong on cpu): Selu with ``alpha`` = 3.4028235e38 (the float32 maximum). The lowering folded
  ``alpha * gamma`` into one constant, which overflowed to inf: ``inf * expm1(0)`` gave NaN at x = 0 (the
  answer is 0), and -inf where ``gamma * (alpha * expm1(x))`` is finite. It now rounds as the formula does,
  ``gamma * (alpha * expm1(x))``, which is the interpreter's kernel.
- case 8673 (wrong on both backends): a float16 Attention (grouped heads, a past of -0.0) was computed in
  float32 throughout and rounded once: 1 of 576 elements two float16 units from the reference. The spec's
  function body computes each step in the operands' type (the scaled Q and K, their product, the masked
  scores, the softmax, the product with V); glow now rounds there too (the softmax itself in float32).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import glow_core
from tests.robustness.util import F, assert_campaign_case_matches, model

pytestmark = pytest.mark.robustness
BACKENDS = ["interpreter", "cpu"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_selu_with_a_huge_alpha_keeps_its_finite_answers(backend: str) -> None:
    node = helper.make_node("Selu", ["x"], ["y"], alpha=3.4028235e38)
    m = model([node], [("x", F, [12])], [("y", F, [12])], [])
    x = np.array([0.0, -0.0, -1e-30, -1e-8, -0.5, -1.0, -3.0, -100.0, 0.5, 2.0, -1e-3, -2e-7], np.float32)
    got = glow_core.compile(m, backend, options={"cache": False} if backend == "cpu" else None).run({"x": x})["y"]
    gamma = np.float32(1.0507009873554805)
    with np.errstate(over="ignore"):
        want = np.where(x > 0, gamma * x, gamma * (np.float32(3.4028235e38) * np.expm1(x)))
        ref = ReferenceEvaluator(m).run(None, {"x": x})[0]
    assert got[0] == 0 and got[1] == 0, "x = 0: alpha * expm1(0) is 0, not inf * 0"
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert np.array_equal(np.isfinite(got[:4]), np.isfinite(ref[:4]))


def test_float16_attention_rounds_each_step_of_its_function_body(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Case 8673, regenerated from the campaign's seed: both backends match the reference."""
    assert_campaign_case_matches(8, 8673, tmp_path / "case", BACKENDS)
