"""The float64 rule and ops computing constants of their own (case 4351: DFT of 3e38 inputs, cpu only):
a twiddle factor that is exactly 0 (sin(pi * n)) is rounded in float32 and float64 alike, so the element
it multiplies is not determined; a wrong answer elsewhere stays `wrong`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from glow_tools.fuzz.cases import INPUTS_DIR, MODEL_FILE
from glow_tools.fuzz.float64 import run_reference_float64, undetermined_reason
from glow_tools.fuzz.isolate import Outcome
from glow_tools.fuzz.runners import classify, run_glow, run_reference

pytestmark = pytest.mark.robustness


def _dft_case(folder: Path, x: np.ndarray) -> str:
    g = helper.make_graph([helper.make_node("DFT", ["x", "", "axis"], ["y"], onesided=1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape)),
                           helper.make_tensor_value_info("axis", TensorProto.INT64, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 2, 2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    (folder / MODEL_FILE).parent.mkdir(parents=True)
    (folder / INPUTS_DIR).mkdir()
    (folder / MODEL_FILE).write_bytes(model.SerializeToString())
    for k, a in enumerate([x, np.array(1, np.int64)]):
        (folder / INPUTS_DIR / f"input_{k}.pb").write_bytes(numpy_helper.from_array(a).SerializeToString())
    return str(folder)


def _judge(case: str, out: np.ndarray) -> str:
    ref = run_reference(case)
    cls, _ = classify(Outcome("ok", {"kind": "outputs", "outputs": [out]}), Outcome("ok", ref))
    if cls != "wrong":
        return cls
    return "unjudged" if undetermined_reason(ref, [out], *run_reference_float64(case)) else cls


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_dft_twiddle_rounding_of_a_3e38_input_is_not_determined(backend: str, tmp_path: Path) -> None:
    x = np.arange(20, dtype=np.float32).reshape(1, 10, 2, 1)
    x[0, 3, 0, 0] = 3e38
    case = _dft_case(tmp_path / "case", x)
    ref = np.asarray(run_reference(case)[0])
    assert abs(ref[0, 5, 0, 1]) > 1e20  # 3e38 * sin(3 * pi): the reference's rounding residue, exact 0
    exact = ref.copy()
    exact[0, 5, 0, 1] = 0.0
    assert _judge(case, exact) == "unjudged"
    glow = run_glow(case, backend)
    assert glow["kind"] == "outputs"
    assert _judge(case, np.asarray(glow["outputs"][0])) in ("match", "unjudged")


def test_dft_twiddle_spread_keeps_a_planted_wrong_answer(tmp_path: Path) -> None:
    x = np.arange(1, 21, dtype=np.float32).reshape(1, 10, 2, 1)
    case = _dft_case(tmp_path / "case", x)
    _, spread = run_reference_float64(case)
    assert 0 < spread[0].max() < 1e-4  # u * sum |x| <= 110 * 2**-24
    planted = np.asarray(run_reference(case)[0]).copy()
    planted[0, 2, 0, 0] *= 1.01
    assert _judge(case, planted) == "wrong"
