"""The per-run path of a staged (run-time control-flow) network compiles nothing once an input
signature has been seen (issue 15: silero_vad.onnx ran ~1000x slower than onnxruntime on a loaded
machine; the cause was the cpu runtime's barrier waits, not recompiling, and these tests keep it so).

Compiles are counted at ``compile_function`` as the control-flow executor calls it (every stage,
branch and rest-of-graph compile goes through it)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import glow_core
from glow_core.controlflow import StagedExecutable
from tests.controlflow import cfmodels as cm
from tests.controlflow.test_control_flow import _check, _vad_feeds
from tests.robustness.util import run_together

BACKENDS = ["interpreter", "cpu"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_signature_runs_compile_nothing(backend: str, compiles: list[int]) -> None:
    model = cm.vad_like()
    net = glow_core.compile(model, backend, {"x": (1, 100)})
    assert isinstance(net.executable, StagedExecutable)
    assert compiles, "the staged network compiles through compile_function (else this test counts nothing)"
    _check(net, model, _vad_feeds(100, 16000))  # a first run may compile what could not be compiled ahead
    after_first = len(compiles)
    for seed in range(5):  # same shapes and dtypes, other values (a streaming caller)
        _check(net, model, _vad_feeds(100, 16000, seed=seed + 1))
    assert len(compiles) == after_first
    _check(net, model, _vad_feeds(100, 8000))  # the other top-level branch was compiled ahead
    for seed in range(5):
        _check(net, model, _vad_feeds(100, 8000, seed=seed + 1))
        _check(net, model, _vad_feeds(100, 16000, seed=seed + 1))
    assert len(compiles) == after_first


def _shape_by_scalar_after_if() -> onnx.ModelProto:
    """``y = If(sum(x) > 0, x * 2, x - 1)``, then ``y[:, :k]``: the scalar input ``k`` decides the shape
    of the nodes after a run-time If, so that part is compiled per value of ``k``."""
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    then_g = helper.make_graph([helper.make_node("Constant", [], ["two"], value_float=2.0),
                                helper.make_node("Mul", ["x", "two"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", f, [1, 8])])
    else_g = helper.make_graph([helper.make_node("Constant", [], ["one"], value_float=1.0),
                                helper.make_node("Sub", ["x", "one"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", f, [1, 8])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Constant", [], ["zero"], value_float=0.0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Constant", [], ["axes1"], value=onnx.numpy_helper.from_array(np.array([0], np.int64))),
             helper.make_node("Unsqueeze", ["k", "axes1"], ["ends"]),
             helper.make_node("Constant", [], ["starts"], value=onnx.numpy_helper.from_array(np.array([0], np.int64))),
             helper.make_node("Constant", [], ["axis"], value=onnx.numpy_helper.from_array(np.array([1], np.int64))),
             helper.make_node("Slice", ["y", "starts", "ends", "axis"], ["out"])]
    g = helper.make_graph(nodes, "shape_by_scalar",
                          [helper.make_tensor_value_info("x", f, [1, 8]), helper.make_tensor_value_info("k", i64, [])],
                          [helper.make_tensor_value_info("out", f, [1, None])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_shape_deciding_scalar_recompiles_once_per_value(backend: str, compiles: list[int]) -> None:
    model = _shape_by_scalar_after_if()
    net = glow_core.compile(model, backend)
    assert isinstance(net.executable, StagedExecutable)
    rng = np.random.default_rng(0)

    def feeds(k: int, sign: float) -> dict[str, np.ndarray]:
        return {"x": (np.abs(rng.standard_normal((1, 8))) * sign).astype(np.float32), "k": np.array(k, np.int64)}

    seen: dict[int, int] = {}
    for k in (3, 5, 3, 8, 5, 3, 8):
        before = len(compiles)
        for sign in (1.0, -1.0, 1.0, -1.0, 1.0):  # both branches, five runs per value
            got = _check(net, model, feeds(k, sign))
            assert got["out"].shape == (1, k)
        grew = len(compiles) - before
        if k in seen:
            assert grew == 0, f"k={k} was compiled for before and recompiled"
        else:
            # one compile of the part after the If, bound to this k (the branches were compiled ahead)
            assert grew == 1, f"k={k}: {grew} compiles for a new value, expected 1"
            seen[k] = grew
    assert set(seen) == {3, 5, 8}


@pytest.mark.parametrize("backend", BACKENDS)
def test_eight_threads_share_a_staged_network_whose_rest_binds_an_input(backend: str, compiles: list[int]) -> None:
    """The program after the If finds ``k`` decides shapes on its first compile: threads running it at
    once share the bound set (controlflow/cache.py) and none gets a spurious DynamicValueError."""
    model = _shape_by_scalar_after_if()
    x = np.arange(8, dtype=np.float32).reshape(1, 8)
    for k in (3, 5):
        net = glow_core.compile(model, backend)
        before = len(compiles)
        results = run_together(8, lambda: net.run({"x": x, "k": np.array(k, np.int64)})["out"])  # noqa: B023
        assert len(results) == 8 and all(np.array_equal(r, (x * 2)[:, :k]) for r in results)
        assert 1 <= len(compiles) - before <= 8  # threads may race to the same compile; the rest hit the cache
        after = len(compiles)
        net.run({"x": x, "k": np.array(k, np.int64)})
        assert len(compiles) == after
