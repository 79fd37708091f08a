"""Control flow (If, Loop, Scan): folding at import, run-time execution between compiled segments,
on the interpreter and cpu, through glow_core.compile, the ONNX backend and glow run (docs/control-flow.md)."""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import glow_core
from glow_core import onnx_backend
from glow_core.pipeline import CompiledNetwork
from glow_core.controlflow import MAX_ITERATIONS_ENV, StagedExecutable
from glow_core.errors import ExecutionError, ImportShapeError, RuntimeControlFlowError
from glow_core.importer import import_model
from tests.cliutil import glow
from tests.controlflow import cfmodels as cm

BACKENDS = ["interpreter", "cpu"]


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _check(net: CompiledNetwork, model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    got = net.run(feeds)
    want = _ort(model, feeds)
    assert list(got) == [o.name for o in model.graph.output]
    for (name, g), w in zip(got.items(), want):
        assert g.dtype == w.dtype and g.shape == w.shape, name
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=name)
    return got


def _vad_feeds(n: int, sr: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((1, n)).astype(np.float32),
            "state": rng.standard_normal((2, 1, cm.H)).astype(np.float32), "sr": np.array(sr, np.int64)}


# -- If -----------------------------------------------------------------------------------------------
def test_if_decided_by_shape_is_folded_at_import() -> None:
    """With sr bound, every If is decided by constants and shapes: one straight-line function, no If."""
    model = cm.vad_like()
    feeds = _vad_feeds(100, 16000)
    fn = import_model(model, {"x": (1, 100)}, bind={"sr": feeds["sr"]})
    assert "If" not in {n.kind.name for n in fn.nodes}
    net = glow_core.compile(model, "interpreter", {"x": (1, 100)}, bind={"sr": feeds["sr"]})
    assert not isinstance(net.executable, StagedExecutable)
    got = net.run({k: v for k, v in feeds.items() if k != "sr"})
    want = _ort(model, feeds)
    np.testing.assert_allclose(got["prob"], want[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_vad_like_nested_ifs_by_scalar_input_and_shape(backend: str) -> None:
    """Top-level If on a scalar input (run time), nested Ifs on shapes (folded inside each branch)."""
    model = cm.vad_like()
    for n in (100, 40):  # long and short inputs take different nested branches
        net = glow_core.compile(model, backend, {"x": (1, n)})
        assert isinstance(net.executable, StagedExecutable)
        outs = {}
        for sr in (16000, 8000):
            outs[sr] = _check(net, model, _vad_feeds(n, sr))
        assert not np.allclose(outs[16000]["prob"], outs[8000]["prob"])  # the two branches differ
        state = outs[16000]["state_out"]  # the state fed back, as a streaming caller does
        _check(net, model, {**_vad_feeds(n, 16000, seed=1), "state": state})


@pytest.mark.parametrize("backend", BACKENDS)
def test_wakeword_if_decided_by_data(backend: str) -> None:
    model = cm.wakeword_like()
    net = glow_core.compile(model, backend, {"features": (1, 8, 40)})
    fired = []
    rng = np.random.default_rng(0)
    for scale in (1.0, 1.0, 1.0, 3.0, 0.5, 2.0):
        got = _check(net, model, {"features": (rng.standard_normal((1, 8, 40)) * scale).astype(np.float32)})
        fired.append(bool(got["classes"].any()))
    assert any(fired) and not all(fired)  # both branches ran


def test_unresolved_if_is_refused_by_import_alone() -> None:
    with pytest.raises(RuntimeControlFlowError, match=r"If.*condition depends on run-time input\(s\) features"):
        import_model(cm.wakeword_like(), {"features": (1, 8, 40)})


def test_branches_compiled_at_compile_time_and_once() -> None:
    """Both branches compile with the network (for the types they will see), then are reused."""
    model = cm.wakeword_like()
    net = glow_core.compile(model, "interpreter", {"features": (1, 8, 40)})
    stage = net.executable.stage  # type: ignore[attr-defined]
    progs = list(stage._subprograms.values())
    assert len(progs) == 2 and [len(p.compiled.entries()) for p in progs] == [1, 1]
    # the network's stats count the branches' functions too
    assert sum(net.stats.nodes_by_kind.values()) > sum(stage.stats.nodes_by_kind.values()) > 0
    rng = np.random.default_rng(0)
    fired = set()
    for scale in (1.0, 1.0, 1.0, 3.0, 0.5, 2.0):
        out = net.run({"features": (rng.standard_normal((1, 8, 40)) * scale).astype(np.float32)})
        fired.add(bool(out["classes"].any()))
    assert fired == {True, False}
    assert [len(p.compiled.entries()) for p in progs] == [1, 1]


# -- Loop and Scan ------------------------------------------------------------------------------------
def _loop_feeds(m: int, cond: bool, limit: float) -> dict[str, np.ndarray]:
    return {"M": np.array(m, np.int64), "cond": np.array(cond), "x": np.array([1, 2, 3], np.float32),
            "limit": np.array(limit, np.float32), "bias": np.array([0.5, 0, -1], np.float32)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_trip_count_condition_and_scan_outputs(backend: str) -> None:
    model = cm.loop_model()
    net = glow_core.compile(model, backend)
    lengths = []
    for m, cond, limit in [(10, True, 100.0), (2, True, 1000.0), (10, True, 1.0), (5, False, 10.0)]:
        lengths.append(_check(net, model, _loop_feeds(m, cond, limit))["history"].shape[0])
    # stopped by the data, by M, after one pass, never entered (zero iterations: onnx.reference fails
    # on the empty scan output, so onnxruntime's [0, 3] is the only answer there is to compare with)
    assert lengths == [5, 2, 1, 0]


def test_loop_iterations_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    model = cm.loop_model()
    monkeypatch.setenv(MAX_ITERATIONS_ENV, "3")
    net = glow_core.compile(model, "interpreter")
    with pytest.raises(ExecutionError, match="'x_final' \\(Loop\\): the loop did not end after 3 iterations") as e:
        net.run(_loop_feeds(1000, True, 1e30))
    assert MAX_ITERATIONS_ENV in e.value.hint


@pytest.mark.parametrize("backend", BACKENDS)
def test_scan_directions_and_axes(backend: str) -> None:
    model = cm.scan_model()
    net = glow_core.compile(model, backend)
    rng = np.random.default_rng(3)
    _check(net, model, {"acc": np.array([1, 2], np.float32), "x": rng.standard_normal((2, 5)).astype(np.float32),
                        "scale": np.array(2, np.float32)})


# -- entry points -------------------------------------------------------------------------------------
def test_onnx_backend_runs_control_flow() -> None:
    model = cm.vad_like()
    rep = onnx_backend.prepare(model, backend="interpreter")
    for n, sr in [(100, 16000), (30, 8000)]:
        feeds = _vad_feeds(n, sr)
        got = rep.run([feeds["x"], feeds["state"], feeds["sr"]])
        for g, w in zip(got, _ort(model, feeds)):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_glow_run_control_flow(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    from glow_cli.main import main

    path = tmp_path / "ww.onnx"
    onnx.save(cm.wakeword_like(), str(path))
    feats = np.full((1, 8, 40), 0.5, np.float32)
    np.save(tmp_path / "f.npy", feats)
    out = tmp_path / "out.npz"
    assert main(["run", str(path), "-b", "interpreter", "--input", f"features={tmp_path / 'f.npy'}",
                 "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "output score: float32[1,1]" in text and "output classes: float32[1,4]" in text
    saved = np.load(out)
    want = _ort(cm.wakeword_like(), {"features": feats})
    np.testing.assert_allclose(saved["classes"], want[1], rtol=1e-5, atol=1e-6)


# -- symbolic dimensions ------------------------------------------------------------------------------
def _two_inputs_model(with_if: bool) -> onnx.ModelProto:
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Add", ["x", "y"], ["z"])]
    if with_if:
        then_g = helper.make_graph([helper.make_node("Neg", ["z"], ["a"])], "t", [], [vi("a", cm.F, [-1, 10])])
        else_g = helper.make_graph([helper.make_node("Abs", ["z"], ["b"])], "e", [], [vi("b", cm.F, [-1, 10])])
        nodes.append(helper.make_node("If", ["c"], ["out"], then_branch=then_g, else_branch=else_g))
    inputs = [vi("x", cm.F, ["N", 10]), vi("y", cm.F, ["N", 10])] + ([vi("c", cm.B, [])] if with_if else [])
    g = helper.make_graph(nodes, "g", inputs, [vi("out" if with_if else "z", cm.F, ["N", 10])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("with_if", [False, True])
def test_symbol_with_two_values_is_accepted_as_onnxruntime_accepts_it(with_if: bool, tmp_path) -> None:
    """x and y both declare [N, 10]; fed N=3 and N=1, onnxruntime broadcasts the Add (the fed shapes decide;
    issue 28): glow compiles it through every route and agrees."""
    model = _two_inputs_model(with_if)
    x = np.arange(30, dtype=np.float32).reshape(3, 10) - 12
    y = np.linspace(-2, 2, 10, dtype=np.float32).reshape(1, 10)
    feeds = [x, y] + ([np.array(True)] if with_if else [])
    names = ["x", "y", "c"][:len(feeds)]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, dict(zip(names, feeds)))
    net = glow_core.compile(model, "interpreter", {"x": (3, 10), "y": (1, 10)})
    np.testing.assert_array_equal(net.run(dict(zip(names, feeds)))["out" if with_if else "z"], want)
    (got,) = onnx_backend.prepare(model, backend="interpreter").run(feeds)
    np.testing.assert_array_equal(got, want)
    onnx.save(model, str(tmp_path / "m.onnx"))
    args = ["run", str(tmp_path / "m.onnx"), "-b", "interpreter"]
    for name, value in zip(names, feeds):
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--input", f"{name}={tmp_path / (name + '.npy')}"]
    r = glow(args, cwd=tmp_path)
    assert r.returncode == 0 and re.search(r"output (out|z): float32\[3,10\]", r.stdout), r.stderr


def test_minus_one_dims_in_subgraph_declarations() -> None:
    """Branch outputs declared [-1, 10] (as exporters write a dynamic dimension) and a loop body with [-1]."""
    model = _two_inputs_model(with_if=True)
    net = glow_core.compile(model, "interpreter", {"x": (3, 10), "y": (3, 10)})
    x = np.arange(30, dtype=np.float32).reshape(3, 10)
    for c in (True, False):
        got = net.run({"x": x, "y": x, "c": np.array(c)})["out"]
        np.testing.assert_array_equal(got, -(x + x) if c else np.abs(x + x))


# -- after a run-time node; bad values ------------------------------------------------------------------
def _branches_of_different_shapes() -> onnx.ModelProto:
    """If on data returns [2] or [3]; after it, a Reshape whose target comes from that shape and a
    value computed before the If."""
    vi = helper.make_tensor_value_info
    two = helper.make_graph([helper.make_node("Slice", ["x", "s0", "s2"], ["a"])], "two", [], [vi("a", cm.F, [2])])
    three = helper.make_graph([helper.make_node("Slice", ["x", "s0", "s3"], ["b"])], "three", [], [vi("b", cm.F, [3])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
             helper.make_node("Greater", ["total", "zero"], ["pos"]),
             helper.make_node("If", ["pos"], ["y"], then_branch=two, else_branch=three),
             helper.make_node("Shape", ["y"], ["ys"]), helper.make_node("Concat", ["one", "ys"], ["target"], axis=0),
             helper.make_node("Reshape", ["y", "target"], ["y2"]), helper.make_node("Add", ["y2", "total"], ["out"])]
    inits = [onnx.numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             [("s0", [0]), ("s2", [2]), ("s3", [3]), ("one", [1])]]
    inits.append(onnx.numpy_helper.from_array(np.float32(0), "zero"))
    g = helper.make_graph(nodes, "g", [vi("x", cm.F, [4])], [vi("out", cm.F, [1, "n"])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_nodes_after_a_run_time_if_compile_for_the_shapes_that_arrive() -> None:
    model = _branches_of_different_shapes()
    net = glow_core.compile(model, "interpreter")
    for x in ([1, 2, 3, 4], [-1, -2, -3, 4]):
        got = _check(net, model, {"x": np.array(x, np.float32)})
        assert got["out"].shape == ((1, 2) if sum(x) > 0 else (1, 3))


def test_if_condition_with_several_elements_is_refused() -> None:
    vi = helper.make_tensor_value_info
    t = helper.make_graph([helper.make_node("Neg", ["x"], ["a"])], "t", [], [vi("a", cm.F, [2])])
    e = helper.make_graph([helper.make_node("Abs", ["x"], ["b"])], "e", [], [vi("b", cm.F, [2])])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=t, else_branch=e)], "g",
                          [vi("x", cm.F, [2]), vi("c", cm.B, [2])], [vi("y", cm.F, [2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    net = glow_core.compile(model, "interpreter")
    with pytest.raises(glow_core.errors.InputError, match="the condition has 2 elements at run time"):
        net.run({"x": np.ones(2, np.float32), "c": np.array([True, False])})


@pytest.mark.parametrize("backend", BACKENDS)
def test_if_decided_by_data_inside_a_loop_body(backend: str) -> None:
    model = cm.loop_with_if_model()
    net = glow_core.compile(model, backend)
    got = _check(net, model, {"M": np.array(6, np.int64), "x": np.array([1.0, 2.0], np.float32)})
    sums = got["trace"].sum(axis=1)
    assert (np.diff(sums) < 0).any() and (np.diff(sums) > 0).any()  # both branches taken


def test_external_data_of_a_subgraph_is_read(tmp_path) -> None:
    """A branch's initializer kept in an external file is read (and checked) like a top-level one."""
    vi = helper.make_tensor_value_info
    w = np.arange(64, dtype=np.float32)
    then_g = helper.make_graph([helper.make_node("Add", ["x", "w_then"], ["a"])], "t", [], [vi("a", cm.F, [64])],
                              [onnx.numpy_helper.from_array(w, "w_then")])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["b"])], "e", [], [vi("b", cm.F, [64])])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)], "g",
                          [vi("x", cm.F, [64]), vi("c", cm.B, [])], [vi("y", cm.F, [64])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    path = tmp_path / "ext.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="ext.bin", size_threshold=0)
    assert (tmp_path / "ext.bin").stat().st_size == w.nbytes  # the branch's weight did go to the file
    net = glow_core.compile(str(path), "interpreter")
    x = np.ones(64, np.float32)
    np.testing.assert_array_equal(net.run({"x": x, "c": np.array(True)})["y"], x + w)
