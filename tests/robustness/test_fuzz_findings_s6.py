"""Findings of the campaign with seed 6 (docs/robustness.md), reduced to small models.

Case 122 (LeakyRelu with ``alpha = -inf``): glow gave the spec's ``f(x) = x for x >= 0`` and the judge
called it wrong, because ``onnx.reference`` multiplies a positive input by ``1 - (1 - 1) * alpha``, NaN for
an infinite alpha. The judge's reference now keeps ``x`` where ``x >= 0`` for LeakyRelu, PRelu and Elu
(``glow_tools.fuzz.reference_nonfinite``). Glow's own Elu took its negative branch at ``x = 0`` like the
reference (``alpha * expm1(0)``: NaN for an infinite alpha); it now follows the spec there too.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_tools.fuzz.reference_fixes import new_ops
from tests.robustness.util import F, model

pytestmark = pytest.mark.robustness

X = np.array([[1.5, 0.0, -0.0, -2.0, 0.25, -0.5, np.nan, 3.0]], np.float32)


def _unary(op: str, alpha: float):  # type: ignore[no-untyped-def]
    return model([helper.make_node(op, ["x"], ["y"], alpha=alpha)], [("x", F, [1, 8])], [("y", F, [1, 8])],
                 opset=16)


def _prelu():  # type: ignore[no-untyped-def]
    return model([helper.make_node("PRelu", ["x", "s"], ["y"])], [("x", F, [1, 8]), ("s", F, [8])],
                 [("y", F, [1, 8])], opset=16)


def _spec(op: str, x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """The spec's piecewise definitions, in float64: the identity for ``x >= 0``."""
    x64, a64 = x.astype(np.float64), np.broadcast_to(alpha, x.shape).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        neg = a64 * np.expm1(x64) if op == "Elu" else a64 * x64
    return np.where(x64 < 0, neg, x64).astype(np.float32)


@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
@pytest.mark.parametrize("op", ["LeakyRelu", "Elu"])
@pytest.mark.parametrize("alpha", [-np.inf, np.inf, 0.5])
def test_an_infinite_coefficient_leaves_the_non_negative_inputs_alone(backend: str, op: str, alpha: float) -> None:
    net = glow_core.compile(_unary(op, alpha), backend, options={"cache": False} if backend == "cpu" else None)
    got = net.run({"x": X})["y"]
    np.testing.assert_array_equal(got, _spec(op, X, np.float32(alpha)))  # Elu at 0: NaN before the fix


@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
def test_prelu_with_infinite_slopes(backend: str) -> None:
    s = np.array([np.inf, -np.inf, np.inf, -np.inf, 2.0, np.inf, 1.0, -np.inf], np.float32)
    net = glow_core.compile(_prelu(), backend, options={"cache": False} if backend == "cpu" else None)
    np.testing.assert_array_equal(net.run({"x": X, "s": s})["y"], _spec("PRelu", X, s))


@pytest.mark.parametrize("op", ["LeakyRelu", "Elu"])
def test_the_judge_reference_follows_the_spec_at_non_negative_inputs(op: str) -> None:
    m = _unary(op, -np.inf)
    with np.errstate(all="ignore"):
        raw = ReferenceEvaluator(m).run(None, {"x": X})[0]
        fixed = ReferenceEvaluator(m, new_ops=new_ops(16)).run(None, {"x": X})[0]
    want = _spec(op, X, np.float32(-np.inf))
    assert np.isnan(raw[0, 1])  # the reference's departure at 0 (and, for LeakyRelu, at every x > 0)
    np.testing.assert_array_equal(fixed, want)


def test_the_corrected_reference_still_judges_the_negative_inputs() -> None:
    """The correction keeps ``x`` at ``x >= 0`` only: a backend answering ``x`` everywhere is still wrong."""
    m = _prelu()
    s = np.full(8, 2.0, np.float32)
    with np.errstate(all="ignore"):
        fixed = ReferenceEvaluator(m, new_ops=new_ops(16)).run(None, {"x": X, "s": s})[0]
    negative = X < 0
    assert not np.array_equal(fixed[negative], X[negative])
    np.testing.assert_array_equal(fixed[negative], 2 * X[negative])


# -- case 2627: a variance as E[x^2] - E[x]^2 over copies of 65504 --------------------------------------------

def _variance_model():  # type: ignore[no-untyped-def]
    """``1 / sqrt(mean(x * x) - mean(x)^2 + 1e-5)`` per row, as the expanded LayerNormalization writes it."""
    from onnx import numpy_helper

    mk = helper.make_node
    consts = [numpy_helper.from_array(np.array([1], np.int64), "axes"),
              numpy_helper.from_array(np.array(1e-5, np.float32), "eps")]
    nodes = [mk("Mul", ["x", "x"], ["sq"]), mk("ReduceMean", ["sq", "axes"], ["ms"]),
             mk("ReduceMean", ["x", "axes"], ["m"]), mk("Mul", ["m", "m"], ["sm"]), mk("Sub", ["ms", "sm"], ["var"]),
             mk("Add", ["var", "eps"], ["ve"]), mk("Sqrt", ["ve"], ["sd"]), mk("Reciprocal", ["sd"], ["y"])]
    m = model(nodes, [("x", F, [2, 60])], [("y", F, [2, 1])], opset=18)
    m.graph.initializer.extend(consts)
    return m


def _judge_case(tmp_path, outputs: list[np.ndarray]) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """The campaign's judgement: the reference, then the float64 rule with onnxruntime's outputs and the
    node-wise rounded evaluation."""
    from glow_tools.fuzz.float64 import run_reference_float64, undetermined_reason
    from glow_tools.fuzz.float64_rounded import run_reference_rounded
    from glow_tools.fuzz.isolate import Outcome
    from glow_tools.fuzz.runners import classify, run_onnxruntime, run_reference
    from tests.robustness.test_fuzz_judge_strict import _case

    case = _case(tmp_path / "case", _variance_model(), [np.full((2, 60), 65504, np.float32)])
    ref = run_reference(case)
    cls, message = classify(Outcome("ok", {"kind": "outputs", "outputs": outputs}), Outcome("ok", ref))
    if cls != "wrong":
        return cls, message
    why = undetermined_reason(ref, outputs, *run_reference_float64(case), onnxruntime=run_onnxruntime(case),
                              rounded=run_reference_rounded(case))
    return ("unjudged", why) if why else (cls, message)


def test_the_correctly_rounded_mean_is_not_called_wrong(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The mean of sixty squares of 65504 is the square exactly; numpy's and onnxruntime's float32 sums give one
    unit less, so their variance is negative and the result NaN. The cpu backend's sum is the correctly
    rounded one: the variance is 0 and the result 1 / sqrt(1e-5)."""
    got = glow_core.compile(_variance_model(), "cpu", options={"cache": False}).run(
        {"x": np.full((2, 60), 65504, np.float32)})["y"]
    assert np.all(np.isfinite(got))
    cls, why = _judge_case(tmp_path, [got])
    assert cls == "unjudged" and "correctly rounded" in why, why


@pytest.mark.parametrize("planted", [300.0, 1.0, np.nan])
def test_a_planted_answer_beside_the_node_wise_one_is_wrong(tmp_path, planted: float) -> None:  # type: ignore[no-untyped-def]
    """The node-wise exception excuses glow's answer only: 300.0 (within float32's spread of the float64 value,
    but not the node-wise result), 1.0 (far from both) and the reference's own NaN... which is no dispute."""
    cls, _ = _judge_case(tmp_path, [np.full((2, 1), planted, np.float32)])
    assert cls == ("match" if np.isnan(planted) else "wrong")


# -- case 4696: a Loop whose iteration number decides its body's shapes, run 4.6e18 times ----------------------

def _sliding_loop(scan: bool):  # type: ignore[no-untyped-def]
    """``y += sum(x[i:i + 1])`` for ``i < M`` (the iteration number feeds a Slice: every new value of it
    compiles the body again), with the slice as a scan output (shape [1], then [0] from i = 5) or not."""
    from onnx import numpy_helper

    mk = helper.make_node
    x = numpy_helper.from_array(np.arange(1, 6, dtype=np.float32), "x")
    one = numpy_helper.from_array(np.array([1], np.int64), "one")
    zero = numpy_helper.from_array(np.array([0], np.int64), "zero")
    body_nodes = [mk("Identity", ["c"], ["c_out"]), mk("Unsqueeze", ["i", "zero"], ["start"]),
                  mk("Add", ["start", "one"], ["end"]), mk("Slice", ["x", "start", "end"], ["s"]),
                  mk("ReduceSum", ["s"], ["r"], keepdims=1), mk("Add", ["y", "r"], ["y_out"])]
    outs = [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("y_out", F, [1])]
    if scan:
        body_nodes.append(mk("Identity", ["s"], ["scan"]))
        outs.append(helper.make_tensor_value_info("scan", F, ["n"]))
    body = helper.make_graph(body_nodes, "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                                                  helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                                  helper.make_tensor_value_info("y", F, [1])], outs, [x, one, zero])
    graph_outs = [helper.make_tensor_value_info("y_final", F, [1])]
    if scan:
        graph_outs.append(helper.make_tensor_value_info("scans", F, ["steps", "n"]))
    g = helper.make_graph([helper.make_node("Loop", ["m", "cond", "y0"], [o.name for o in graph_outs], body=body)],
                          "sliding", [helper.make_tensor_value_info("m", TensorProto.INT64, []),
                                      helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                                      helper.make_tensor_value_info("y0", F, [1])], graph_outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _loop_feeds(m: int) -> dict[str, np.ndarray]:
    return {"m": np.array(m, np.int64), "cond": np.array(True), "y0": np.array([0.5], np.float32)}


@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
def test_scan_values_of_another_shape_end_the_loop_at_once(backend: str) -> None:
    """Case 4696: the stacking error came after the last iteration, and the iterations (a compile each, the
    iteration limit 100,000) took minutes; it now comes at the first step of another shape."""
    import time

    from glow_core.errors import ExecutionError

    net = glow_core.compile(_sliding_loop(scan=True), backend)
    t0 = time.process_time()
    with pytest.raises(ExecutionError, match=r"scan output 0 has different shapes.*\[1\] in the first, \[0\] in "
                                             r"iteration 5"):
        net.run(_loop_feeds(4611686018427387903))
    assert time.process_time() - t0 < 20  # 6 compiles, not 100,000


@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
def test_a_body_compiled_every_iteration_is_bounded(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from glow_core.controlflow.hostops import MAX_LOOP_COMPILES_ENV
    from glow_core.errors import ExecutionError

    monkeypatch.setenv(MAX_LOOP_COMPILES_ENV, "20")
    net = glow_core.compile(_sliding_loop(scan=False), backend)
    np.testing.assert_array_equal(net.run(_loop_feeds(12))["y_final"], [15.5])  # 12 compiles: within the bound
    with pytest.raises(ExecutionError, match=r"its body was compiled 21 times in this run: the value\(s\) of 'i' "
                                             r"decide its shapes") as e:
        net.run(_loop_feeds(10**12))
    assert MAX_LOOP_COMPILES_ENV in (e.value.hint or "")
    monkeypatch.setenv(MAX_LOOP_COMPILES_ENV, "100")
    np.testing.assert_array_equal(net.run(_loop_feeds(40))["y_final"], [15.5])
