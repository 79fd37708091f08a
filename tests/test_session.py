"""``glow_core.InferenceSession``: an onnxruntime script runs on glow with the import and the provider changed.

The Done-when test of issue 31 is :func:`test_an_onnxruntime_script_runs_on_glow_with_two_changes`: the
script below is run once as written (onnxruntime, the oracle) and once with ``import onnxruntime as ort``
-> ``import glow_core as ort`` and ``CPUExecutionProvider`` -> ``cpu``; every result must match.
"""

from __future__ import annotations

import inspect
import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.errors import BudgetError, InputError, UnknownBackendError, UnsupportedOpsError
from glow_core.session import session as session_module

pytest.importorskip("glow_backend_cpu")

#: an ordinary onnxruntime script: load a model, list its inputs, run two batch sizes, ask for one output by
#: name, reuse a caller-owned output buffer across runs
ORT_SCRIPT = '''
import numpy as np
import onnxruntime as ort

sess = ort.InferenceSession(MODEL_PATH, providers=["CPUExecutionProvider"])
inputs = [(i.name, i.type, i.shape) for i in sess.get_inputs()]
outputs = [(o.name, o.type, o.shape) for o in sess.get_outputs()]
name = sess.get_inputs()[0].name
rng = np.random.default_rng(0)
results = {}
for batch in (1, 4):
    x = rng.standard_normal((batch, 8)).astype(np.float32)
    results[f"all_{batch}"] = sess.run(None, {name: x})
(results["probs_only"],) = sess.run(["probs"], {name: x})
y = np.empty((4, 10), np.float32)
binding = sess.io_binding()
binding.bind_cpu_input(name, x)
binding.bind_ortvalue_output("probs", ort.OrtValue.ortvalue_from_numpy(y))
sess.run_with_iobinding(binding)
results["bound_1"] = y.copy()
binding.bind_cpu_input(name, 2 * x)
sess.run_with_iobinding(binding)
results["bound_2"] = y.copy()
results["copied"] = binding.copy_outputs_to_cpu()[0]
'''


def mlp_model(batch: str | int = "batch") -> onnx.ModelProto:
    """x[batch, 8] -> MatMul, Add, Relu -> hidden[batch, 16] -> MatMul, Softmax -> probs[batch, 10]."""
    r = np.random.default_rng(0)
    inits = [numpy_helper.from_array(r.standard_normal((8, 16)).astype(np.float32), "W1"),
             numpy_helper.from_array(r.standard_normal(16).astype(np.float32), "b1"),
             numpy_helper.from_array(r.standard_normal((16, 10)).astype(np.float32), "W2")]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h0"], name="fc1"),
             helper.make_node("Add", ["h0", "b1"], ["h1"], name="bias1"),
             helper.make_node("Relu", ["h1"], ["hidden"], name="relu1"),
             helper.make_node("MatMul", ["hidden", "W2"], ["logits"], name="fc2"),
             helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1)]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, 10]),
                               helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [batch, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def with_custom_output(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with a third output computed by an operator no backend imports (com.example::Frobnicate)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.node.append(helper.make_node("Frobnicate", ["hidden"], ["odd"], name="frob", domain="com.example"))
    m.graph.output.append(helper.make_tensor_value_info("odd", TensorProto.FLOAT, ["batch", 16]))
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    return m


def _run_script(text: str, model: Path) -> dict[str, Any]:
    namespace: dict[str, Any] = {"MODEL_PATH": str(model)}
    exec(compile(text, "<script>", "exec"), namespace)  # noqa: S102  (the test's own script)
    return namespace


def test_an_onnxruntime_script_runs_on_glow_with_two_changes(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    model = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), str(model))
    glow_text = ORT_SCRIPT.replace("import onnxruntime as ort", "import glow_core as ort") \
        .replace("CPUExecutionProvider", "cpu")
    assert glow_text.count("\n") == ORT_SCRIPT.count("\n") and "onnxruntime" not in glow_text
    want, got = _run_script(ORT_SCRIPT, model), _run_script(glow_text, model)
    assert got["inputs"] == want["inputs"] == [("x", "tensor(float)", ["batch", 8])]
    assert got["outputs"] == want["outputs"]
    assert set(got["results"]) == set(want["results"])
    for key, expected in want["results"].items():
        result = got["results"][key]
        for g, w in zip(result, expected) if isinstance(expected, list) else [(result, expected)]:
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6, err_msg=key)
    assert got["results"]["all_1"][0].shape == (1, 10) and got["results"]["all_4"][0].shape == (4, 10)
    assert not np.array_equal(got["results"]["bound_1"], got["results"]["bound_2"])  # the same buffer, rewritten


def test_inputs_and_outputs_are_known_before_any_compile() -> None:
    sess = glow_core.InferenceSession(with_custom_output(mlp_model()).SerializeToString(), providers=["cpu"])
    assert [(a.name, a.type, a.shape) for a in sess.get_inputs()] == [("x", "tensor(float)", ["batch", 8])]
    assert [a.name for a in sess.get_outputs()] == ["probs", "hidden", "odd"]
    x = np.ones((2, 8), np.float32)
    (hidden,) = sess.run(["hidden"], {"x": x})  # pruned: the custom operator is never imported
    assert hidden.shape == (2, 16)
    with pytest.raises(UnsupportedOpsError, match="Frobnicate"):
        sess.run(None, {"x": x})


def test_networks_are_cached_per_outputs_and_input_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    real = session_module.compile_model

    def counting(model: Any, backend: str, shapes: Any, **kwargs: Any) -> Any:
        calls.append((tuple(o.name for o in model.graph.output), repr(shapes)))
        return real(model, backend, shapes, **kwargs)

    monkeypatch.setattr(session_module, "compile_model", counting)
    opts = glow_core.SessionOptions()
    opts.batches = "background"
    sess = glow_core.InferenceSession(mlp_model(), opts, providers=["cpu"])
    x3 = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    first = sess.run(None, {"x": x3})  # batch 3, new: one sample at a time, batch 3 compiled in the background
    sess._compiled.wait()
    for batch in (1, 3, 1, 3):
        sess.run(None, {"x": np.ones((batch, 8), np.float32)})
    again = sess.run(None, {"x": x3})  # now on the batch-3 network
    sess.run(["probs"], {"x": np.ones((1, 8), np.float32)})
    sess.run(["probs"], {"x": np.ones((1, 8), np.float32)})
    assert sorted(calls) == sorted([(("probs", "hidden"), repr({"x": (1, 8)})), (("probs", "hidden"), repr({"x": (3, 8)})),
                                    (("probs",), repr({"x": (1, 8)}))])
    for a, b in zip(first, again):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_bound_outputs_are_written_in_place_and_checked() -> None:
    sess = glow_core.InferenceSession(mlp_model(), providers=["cpu"])
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    (want,) = sess.run(["hidden"], {"x": x})
    buf = np.zeros((2, 16), np.float32)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_ortvalue_output("hidden", glow_core.OrtValue.ortvalue_from_numpy(buf))
    sess.run_with_iobinding(binding)
    assert np.array_equal(buf, want) and binding.get_outputs()[0].numpy() is buf
    binding.bind_ortvalue_output("hidden", glow_core.OrtValue.ortvalue_from_numpy(np.zeros((3, 16), np.float32)))
    with pytest.raises(InputError, match=r"output 'hidden' is bound to a float32 array of shape \[3, 16\]"):
        sess.run_with_iobinding(binding)
    binding.clear_binding_outputs()
    binding.bind_output("probs")
    sess.run_with_iobinding(binding)
    assert binding.copy_outputs_to_cpu()[0].shape == (2, 10)


def test_run_async_returns_a_future_and_calls_back() -> None:
    with glow_core.InferenceSession(mlp_model(), providers=["cpu"]) as sess:
        x = np.ones((2, 8), np.float32)
        done = threading.Event()
        seen: list[Any] = []
        fut = sess.run_async(["probs"], {"x": x}, lambda out, data, err: (seen.append((out, data, err)), done.set()),
                             "tag")
        np.testing.assert_array_equal(fut.result(timeout=120)[0], sess.run(["probs"], {"x": x})[0])
        assert done.wait(10) and seen[0][1:] == ("tag", "") and seen[0][0][0].shape == (2, 10)
        bad = sess.run_async(None, {"x": np.ones((2, 7), np.float32)})
        with pytest.raises(InputError, match=r"input 'x' has shape \[2, 7\]; the model declares \[batch, 8\]"):
            bad.result(timeout=120)


def test_providers_default_fallback_and_errors() -> None:
    assert glow_core.InferenceSession(mlp_model()).get_providers() == ["cpu"]
    assert glow_core.get_available_providers()[0] == "cpu"
    x = np.random.default_rng(2).standard_normal((2, 8)).astype(np.float32)
    alone = glow_core.InferenceSession(mlp_model(), providers=["cpu"]).run(None, {"x": x})
    with glow_core.InferenceSession(mlp_model(), providers=["interpreter-primitives", "cpu"]) as both:
        for a, b in zip(both.run(None, {"x": x}), alone):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    with pytest.raises(UnknownBackendError, match="unknown provider 'CPUExecutionProvider'") as e:
        glow_core.InferenceSession(mlp_model(), providers=["CPUExecutionProvider"])
    assert "onnxruntime's name" in e.value.hint


def test_feeds_are_checked_against_the_declarations() -> None:
    sess = glow_core.InferenceSession(mlp_model(), providers=["cpu"])
    cases = [({"y": np.ones((1, 8), np.float32)}, r"unknown input\(s\) 'y'; the model's inputs are: x"),
             ({}, "missing input 'x'"),
             ({"x": np.ones((1, 8))}, r"input 'x' has dtype float64; the model declares tensor\(float\)"),
             ({"x": np.ones((8,), np.float32)}, r"input 'x' has shape \[8\]; the model declares \[batch, 8\]")]
    for feeds, message in cases:
        with pytest.raises(InputError, match=message):
            sess.run(None, feeds)
    with pytest.raises(InputError, match=r"unknown output\(s\) 'nope'"):
        sess.run(["nope"], {"x": np.ones((1, 8), np.float32)})
    assert sess.run(["probs"], {"x": [[0.5] * 8]})[0].shape == (1, 10)  # lists convert exactly


def test_session_options(tmp_path: Path) -> None:
    opts = glow_core.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = glow_core.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.optimized_model_filepath = str(tmp_path / "optimized.txt")
    opts.execution_mode = "ignored"  # an onnxruntime attribute glow does not use
    x = np.ones((2, 8), np.float32)
    sess = glow_core.InferenceSession(mlp_model(), opts, providers=["cpu"])
    np.testing.assert_allclose(sess.run(None, {"x": x})[0],
                               glow_core.InferenceSession(mlp_model(), providers=["cpu"]).run(None, {"x": x})[0],
                               rtol=1e-5)
    assert "fc1" in (tmp_path / "optimized.txt").read_text()
    assert sess.get_session_options() is opts
    small = glow_core.SessionOptions()
    small.memory_limit = 100
    with pytest.raises(BudgetError, match="over the 100 bytes limit"):
        glow_core.InferenceSession(mlp_model(), small, providers=["cpu"]).run(None, {"x": x})


def test_compile_shows_its_signature_and_defaults_to_the_fastest_backend() -> None:
    params = inspect.signature(glow_core.compile).parameters
    assert list(params)[:3] == ["model", "backend", "input_shapes"] and {"devices", "quantize"} <= set(params)
    assert params["backend"].default is None
    assert glow_core.compile(mlp_model(2)).backend.name == "cpu"
