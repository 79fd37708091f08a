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


def _attention_model(rule: str, hq: int, hkv: int, gated: bool, delta: bool, elem: int = TensorProto.FLOAT) -> object:
    shapes = {"query": [1, 3, hq * 4], "key": [1, 3, hkv * 4], "value": [1, 3, hkv * 4]}
    names = ["query", "key", "value", "", "decay" if gated else "", "beta" if delta else ""]
    shapes |= ({"decay": [1, 3, hkv * 4]} if gated else {}) | ({"beta": [1, 3, hkv]} if delta else {})
    while not names[-1]:
        names.pop()
    node = helper.make_node("LinearAttention", names, ["out", "state"], q_num_heads=hq, kv_num_heads=hkv,
                            update_rule=rule)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, elem, s) for n, s in shapes.items()],
                          [helper.make_tensor_value_info("out", elem, [1, 3, hq * 4]),
                           helper.make_tensor_value_info("state", elem, [1, hkv, 4, 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 27)])


@pytest.mark.parametrize("rule, hq, hkv", [("linear", 2, 2), ("gated", 2, 1), ("delta", 2, 2), ("gated_delta", 4, 2)])
def test_float64_linear_attention_agrees_with_the_reference_on_ordinary_inputs(rule: str, hq: int, hkv: int) -> None:
    """The judge's float64 LinearAttention computes what onnx.reference's (float32) kernel computes."""
    from onnx.reference import ReferenceEvaluator

    from glow_tools.fuzz.float64 import widen_model
    from glow_tools.fuzz.float64_kernels import FLOAT64_KERNELS

    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    m = _attention_model(rule, hq, hkv, gated, delta)
    rng = np.random.default_rng(1)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in m.graph.input}
    feeds = {n: (-np.abs(a) if n == "decay" else np.abs(a) / 2 if n == "beta" else a) for n, a in feeds.items()}
    want = ReferenceEvaluator(m).run(None, feeds)
    got = ReferenceEvaluator(widen_model(m), new_ops=FLOAT64_KERNELS).run(
        None, {n: a.astype(np.float64) for n, a in feeds.items()})
    for w, x in zip(want, got):
        assert x.dtype == np.float64
        np.testing.assert_allclose(x, w, rtol=1e-4, atol=1e-5)


def _attention_case(folder: Path, v_huge: bool) -> tuple[str, list[np.ndarray]]:
    m = _attention_model("linear", 2, 2, False, False)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 3, 8)).astype(np.float32) for _ in range(3))
    k[0, 0, :4] = [1.5, 0.6, 0.0, 0.0]  # state column: [4.5e38 -> inf, 1.8e38, 0, 0]
    q[0, 0, :4] = [1.0, -2.0, 0.1, 0.1]  # float32: inf + (-3.6e38 -> -inf) = NaN; exactly: inf
    if v_huge:
        v[0, 0, 0] = 3e38
    (folder / MODEL_FILE).parent.mkdir(parents=True)
    (folder / INPUTS_DIR).mkdir()
    (folder / MODEL_FILE).write_bytes(m.SerializeToString())
    for n, a in enumerate([q, k, v]):
        (folder / INPUTS_DIR / f"input_{n}.pb").write_bytes(numpy_helper.from_array(a).SerializeToString())
    return str(folder), [q, k, v]


def _judge_all(case: str, outs: list[np.ndarray]) -> str:
    ref = run_reference(case)
    cls, _ = classify(Outcome("ok", {"kind": "outputs", "outputs": outs}), Outcome("ok", ref))
    if cls != "wrong":
        return cls
    return "unjudged" if undetermined_reason(ref, outs, *run_reference_float64(case)) else cls


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_linear_attention_state_past_the_range_is_judged_in_float64(backend: str, tmp_path: Path) -> None:
    """Case 2358 (LinearAttention, values of 3e38, cpu only): the state holds +-inf (its exact values are past
    the float32 range); the reference's products q * state overflow to inf of both signs and give NaN where
    the sum is an infinity. The float64 kernel (state held to the float32 range) gives that infinity."""
    case, _ = _attention_case(tmp_path / "case", True)
    ref = [np.asarray(o) for o in run_reference(case)]
    v64, _ = run_reference_float64(case)
    assert np.isinf(ref[1]).any()  # the state overflows
    nan = np.isnan(ref[0])
    assert nan.any() and np.isinf(v64[0][nan]).all()  # the reference's NaN where the sum is an infinity
    fixed = [ref[0].copy(), ref[1]]
    fixed[0][nan] = v64[0][nan]
    assert _judge_all(case, fixed) == "unjudged"
    glow = run_glow(case, backend)
    assert glow["kind"] == "outputs" and _judge_all(case, list(glow["outputs"])) in ("match", "unjudged")
    planted = [fixed[0].copy(), fixed[1]]
    planted[0][nan] = 1.0  # a finite value where the answer is an infinity
    assert _judge_all(case, planted) == "wrong"


def test_linear_attention_planted_wrong_answer_stays_wrong(tmp_path: Path) -> None:
    case, _ = _attention_case(tmp_path / "case", False)
    ref = [np.asarray(o) for o in run_reference(case)]
    planted = [ref[0] * np.float32(1.01), ref[1]]
    assert _judge_all(case, planted) == "wrong"
