"""Findings of the campaign with seed 5, cases 0 to 4,999 (docs/robustness.md), reduced to small models.

Both were the cpu backend's GEMM summing a short K in two interleaved partial sums (even and odd k, kept
by a narrow block to hide the FMA latency): with terms near the float32 range, that order overflows where
the one FMA chain of onnxruntime and of numpy's BLAS does not (case 2090: a broadcast MatMul with K = 4 gave
NaN, +inf from one partial sum and -inf from the other, where both give -1.1e38; case 384: the outer
products of a linear attention's Scan gave inf where both give 9.8e37). A product of at most
``gemm.SEQUENTIAL_K`` terms is now one chain. The first test fails on the code before the fix; the second checks
the chain on ordinary values around the limit.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import glow_core
from tests.robustness.util import F, model

pytestmark = pytest.mark.robustness

#: case 2090's operands, reduced: rows of 3e38 whose products cancel
A = np.array([[3e38, 3e38, 3e38, 1.8492638], [3e38, 3e38, -0.76991606, 3e38],
              [0.37642553, -1.0994008, 0.2982382, 1.3263859]], np.float32)
B = np.array([[1.1266359, 0.844363], [-1.1474687, -1.5447711], [-0.49803245, 0.3169426], [0.9494208, 0.31872764]],
             np.float32)


def _matmul(m: int, k: int, n: int):  # type: ignore[no-untyped-def]
    return model([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", F, [m, k]), ("b", F, [k, n])],
                 [("y", F, [m, n])], opset=13)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_short_product_near_the_float_range_sums_in_one_chain(threads: int) -> None:
    net = glow_core.compile(_matmul(3, 4, 2), "cpu", threads=threads, options={"cache": False})
    got = net.run({"a": A, "b": B})["y"]
    with np.errstate(over="ignore"):
        want = ReferenceEvaluator(_matmul(3, 4, 2)).run(None, {"a": A, "b": B})[0]
    exact = A.astype(np.float64) @ B.astype(np.float64)
    assert np.all(np.isfinite(got)) and np.all(np.isfinite(exact))  # NaN (inf - inf) before the fix
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(got, exact, rtol=1e-6)


def test_one_chain_is_fma_ordered_as_the_reference_on_ordinary_values() -> None:
    rng = np.random.default_rng(0)
    for k in (1, 5, 16, 32, 33, 64):
        a = rng.standard_normal((7, k)).astype(np.float32)
        b = rng.standard_normal((k, 3)).astype(np.float32)
        got = glow_core.compile(_matmul(7, k, 3), "cpu", options={"cache": False}).run({"a": a, "b": b})["y"]
        np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)
