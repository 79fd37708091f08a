"""Sequence and optional values next to run-time control flow (issue 14): a sequence that would cross
a run-time If or Loop is a clear UnsupportedError naming the node; an If that folds at import time
may yield sequences (docs/control-flow.md)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import glow_core
from glow_core import onnx_backend
from glow_core.errors import UnsupportedError

BACKENDS = ["interpreter", "cpu"]
F = TensorProto.FLOAT


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
           outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs), opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m


def _seq_vi(name: str) -> onnx.ValueInfoProto:
    return helper.make_value_info(name, helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, [2])))


def loop_carrying_sequence() -> onnx.ModelProto:
    """A Loop (trip count from an input, so it runs at run time) appending x to a carried sequence."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("SequenceInsert", ["seq_in", "x"], ["seq_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), _seq_vi("seq_in")],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), _seq_vi("seq_out")])
    nodes = [helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
             helper.make_node("Loop", ["n", "", "empty"], ["seq"], name="carry", body=body),
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


@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_carrying_a_sequence_is_a_clear_refusal(backend: str) -> None:
    with pytest.raises(UnsupportedError, match=r"'carry' \(Loop\).*'empty'.*cannot cross run-time control flow"):
        glow_core.compile(loop_carrying_sequence(), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_run_time_if_yielding_a_sequence_is_a_clear_refusal(backend: str) -> None:
    feeds = {"x": np.array([1.0, 2.0], np.float32), "c": np.array(True)}
    with pytest.raises(UnsupportedError, match=r"If 'pick'.*'then_out'.*cannot cross run-time control flow"):
        net = glow_core.compile(if_of_sequences(True), backend)
        net.run(feeds)


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
def test_sequence_output_after_a_run_time_if_is_a_clear_refusal(backend: str) -> None:
    feeds = {"x": np.array([1.0, 2.0], np.float32), "c": np.array(False)}
    with pytest.raises(UnsupportedError, match=r"after If 'pick'.*'s'.*cannot cross run-time control flow"):
        onnx_backend.prepare(sequence_output_after_run_time_if(), backend=backend).run(feeds)
