"""Findings of the campaign with seed 11 (docs/robustness.md), each with the model reduced to one node.

- case 405 (wrong on cpu): Shrink with ``lambd = -1e38``. Both of the spec's cases hold for every input ("If x <
  -lambd, y = x + bias; If x > lambd, y = x - bias"); the interpreter and onnx.reference take the first, the
  lowering took the second. The lowering now tests ``x < -lambd`` last, so it decides.
- case 1839 (wrong on cpu): Unique along an axis of an all-NaN input. numpy.unique (the interpreter's kernel,
  and onnx.reference's) compares slices with ``!=``, so a slice holding a NaN equals no other: three columns,
  where the cpu kernel's grouping took NaN for equal to NaN and gave one. Flattened, the NaNs stay one value
  (numpy's ``equal_nan``) on both backends.
- case 3282 (wrong on both backends; the judge): MeanVarianceNormalization of values all ``1e30``. The
  reference evaluates the op's function body, whose ``E[X^2]`` overflows float32 (NaN); glow's answer is the
  exact one, 0. The float64 rule could not evaluate the body (it adds a float32 epsilon to a float64 tensor,
  which the reference refuses); a float64 kernel of the body now does, and the node-wise rule excuses glow.
- case 340 (wrong on the interpreter): a real DFT of lines holding NaN. The spec's sum makes every output
  element of such a line NaN, the imaginary parts included (``0 * NaN``); numpy's FFT left the zero
  frequency's imaginary part 0. The interpreter now gives NaN there, as the cpu backend did.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import glow_core
from tests.robustness.test_fuzz_judge_strict import _case, _glow, _judge
from tests.robustness.util import F, assert_campaign_case_matches, model

pytestmark = pytest.mark.robustness
BACKENDS = ["interpreter", "cpu"]


@pytest.mark.parametrize("index, backends", [(405, ["interpreter", "cpu"]), (1839, ["interpreter", "cpu"]),
                                             (340, ["interpreter", "cpu"])])
def test_campaign_cases_match(index: int, backends: list[str], tmp_path: Path) -> None:
    assert_campaign_case_matches(11, index, tmp_path, backends)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("lambd", [-1e38, -0.5, 0.0, 1.5])
def test_shrink_takes_the_specs_first_case_where_both_hold(backend: str, lambd: float) -> None:
    m = model([helper.make_node("Shrink", ["x"], ["y"], lambd=lambd, bias=1.5)], [("x", F, [7])], [("y", F, [7])])
    x = np.array([-3.0, -2.0, -0.25, 0.0, 0.25, 2.0, 3.0], np.float32)
    want = np.where(x < -lambd, x + 1.5, np.where(x > lambd, x - 1.5, 0.0)).astype(np.float32)
    np.testing.assert_array_equal(ReferenceEvaluator(m).run(None, {"x": x})[0], want)
    np.testing.assert_array_equal(glow_core.compile(m, backend).run({"x": x})["y"], want)


def _unique(backend: str, x: np.ndarray, **attrs: int) -> tuple[np.ndarray, np.ndarray]:
    dims = ["r", "c"] if "axis" in attrs else ["u"]
    m = model([helper.make_node("Unique", ["x"], ["y", "idx"], **attrs)], [("x", F, list(x.shape))],
              [("y", F, dims), ("idx", TensorProto.INT64, ["n"])], opset=11)
    got = glow_core.compile(m, backend).run({"x": x})
    n = int(got["idx[count]"])
    ax = attrs.get("axis", 0)
    return np.take(got["y"], np.arange(n), axis=ax), got["idx"][:n]


@pytest.mark.parametrize("backend", BACKENDS)
def test_unique_along_an_axis_keeps_every_slice_holding_a_nan(backend: str) -> None:
    nan = np.nan
    x = np.array([[nan, 1.0, nan, 1.0, 2.0], [0.0, 3.0, 0.0, 3.0, 2.0]], np.float32)
    y, idx = _unique(backend, x, axis=1)
    # numpy: the column (1, 3) twice is one; the two (nan, 0) columns are two; sorted, NaN last
    assert idx.tolist() == [1, 4, 0, 2]
    np.testing.assert_array_equal(y, x[:, [1, 4, 0, 2]])
    y, idx = _unique(backend, x)  # flattened: the NaNs are one value
    assert idx.tolist() == [5, 1, 4, 6, 0]
    np.testing.assert_array_equal(y, np.array([0.0, 1.0, 2.0, 3.0, nan], np.float32))


def _mvn_case(tmp_path: Path, values: np.ndarray) -> str:
    m = model([helper.make_node("MeanVarianceNormalization", ["x"], ["y"])], [("x", F, [3, 3, 3, 1])],
              [("y", F, [3, 3, 3, 1])], opset=13)
    return _case(tmp_path / "case", m, [values])


def test_mvn_of_huge_equal_values_is_judged_by_the_float64_body(tmp_path: Path) -> None:
    """Glow's 0 is unjudged (the float64 body gives 0; float32 overflows); a planted 0.5, or 1, stays wrong."""
    case = _mvn_case(tmp_path, np.full((3, 3, 3, 1), 1e30, np.float32))
    for backend in BACKENDS:
        got = _glow(case, backend)
        assert np.all(got[0] == 0), backend
        assert _judge(case, got)[0] == "unjudged", backend
    for planted in (0.5, 1.0):
        assert _judge(case, [np.full((3, 3, 3, 1), planted, np.float32)])[0] == "wrong", planted


def test_the_float64_mvn_is_the_function_body() -> None:
    from glow_tools.fuzz.float64_kernels import MeanVarianceNormalization

    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5))
    m = model([helper.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=[0, 2])],
              [("x", TensorProto.DOUBLE, [2, 3, 4, 5])], [("y", TensorProto.DOUBLE, [2, 3, 4, 5])])
    got = ReferenceEvaluator(m, new_ops=[MeanVarianceNormalization]).run(None, {"x": x})[0]
    mean = x.mean(axis=(0, 2), keepdims=True)
    var = (x * x).mean(axis=(0, 2), keepdims=True) - mean * mean
    np.testing.assert_allclose(got, (x - mean) / (np.sqrt(var) + float(np.float32(1e-9))), rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("onesided", [0, 1])
def test_a_dft_line_holding_a_nan_is_nan_throughout(backend: str, onesided: int) -> None:
    m = model([helper.make_node("DFT", ["x"], ["y"], axis=1, onesided=onesided)], [("x", F, [3, 8, 1])],
              [("y", F, [3, 5 if onesided else 8, 2])], opset=17)
    x = np.random.default_rng(1).standard_normal((3, 8, 1)).astype(np.float32)
    x[0, 3, 0] = np.nan
    y = glow_core.compile(m, backend).run({"x": x})["y"]
    assert np.isnan(y[0]).all()  # every element of the line, real and imaginary parts
    assert np.isfinite(y[1:]).all()
    want = np.fft.fft(x[1:, :, 0].astype(np.float64), axis=1)[:, : y.shape[1]]
    np.testing.assert_allclose(y[1:, :, 0] + 1j * y[1:, :, 1], want, atol=1e-5)
