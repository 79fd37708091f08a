"""The judge's float64 rule (glow_tools.fuzz.float64): the second campaign's last `wrong` cases (1284, 2286,
2793, 9026) are not determined in float32, and a wrong answer on the same models stays `wrong`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from glow_tools.fuzz.cases import INPUTS_DIR, MODEL_FILE
from glow_tools.fuzz.float64 import run_reference_float64, undetermined_reason
from glow_tools.fuzz.isolate import Outcome
from glow_tools.fuzz.runners import classify, run_glow, run_reference

pytestmark = pytest.mark.robustness


def _write(folder: Path, model: Any, inputs: list[np.ndarray]) -> str:
    (folder / MODEL_FILE).parent.mkdir(parents=True)
    (folder / INPUTS_DIR).mkdir()
    (folder / MODEL_FILE).write_bytes(model.SerializeToString())
    for k, a in enumerate(inputs):
        (folder / INPUTS_DIR / f"input_{k}.pb").write_bytes(numpy_helper.from_array(a).SerializeToString())
    return str(folder)


def _judge(case: str, outputs: list[np.ndarray]) -> tuple[str, str]:
    """The class of ``outputs`` as glow's answer: the float32 reference, then the float64 rule if it differs."""
    ref = run_reference(case)
    cls, message = classify(Outcome("ok", {"kind": "outputs", "outputs": outputs}), Outcome("ok", ref))
    if cls != "wrong":
        return cls, message
    why = undetermined_reason(ref, outputs, *run_reference_float64(case))
    return ("unjudged", why) if why else (cls, message)


def _fuzz_case(index: int, folder: Path) -> str:
    from glow_tools.fuzz import MUTATORS
    from glow_tools.fuzz.cases import generate, write_case
    from glow_tools.fuzz.seeds import seed_names

    names = seed_names(with_zoo=True)
    if len(names) < 100:
        pytest.skip("needs the ONNX node tests ($GLOW_ONNX_NODE_TESTS)")
    write_case(generate(0, index, names, MUTATORS), folder)
    return str(folder)


@pytest.mark.parametrize("index, seed_model", [(1284, "test_dft_inverse"), (2286, "test_dft_irfft_opset19")])
def test_dft_of_cancelling_1e30_terms_is_not_determined_in_float32(index: int, seed_model: str,
                                                                    tmp_path: Path) -> None:
    """Cases 1284 and 2286 (campaign seed 0), replayed: DFT elements that are sums of +-1e30 terms cancelling to
    about 0. cpu gives ~1e13, the reference 0 or -1.9e21: float32 rounding of the operands alone moves them by
    ~1e22. Such an element is unjudged; an element 1000 times its uncertainty (and the tolerance) away from the
    float64 value stays wrong."""
    import json

    case = _fuzz_case(index, tmp_path / "case")
    assert json.loads((tmp_path / "case" / "case.json").read_text())["seed_model"] == seed_model
    got = run_glow(case, "cpu")["outputs"]
    cls, why = _judge(case, got)
    assert cls in ("match", "unjudged"), why
    ref = run_reference(case)
    v64, spread = run_reference_float64(case)
    assert spread[0].max() > 1e20  # float32 rounding of the 1e30 operands moves some elements by ~1e22
    for k in (int(np.argmax(spread[0])), int(np.argmin(spread[0]))):  # the most and the least uncertain element
        off = [got[0].copy()]
        width = spread[0].flat[k] + 1e-3 * abs(v64[0].flat[k]) + 1e-7  # its uncertainty and the tolerance
        off[0].flat[k] = np.float32(v64[0].flat[k] + 1e3 * width)
        assert _judge(case, off)[0] == "wrong"
    if cls == "unjudged":
        assert "not determined in float32" in why


def _bn_scale_model(opset: int, w: float, conv: bool = False) -> Any:
    """BatchNormalization (scale 1, bias 0, var 0.0067: a factor of 12.2), then a scale layer ``* w``; with
    ``conv``, after a 1x1 Conv of identity weights (into which glow folds both factors)."""
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
             (("s", [1.0, 1.0]), ("b", [0.0, 0.0]), ("m", [0.0873, 0.0]), ("v", [0.006708, 1.0]),
              ("w", np.full((2, 1, 1), w)), ("k", np.eye(2).reshape(2, 2, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "k"], ["c"])] if conv else []
    nodes += [helper.make_node("BatchNormalization", ["c" if conv else "x", "s", "b", "m", "v"], ["t"]),
              helper.make_node("Mul", ["t", "w"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 1, 1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 1, 1])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("opset, conv", [(9, False), (15, False), (9, True)])
def test_batchnorm_past_the_range_then_a_small_scale_is_not_determined(backend: str, opset: int, conv: bool,
                                                                       tmp_path: Path) -> None:
    """Cases 2793 (densenet121: after a MaxPool) and 9026 (inception_v2: after a Conv), reduced: a
    BatchNormalization whose exact result (3.8e37 * 12.2 = 4.6e38) is past float32's range, then a scale
    layer of 0.26: the reference gives inf; after a Conv both backends fold the factors into its filter
    (fold-batchnorm, fold-conv-arith), giving the exact, finite 1.2e38 of the float64 evaluation (the
    inception case's 0.001). Either answer is a float32 evaluation order of the graph: unjudged (or a match).
    A finite answer off the exact value stays wrong. Without the Conv (case 2793), the cpu lowering no longer
    merges the two factors (simplify-arith reassociates float arithmetic only under fast_math, issue 32):
    both backends give the reference's inf."""
    x = np.array([3.8e37, 1.0], np.float32).reshape(1, 2, 1, 1)
    case = _write(tmp_path / "case", _bn_scale_model(opset, 0.26, conv), [x])
    ref = run_reference(case)
    v64, _ = run_reference_float64(case)
    exact = (3.8e37 - 0.0873) / np.sqrt(0.006708 + 1e-5) * 0.26
    assert np.isposinf(ref[0].flat[0]) and v64[0].flat[0] == pytest.approx(exact, rel=1e-6)
    got = run_glow(case, backend)["outputs"]
    if conv:
        assert np.isfinite(got[0].flat[0])  # the folded factor: the pattern of case 9026
    else:
        assert np.isposinf(got[0].flat[0])  # node by node, as the reference
    cls, why = _judge(case, got)
    assert cls == ("match" if np.isposinf(got[0].flat[0]) else "unjudged"), why
    planted = [v64[0].astype(np.float32)]
    assert _judge(case, planted)[0] == "unjudged"
    planted[0].flat[0] *= np.float32(0.9)  # 10% off the exact value
    assert _judge(case, planted)[0] == "wrong"
    planted = [v64[0].astype(np.float32)]
    planted[0].flat[1] += np.float32(0.5)  # a small element that float32 determines
    assert _judge(case, planted)[0] == "wrong"


def test_a_true_value_past_the_range_is_determined_infinite(tmp_path: Path) -> None:
    """The same graph with a scale layer of 2: the exact result (9.3e38) is past the float32 range, so the
    float32 answer is inf; a finite answer (an evaluation that avoided the overflow) is wrong."""
    x = np.array([3.8e37, 1.0], np.float32).reshape(1, 2, 1, 1)
    case = _write(tmp_path / "case", _bn_scale_model(15, 2.0), [x])
    v64, _ = run_reference_float64(case)
    assert v64[0].flat[0] > np.finfo(np.float32).max
    finite = [v64[0].astype(np.float32)]
    finite[0].flat[0] = np.finfo(np.float32).max
    assert _judge(case, finite)[0] == "wrong"
    for backend in ("interpreter", "cpu"):
        assert _judge(case, run_glow(case, backend)["outputs"])[0] == "match"


def test_models_with_float64_tensors_are_not_re_evaluated(tmp_path: Path) -> None:
    """The rule widens float32 to float64; a model with float64 tensors of its own is left to the float32
    judge (its disagreements stay wrong)."""
    g = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.DOUBLE)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [2])])
    case = _write(tmp_path / "case", helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]),
                  [np.array([1.0, 2.0], np.float32)])
    with pytest.raises(ValueError, match="float64 tensors"):
        run_reference_float64(case)


def _exact_times_0_9(case_dir: str, backend: str) -> dict[str, Any]:
    """A planted glow: the float64 answer, 10% off."""
    v64, _ = run_reference_float64(case_dir)
    return {"kind": "outputs", "outputs": [(v * 0.9).astype(np.float32) for v in v64]}


def test_the_campaign_applies_the_rule_and_keeps_a_planted_wrong_answer(tmp_path: Path) -> None:
    """run_case (campaign and --replay): glow's real answers on case 9026's pattern are unjudged, with the
    rule's message; a planted answer 10% off the exact value is still a `wrong` finding."""
    from glow_tools.fuzz.campaign import Settings, replay
    from glow_tools.fuzz.cases import write_meta

    x = np.array([3.8e37, 1.0], np.float32).reshape(1, 2, 1, 1)
    case = _write(tmp_path / "case", _bn_scale_model(9, 0.26, conv=True), [x])
    write_meta(Path(case), {"index": 9026, "campaign_seed": 0, "seed_model": "reduced", "mutators": []})
    rows = replay(Path(case), ["interpreter", "cpu"], Settings(out=tmp_path, onnxruntime=False))
    assert [r["class"] for r in rows] == ["unjudged", "unjudged"], rows
    assert all("not determined in float32" in r["message"] for r in rows)
    planted = replay(Path(case), ["cpu"], Settings(out=tmp_path, onnxruntime=False, glow_runner=_exact_times_0_9))
    assert planted[0]["class"] == "wrong", planted


def test_an_uncertainty_past_the_range_admits_only_the_exact_value_or_a_non_finite_one(tmp_path: Path) -> None:
    """Det of [[3e38, 3e38], [3e38, 3e38]] (the CI campaign's planted `wrong` case): exactly 0, but float32
    rounding of the operands moves it by ~1e70, past the float32 range: a float32 evaluation gives 0 (LU) or
    NaN (inf - inf). Those are unjudged or match; a finite 1 is wrong."""
    g = helper.make_graph([helper.make_node("Det", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    case = _write(tmp_path / "case", helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]),
                  [np.full((3, 2, 2), 3e38, np.float32)])
    v64, spread = run_reference_float64(case)
    assert v64[0].tolist() == [0.0] * 3 and (spread[0] > 1e60).all()
    assert _judge(case, [np.zeros(3, np.float32)])[0] == "match"
    assert _judge(case, [np.full(3, np.nan, np.float32)])[0] == "unjudged"
    assert _judge(case, [np.ones(3, np.float32)])[0] == "wrong"
    assert _judge(case, [np.full(3, 1e30, np.float32)])[0] == "wrong"
