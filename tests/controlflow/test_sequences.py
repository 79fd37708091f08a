"""Sequence and optional values crossing run-time control flow (issue 14): loop-carried sequences and
optionals (empty ones included), sequences captured by a loop body, If branches yielding sequences,
sequences built after a run-time If; compared with onnx.reference (docs/control-flow.md)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core import onnx_backend
from glow_core.controlflow import StagedExecutable
from glow_core.controlflow.hostvalues import Append, HostSeq
from glow_core.errors import GlowTypeError, InputError, ModelError

BACKENDS = ["interpreter", "cpu"]
F = TensorProto.FLOAT


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
           outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs), opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m


def _seq_vi(name: str) -> onnx.ValueInfoProto:
    return helper.make_value_info(name, helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, [2])))


def loop_carrying_sequence(position: int | None = None) -> onnx.ModelProto:
    """A Loop (trip count from an input, so it runs at run time) inserting x * (i + 1) into a carried
    sequence (at the end, or at ``position``)."""
    where = [] if position is None else ["pos"]
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Constant", [], ["one"], value=helper.make_tensor("one", TensorProto.INT64, [], [1])),
         helper.make_node("Add", ["i", "one"], ["i1"]),
         helper.make_node("Cast", ["i1"], ["f1"], to=F),
         helper.make_node("Mul", ["x", "f1"], ["xi"]),
         *([] if position is None else
           [helper.make_node("Constant", [], ["pos"], value=helper.make_tensor("pos", TensorProto.INT64, [], [position]))]),
         helper.make_node("SequenceInsert", ["seq_in", "xi", *where], ["seq_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), _seq_vi("seq_in")],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), _seq_vi("seq_out")])
    # an explicit condition: onnx.reference runs no iteration without one (the specification: a for loop)
    # onnx.reference fails inserting at a position into an empty sequence: those loops start with [x]
    start = (helper.make_node("SequenceEmpty", [], ["empty"], dtype=F) if position is None
             else helper.make_node("SequenceConstruct", ["x"], ["empty"]))
    nodes = [start,
             helper.make_node("Constant", [], ["go"], value=helper.make_tensor("go", TensorProto.BOOL, [], [True])),
             helper.make_node("Loop", ["n", "go", "empty"], ["seq"], name="carry", body=body),
             helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0)]
    return _model(nodes, [helper.make_tensor_value_info("n", TensorProto.INT64, []),
                          helper.make_tensor_value_info("x", F, [2])],
                  [helper.make_tensor_value_info("y", F, ["n_out"])])


def if_of_sequences(cond_input: bool) -> onnx.ModelProto:
    """An If whose branches yield sequences; its condition is an input (run time) or a constant (folds)."""
    def branch(name: str, scale: float) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node("Constant", [], [f"{name}_k"], value=helper.make_tensor(f"{name}_k", F, [], [scale])),
             helper.make_node("Mul", ["x", f"{name}_k"], [f"{name}_m"]),
             helper.make_node("SequenceConstruct", ["x", f"{name}_m"], [f"{name}_out"])],
            name, [], [_seq_vi(f"{name}_out")])

    nodes = [] if cond_input else [helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", TensorProto.BOOL, [], [True]))]
    nodes += [helper.make_node("If", ["c"], ["s"], name="pick", then_branch=branch("then", 2.0),
                               else_branch=branch("else", 3.0)),
              helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)]
    inputs = [helper.make_tensor_value_info("x", F, [2])]
    if cond_input:
        inputs.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    return _model(nodes, inputs, [helper.make_tensor_value_info("y", F, ["n_out"])])


def _same_as_reference(model: onnx.ModelProto, backend: str, feeds: dict[str, object]) -> list[object]:
    """Run through the ONNX backend interface; every output equals onnx.reference's (lists elementwise)."""
    got = onnx_backend.prepare(model, backend=backend).run(feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):
            assert isinstance(g, list) and len(g) == len(w)
            for a, b in zip(g, w):
                assert a.dtype == b.dtype
                np.testing.assert_allclose(a, b, rtol=1e-6)
        elif w is None:
            assert g is None
        else:
            assert g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-6)
    return list(got)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [0, 1, 4])
@pytest.mark.parametrize("position", [None, 0, -1])
def test_loop_carrying_a_sequence_runs(backend: str, n: int, position: int | None) -> None:
    x = np.array([1.0, -2.0], np.float32)
    model = loop_carrying_sequence(position)
    if n == 0:  # ConcatFromSequence of an empty sequence is invalid: check the loop's result alone
        model = _model(list(model.graph.node)[:3], list(model.graph.input), [_seq_vi("seq")])
        (got,) = onnx_backend.prepare(model, backend=backend).run({"n": np.array(0), "x": x})
        assert len(got) == (0 if position is None else 1)
        return
    (y,) = _same_as_reference(model, backend, {"n": np.array(n), "x": x})
    assert y.shape == (2 * (n + (position is not None)),)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cond", [True, False])
def test_run_time_if_yielding_a_sequence_runs(backend: str, cond: bool) -> None:
    x = np.array([1.0, 2.0], np.float32)
    (y,) = _same_as_reference(if_of_sequences(True), backend, {"x": x, "c": np.array(cond)})
    np.testing.assert_array_equal(y, np.concatenate([x, (2 if cond else 3) * x]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_folded_if_yielding_a_sequence_runs(backend: str) -> None:
    x = np.array([1.0, 2.0], np.float32)
    rep = onnx_backend.prepare(if_of_sequences(False), backend=backend)
    (y,) = rep.run({"x": x})
    np.testing.assert_array_equal(y, np.concatenate([x, 2 * x]))


def sequence_output_after_run_time_if() -> onnx.ModelProto:
    """A run-time If yielding a tensor, then a sequence built from it as the model's output."""
    def branch(name: str, scale: float) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node("Constant", [], [f"{name}_k"], value=helper.make_tensor(f"{name}_k", F, [], [scale])),
             helper.make_node("Mul", ["x", f"{name}_k"], [f"{name}_o"])],
            name, [], [helper.make_tensor_value_info(f"{name}_o", F, [2])])

    nodes = [helper.make_node("If", ["c"], ["t"], name="pick", then_branch=branch("a", 2.0),
                              else_branch=branch("b", 3.0)),
             helper.make_node("SequenceConstruct", ["t", "x"], ["s"])]
    return _model(nodes, [helper.make_tensor_value_info("x", F, [2]), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                  [_seq_vi("s")])


@pytest.mark.parametrize("backend", BACKENDS)
def test_sequence_output_after_a_run_time_if_runs(backend: str) -> None:
    x = np.array([1.0, 2.0], np.float32)
    (s,) = _same_as_reference(sequence_output_after_run_time_if(), backend, {"x": x, "c": np.array(False)})
    np.testing.assert_array_equal(s[0], 3 * x)


def loop_over_optional() -> onnx.ModelProto:
    """A Loop carrying an optional sequence (when None at first, the body starts it), as test_loop16_seq_none,
    and mapping over a captured input sequence (as SequenceMap's expansion): [bias, xs[0] + bias, ...]."""
    opt_t = helper.make_optional_type_proto(helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, None)))
    then_g = helper.make_graph([helper.make_node("SequenceConstruct", ["bias"], ["fresh"])], "fresh", [],
                               [_seq_vi("fresh")])
    else_g = helper.make_graph([helper.make_node("OptionalGetElement", ["acc_in"], ["old"])], "old", [],
                               [_seq_vi("old")])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("OptionalHasElement", ["acc_in"], ["has"]),
         helper.make_node("Not", ["has"], ["none"]),
         helper.make_node("If", ["none"], ["seq"], then_branch=then_g, else_branch=else_g),
         helper.make_node("SequenceAt", ["xs", "i"], ["xi"]),
         helper.make_node("Add", ["xi", "bias"], ["yi"]),
         helper.make_node("SequenceInsert", ["seq", "yi"], ["seq_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_value_info("acc_in", opt_t)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), _seq_vi("seq_out")])
    nodes = [helper.make_node("SequenceLength", ["xs"], ["n"]),
             helper.make_node("Constant", [], ["go"], value=helper.make_tensor("go", TensorProto.BOOL, [], [True])),
             helper.make_node("Loop", ["n", "go", "start"], ["ys"], name="map", body=body)]
    return _model(nodes, [_seq_vi("xs"), helper.make_tensor_value_info("bias", F, [2]),
                          helper.make_value_info("start", opt_t)], [_seq_vi("ys")])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("start", [None, [np.array([5.0, 6.0], np.float32)]])
def test_loop_carrying_an_optional_and_capturing_a_sequence_runs(backend: str, start: object) -> None:
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(2).astype(np.float32) for _ in range(3)]
    bias = np.array([1.0, 10.0], np.float32)
    (ys,) = _same_as_reference(loop_over_optional(), backend, {"xs": xs, "bias": bias, "start": start})
    assert len(ys) == 4
    np.testing.assert_allclose(ys[0], bias if start is None else start[0])  # type: ignore[index]
    np.testing.assert_allclose(ys[3], xs[2] + bias)


@pytest.mark.parametrize("backend", BACKENDS)
def test_runs_with_sequences_seen_before_compile_nothing(backend: str, compiles: list[int]) -> None:
    calls = compiles  # backend compiles (conftest.py)
    net = glow_core.compile(loop_carrying_sequence(), backend)
    assert isinstance(net.executable, StagedExecutable)
    x = np.array([1.0, 2.0], np.float32)
    net.run({"n": np.array(3), "x": x})
    after_first = len(calls)
    assert after_first > 0
    for seed in range(3):  # other values, same trip count: same sequence lengths, nothing compiles
        y = net.run({"n": np.array(3), "x": x + seed})["y"]
        np.testing.assert_array_equal(y, np.concatenate([(x + seed) * (i + 1) for i in range(3)]))
    assert len(calls) == after_first


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loop_appending_to_a_sequence_compiles_its_body_once(backend: str, compiles: list[int]) -> None:
    """The SequenceInsert into the carried sequence runs on the host (hostvalues.hoist_appends): the body
    compiles once, not once per length; only the ConcatFromSequence after the loop compiles per length."""
    model = loop_carrying_sequence()
    net = glow_core.compile(model, backend)
    x = np.array([1.0, 2.0], np.float32)
    net.run({"n": np.array(2), "x": x})
    before = len(compiles)
    y = net.run({"n": np.array(12), "x": x})["y"]
    np.testing.assert_array_equal(y, np.concatenate([x * (i + 1) for i in range(12)]))
    assert len(compiles) - before == 1, "the body compiled again for a longer sequence"


def test_a_sequence_as_a_scan_output_is_refused() -> None:
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("SequenceConstruct", ["x"], ["s"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), _seq_vi("s")])
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Loop", ["n", ""], ["ss"], name="scan_seq", body=body)], "g",
        [helper.make_tensor_value_info("n", TensorProto.INT64, []), helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("ss", F, ["k", 2])]), opset_imports=[helper.make_opsetid("", 17)])
    net = glow_core.compile(m, "interpreter")
    with pytest.raises(ModelError, match=r"'scan_seq' \(Loop\).*scan output 0 is a sequence"):
        net.run({"n": np.array(2), "x": np.array([1.0, 2.0], np.float32)})


def test_host_append_checks_position_and_dtype() -> None:
    seq = HostSeq([np.zeros(2, np.float32)], np.float32)
    at = Append("s", "t", "p", "out")
    t = np.ones(2, np.float32)
    assert [a[0] for a in at.run(seq, {"t": t, "p": np.array(-1)})] == [1.0, 0.0]  # -1: before the last
    assert [a[0] for a in at.run(seq, {"t": t, "p": np.array(1)})] == [0.0, 1.0]
    with pytest.raises(InputError, match=r"position 2 is outside \[-1, 1\]"):
        at.run(seq, {"t": t, "p": np.array(2)})
    with pytest.raises(GlowTypeError, match="inserts a int32 tensor into a sequence of float32"):
        Append("s", "t", "", "out").run(seq, {"t": np.ones(2, np.int32)})
