"""Regression tests for the campaign's `wrong` cases (issue 14): LRN judged by a corrected reference,
CausalConvWithState with overflowing products on the interpreter kernel."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import glow_core


def _model(node: object, inputs: dict[str, tuple[int, ...]], outputs: dict[str, tuple[int, ...]], opset: int) -> object:
    g = helper.make_graph([node], "g",
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_reference_lrn_is_corrected_to_normalize_every_channel() -> None:
    """Cases 5971/7723/9026: onnx.reference's LRN sums squares only for channels < N (its loop runs over the
    batch axis); the corrected kernel follows the spec, and glow (and onnxruntime) agree with it."""
    from glow_tools.fuzz.reference_fixes import new_ops
    m = _model(helper.make_node("LRN", ["x"], ["y"], size=5, alpha=1e-4, beta=0.75, bias=1e-45),
               {"x": (1, 6, 1, 1)}, {"y": (1, 6, 1, 1)}, 13)
    x = np.abs(np.random.default_rng(0).standard_normal((1, 6, 1, 1))).astype(np.float32)
    x[0, 3] = 1e30  # its square overflows to inf in float32: its window's channels come out 0
    raw = ReferenceEvaluator(m).run(None, {"x": x})[0]
    fixed = ReferenceEvaluator(m, new_ops=new_ops(13)).run(None, {"x": x})[0]
    assert raw[0, 1:, 0, 0].tolist() != [0.0] * 5  # the uncorrected reference leaves them unnormalized
    assert fixed[0, 1:, 0, 0].tolist() == [0.0] * 5
    for backend in ("interpreter", "interpreter-primitives", "cpu"):
        got = glow_core.compile(m, backend=backend).run({"x": x})["y"]
        np.testing.assert_allclose(got, fixed, rtol=1e-5, atol=1e-7)


_CASE_4961_W = [0.17742614, 3e38, 3e38, 0.46278226, -0.90729839, 3e38, 3e38, 0.12898292,
                1.13940072, -1.23482585, 0.40234163, 3e38, -0.87079716, -0.57884967, -0.31155252, 0.05616534]


@pytest.mark.parametrize("backend", ["interpreter", "interpreter-primitives", "cpu"])
def test_causal_conv_overflowing_products_give_what_the_reference_gives(backend: str) -> None:
    """Case 4961 (weights of 3e38): output [1, 1, 4] sums products of -inf and +inf magnitude. The
    reference's depthwise Conv (a matrix product) gives -inf; the interpreter kernel summed separately rounded
    products (inf - inf = NaN). It now runs the same im2col matrix product as its Conv kernel.
    (The result of such a sum depends on the summation order: this pins the case's shapes and data.)"""
    m = _model(helper.make_node("CausalConvWithState", ["x", "w", "b"], ["y", "s"]),
               {"x": (2, 4, 8), "w": (4, 1, 4), "b": (4,)}, {"y": (2, 4, 8), "s": (2, 4, 3)}, 27)
    feeds = {"x": np.random.RandomState(0).randn(2, 4, 8).astype(np.float32),
             "w": np.array(_CASE_4961_W, np.float32).reshape(4, 1, 4),
             "b": np.array([-1.1651498, 0.9008265, 0.46566245, -1.5362437], np.float32)}
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    assert want[1, 1, 4] == -np.inf
    got = glow_core.compile(m, backend=backend).run(feeds)["y"]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_reference_logsoftmax_runs_the_schema_function_body(backend: str) -> None:
    """Case 8074 (LogSoftmax of 1e30): onnx.reference's kernel takes log(softmax(x)) and underflows to -inf;
    the schema's function body (x - max - log(sum(exp(x - max)))), evaluated by the judge, gives -1e30, as
    glow does."""
    from glow_tools.fuzz.reference_fixes import new_ops
    m = _model(helper.make_node("LogSoftmax", ["x"], ["y"], axis=1), {"x": (2, 4)}, {"y": (2, 4)}, 13)
    x = np.array([[1e30, 0.0, 1.0, 2.0], [0.0, 1.0, 2.0, 3.0]], np.float32)
    raw = ReferenceEvaluator(m).run(None, {"x": x})[0]
    fixed = ReferenceEvaluator(m, new_ops=new_ops(13)).run(None, {"x": x})[0]
    assert np.isneginf(raw[0, 1:]).all()  # the deviation: -inf where the spec's arithmetic is finite
    np.testing.assert_array_equal(fixed[0], np.array([0.0, -1e30, -1e30, -1e30], np.float32))
    got = glow_core.compile(m, backend=backend).run({"x": x})["y"]
    np.testing.assert_allclose(got, fixed, rtol=1e-6, atol=1e-7)


def test_sequence_outputs_of_unequal_tensors_are_compared_not_an_internal_error() -> None:
    """Cases 1465 and 8826 (SplitToSequence into unequal parts): the fuzzer's runner turned the output
    sequence into one array (a numpy ValueError, counted as glow's internal error). Each tensor is now
    compared with the reference's, and a differing one is still a difference."""
    from glow_core import onnx_backend
    from glow_tools.fuzz.runners import as_output, compare_outputs
    x = np.arange(21, dtype=np.float32).reshape(3, 7)
    g = helper.make_graph([helper.make_node("SplitToSequence", ["x"], ["s"], axis=1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, (3, 7))],
                          [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)])
    g.node[0].input.append("split")
    g.initializer.append(helper.make_tensor("split", TensorProto.INT64, [2], [3, 4]))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    ref = [as_output(o) for o in ReferenceEvaluator(m).run(None, {"x": x})]
    got = [as_output(o) for o in onnx_backend.prepare(m, backend="interpreter").run([x])]
    assert [t.shape for t in got[0]] == [(3, 3), (3, 4)]
    assert compare_outputs(ref, got) == ""
    got[0][1] = got[0][1] + 1
    assert "tensor 1" in compare_outputs(ref, got)
    assert "sequence" in compare_outputs(ref, [x])


def _quantize_model(zp_type: int) -> object:
    node = helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
                                        helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
                          [helper.make_tensor_value_info("y", zp_type, [4])],
                          [helper.make_tensor("zp", zp_type, [], [0])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def test_nan_scale_to_integer_is_unjudged_only_for_a_nan_scale() -> None:
    """Case 8144 (QuantizeLinear to int4, NaN scale): the spec leaves NaN -> integer undefined; the
    reference's answer (numpy's cast artefact) is no judge of glow's. A finite scale stays judged, and so
    does a float8 output (NaN has a float8 value)."""
    from glow_tools.fuzz.runners import reference_caveat

    x = np.array([1.0, -2.0, 3.0, 0.5], np.float32)
    m = _quantize_model(TensorProto.INT8)
    raw = ReferenceEvaluator(m).run(None, {"x": x, "s": np.float32(np.nan)})[0]
    assert raw.dtype.kind == "i"  # the reference answers integers for an undefined conversion
    assert "NaN to an integer" in reference_caveat(m, [x, np.array(np.nan, np.float32)])
    assert reference_caveat(m, [x, np.array(0.5, np.float32)]) == ""
    assert reference_caveat(m, [np.full(4, np.nan, np.float32), np.array(0.5, np.float32)]) == ""
    m8 = _quantize_model(TensorProto.FLOAT8E4M3FN)
    assert reference_caveat(m8, [x, np.array(np.nan, np.float32)]) == ""


def test_planted_wrong_quantized_answer_stays_wrong() -> None:
    """The rule hides no wrong answer of a finite scale: glow's output off by 3 units is `wrong`."""
    from glow_tools.fuzz.isolate import Outcome
    from glow_tools.fuzz.runners import ReferenceAnswer, classify

    ref = ReferenceAnswer([np.array([2, -4, 6, 1], np.int8)])
    glow = Outcome("ok", {"kind": "outputs", "outputs": [np.array([2, -4, 9, 1], np.int8)]})
    assert classify(glow, Outcome("ok", ref))[0] == "wrong"


def _loop_model(scan_shape: list[int]) -> object:
    """A Loop of 3 iterations whose scan output is the iteration number, of shape ``scan_shape``."""
    i64 = TensorProto.INT64
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]),
         helper.make_node("Reshape", ["i", "shape"], ["scan"])],
        "body", [helper.make_tensor_value_info("i", i64, []), helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("scan", i64, scan_shape)],
        [helper.make_tensor("shape", i64, [len(scan_shape)], scan_shape)])
    g = helper.make_graph([helper.make_node("Loop", ["M", "c"], ["out"], body=body)], "g",
                          [helper.make_tensor_value_info("M", i64, []), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("out", i64, [3] + scan_shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("scan_shape, spec_shape", [([], (3,)), ([1], (3, 1)), ([1, 1], (3, 1, 1))])
def test_reference_loop_stacks_scalar_scan_outputs_as_the_spec(scan_shape: list[int], spec_shape: tuple) -> None:  # type: ignore[type-arg]
    """Case 4003: onnx.reference's Loop stacks scalar scan outputs with np.vstack as [n, 1]; the spec
    concatenates along a new first axis ([n]); values of shape [1, 1] come out [n, 1] too, [n, 1, 1] by the spec."""
    from glow_tools.fuzz.reference_fixes import new_ops
    m = _loop_model(scan_shape)
    feeds = {"M": np.array(3, np.int64), "c": np.array(True)}
    raw = ReferenceEvaluator(m).run(None, feeds)[0]
    fixed = ReferenceEvaluator(m, new_ops=new_ops(21)).run(None, feeds)[0]
    assert fixed.shape == spec_shape and fixed.reshape(-1).tolist() == [0, 1, 2]
    assert raw.shape == (3, 1)  # the deviation: np.vstack gives [n, 1] for scalars and [1, 1] values too
    got = glow_core.compile(m, backend="interpreter").run(feeds)["out"]
    np.testing.assert_array_equal(got, fixed)
