"""Fuzzer findings in the control-flow nodes (Scan, Loop, If) and the signal operators (STFT).

Campaign seed 1 (docs/robustness.md), each reduced to a small model. Every case must end in a clean
error of glow_core/errors.py at compile time, on both backends, before anything is allocated.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import glow_core
from glow_core.errors import GlowTypeError, InputError, ModelError
from tests.robustness.util import F, I64, model

pytestmark = pytest.mark.robustness

BACKENDS = ["interpreter", "cpu"]


def _scan_body() -> onnx.GraphProto:
    """One state s and one scan input x: s += x_t; the scan output is the running sum."""
    return helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["y_t"])],
        "body", [helper.make_tensor_value_info("s_in", F, []), helper.make_tensor_value_info("x_t", F, [])],
        [helper.make_tensor_value_info("s_out", F, []), helper.make_tensor_value_info("y_t", F, [])])


def _scan(inputs: list[str] | None = None, opset: int = 21, **attrs: object) -> onnx.ModelProto:
    attrs.setdefault("num_scan_inputs", 1)
    if opset < 9:
        ins = inputs if inputs is not None else ["", "s", "x"]
        g_in = [("s", F, [1]), ("x", F, [1, 3])]
        outs = [("s_final", F, [1]), ("y", F, [1, 3])]
    else:
        ins = inputs if inputs is not None else ["s", "x"]
        g_in = [("s", F, []), ("x", F, [3])]
        outs = [("s_final", F, []), ("y", F, [3])]
    node = helper.make_node("Scan", ins, ["s_final", "y"], name="scan", body=_scan_body(), **attrs)
    return model([node], g_in, outs, opset=opset)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scan_well_formed_still_runs(backend: str) -> None:
    """The model the cases below break: it compiles and computes the running sum."""
    net = glow_core.compile(_scan(), backend)
    out = net.run({"s": np.array(1, np.float32), "x": np.array([1, 2, 3], np.float32)})
    np.testing.assert_allclose(out["y"], [2, 4, 7])
    np.testing.assert_allclose(out["s_final"], 7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scan_input_with_empty_name_is_a_model_error(backend: str) -> None:
    """Case 3397: Scan input 0 renamed to '' was KeyError: '' while warming the body."""
    with pytest.raises(ModelError, match=r"'scan' \(Scan\): input 0 has an empty name.*required"):
        glow_core.compile(_scan(["", "x"]), backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [2**62, 2**31 - 1, 10**12, 0, 3, -1])
def test_num_scan_inputs_out_of_range_is_a_model_error(backend: str, n: int) -> None:
    """Cases 3838, 5360, 8072: num_scan_inputs of 2^62, 2^31-1, 10^12 were a MemoryError ([0] * n)."""
    with pytest.raises(ModelError, match=rf"num_scan_inputs {n} must be in \[1, 2\]"):
        glow_core.compile(_scan(num_scan_inputs=n), backend)


@pytest.mark.parametrize("attrs, match", [
    ({"scan_input_axes": [0] * 10**6}, "'scan_input_axes' has 1000000 entries; it needs one per scan input"),
    ({"scan_input_directions": [0, 1]}, "'scan_input_directions' has 2 entries"),
    ({"scan_output_axes": [0, 0, 0]}, "'scan_output_axes' has 3 entries; it needs one per scan output"),
    ({"scan_output_directions": [0, 0]}, "'scan_output_directions' has 2 entries"),
    ({"scan_input_directions": [7]}, r"'scan_input_directions' = \[7\]: each direction must be 0 or 1"),
])
def test_scan_list_attributes_must_match_the_counts(attrs: dict[str, object], match: str) -> None:
    """Siblings: the per-input and per-output list attributes were indexed without a length check."""
    with pytest.raises(ModelError, match=match):
        glow_core.compile(_scan(**attrs), "interpreter")


def test_scan8_checks_its_counts_after_the_optional_sequence_lens() -> None:
    """Scan 8: sequence_lens may be '' (it is optional), the others not; directions has one per scan input."""
    m = _scan(opset=8)
    net = glow_core.compile(m, "interpreter")
    out = net.run({"s": np.ones(1, np.float32), "x": np.array([[1, 2, 3]], np.float32)})
    np.testing.assert_allclose(out["y"], [[2, 4, 7]])
    with pytest.raises(ModelError, match="input 1 has an empty name"):
        glow_core.compile(_scan(["", "", "x"], opset=8), "interpreter")
    with pytest.raises(ModelError, match="'directions' has 3 entries"):
        glow_core.compile(_scan(opset=8, directions=[0, 0, 0]), "interpreter")
    with pytest.raises(ModelError, match=r"num_scan_inputs 3 must be in \[1, 2\]"):
        glow_core.compile(_scan(opset=8, num_scan_inputs=3), "interpreter")


def _scan8_lens() -> onnx.ModelProto:
    node = helper.make_node("Scan", ["L", "s", "x"], ["s_final", "y"], name="scan", body=_scan_body(),
                            num_scan_inputs=1)
    return model([node], [("L", I64, ["k"]), ("s", F, ["b"]), ("x", F, ["n", 3])],
                 [("s_final", F, ["b"]), ("y", F, ["n", 3])], opset=8)


@pytest.mark.parametrize("lens, s, x, match", [
    ([0], [2], [2, 3], r"sequence_lens is int64\[1\]; it must hold one integer per batch entry \(2\)"),
    ([2, 1], [2], [3, 3], r"different batch sizes \[2, 3\]"),
    ([-5, 1], [2], [2, 3], r"sequence_lens \[-5, 1\] must be in \[0, 3\]"),
    ([3, 4], [2], [2, 3], r"sequence_lens \[3, 4\] must be in \[0, 3\]"),
])
def test_scan8_operands_are_checked_at_run_time(lens: list[int], s: list[int], x: list[int], match: str) -> None:
    """Siblings in Scan 8: sequence_lens indexed per batch entry (IndexError), batch sizes never compared."""
    net = glow_core.compile(_scan8_lens(), "interpreter", {"L": [len(lens)], "s": s, "x": x})
    feeds = {"L": np.array(lens, np.int64), "s": np.ones(s, np.float32), "x": np.ones(x, np.float32)}
    with pytest.raises(InputError, match=match):
        net.run(feeds)


def test_scan8_shorter_sequences_are_padded() -> None:
    net = glow_core.compile(_scan8_lens(), "interpreter", {"L": [2], "s": [2], "x": [2, 3]})
    out = net.run({"L": np.array([1, 3]), "s": np.ones(2, np.float32), "x": np.ones((2, 3), np.float32)})
    np.testing.assert_allclose(out["y"], [[2, 0, 0], [2, 3, 4]])


def _loop(inputs: list[str]) -> onnx.ModelProto:
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Add", ["v_in", "v_in"], ["v_out"]), helper.make_node("Identity", ["c_in"], ["c_out"])],
        "body", [vi("i", I64, []), vi("c_in", onnx.TensorProto.BOOL, []), vi("v_in", F, [])],
        [vi("c_out", onnx.TensorProto.BOOL, []), vi("v_out", F, [])])
    node = helper.make_node("Loop", inputs, ["v"], name="loop", body=body)
    return model([node], [("m", I64, []), ("v0", F, [])], [("v", F, [])])


@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_carried_value_with_empty_name_is_a_model_error(backend: str) -> None:
    """Sibling of case 3397: a loop-carried input named '' reached env[''] (KeyError)."""
    net = glow_core.compile(_loop(["m", "", "v0"]), backend)  # the condition is optional
    np.testing.assert_allclose(net.run({"m": np.array(3), "v0": np.array(1, np.float32)})["v"], 8)
    with pytest.raises(ModelError, match=r"'loop' \(Loop\): input 2 has an empty name.*loop-carried value"):
        glow_core.compile(_loop(["m", "", ""]), backend)


def test_loop_body_that_does_not_fit_the_node_is_a_compile_time_model_error() -> None:
    """A body taking fewer inputs than the node gives it is refused when the model compiles."""
    with pytest.raises(ModelError, match="the body takes 3 inputs .* for 2 loop-carried value"):
        glow_core.compile(_loop(["m", "", "v0", "v0"]), "interpreter")


def test_if_with_empty_condition_name_is_a_model_error() -> None:
    """Sibling of case 3397: If's one input, the condition, is required (the ONNX checker refuses '' too)."""
    from glow_core.controlflow.hostops import CHECKS

    empty = helper.make_graph([], "b", [], [])
    node = helper.make_node("If", [""], ["y"], name="if", then_branch=empty, else_branch=empty)
    with pytest.raises(ModelError, match=r"'if' \(If\): If takes exactly one input, the condition"):
        CHECKS["If"](node, {a.name: helper.get_attribute_value(a) for a in node.attribute}, 21)


def _stft(window_shape: list[int], frame_length: bool = False) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array(4, np.int64), "step")]
    ins = ["signal", "step", "window"]
    if frame_length:
        inits.append(numpy_helper.from_array(np.array(8, np.int64), "fl"))
        ins.append("fl")
    node = helper.make_node("STFT", ins, ["out"], name="stft", onesided=0)
    return model([node], [("signal", F, [1, 32, 1]), ("window", F, window_shape)], [("out", F, [1, 7, 8, 2])],
                 inits, opset=17)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [[], [2, 8]])
@pytest.mark.parametrize("frame_length", [False, True])
def test_stft_window_of_wrong_rank_is_a_type_error(backend: str, shape: list[int], frame_length: bool) -> None:
    """Cases 450, 4189: a scalar window without frame_length was 'cannot import: IndexError'."""
    with pytest.raises(GlowTypeError, match=r"'stft'.*window float32\[.*\] must be 1-D"):
        glow_core.compile(_stft(shape, frame_length), backend)


def test_stft_with_a_1d_window_still_compiles() -> None:
    net = glow_core.compile(_stft([8]), "interpreter")
    out = net.run({"signal": np.ones((1, 32, 1), np.float32), "window": np.ones(8, np.float32)})["out"]
    assert out.shape == (1, 7, 8, 2)
    np.testing.assert_allclose(out[0, 0, 0], [8, 0], atol=1e-5)
