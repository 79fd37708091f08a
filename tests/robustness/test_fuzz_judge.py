"""Judge rules for the seed-1 campaign's `wrong` cases (issue 14): integer division by zero, NaN scales
of QLinearMatMul / QLinearConv. Each rule is tested both ways: a planted wrong answer stays `wrong`."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from glow_core import onnx_backend
from glow_tools.fuzz.isolate import Outcome
from glow_tools.fuzz.runners import ReferenceAnswer, classify, division_by_zero_mask, reference_caveat

BACKENDS = ("interpreter", "cpu")


def _binary_model(op: str, elem: int, shape: list[int]) -> object:
    g = helper.make_graph([helper.make_node(op, ["x", "y"], ["z"])], "g",
                          [helper.make_tensor_value_info(n, elem, shape) for n in ("x", "y")],
                          [helper.make_tensor_value_info("z", elem, shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _judge(model: object, inputs: list[np.ndarray], glow_out: np.ndarray) -> str:
    ref = ReferenceEvaluator(model).run(None, {"x": inputs[0], "y": inputs[1]})
    answer = ReferenceAnswer([np.asarray(r) for r in ref], [None], division_by_zero_mask(model, inputs))
    return classify(Outcome("ok", {"kind": "outputs", "outputs": [glow_out]}), Outcome("ok", answer))[0]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op, dtype, elem", [("Div", np.uint64, TensorProto.UINT64),
                                             ("Div", np.int32, TensorProto.INT32)])
def test_integer_division_by_zero_is_unjudged_only_there(backend: str, op: str, dtype: type, elem: int) -> None:
    """Case 8559 (Div uint64, zero divisors): the spec does not define integer division by zero; the
    reference gives numpy's 0, glow gives x. Glow's answer is unjudged there, judged everywhere else."""
    m = _binary_model(op, elem, [6])
    x = np.array([7, 9, 12, 5, 3, 8], dtype)
    y = np.array([2, 0, 3, 0, 1, 4], dtype)
    out = np.asarray(onnx_backend.prepare(m, backend=backend).run([x, y])[0])
    ref = np.asarray(ReferenceEvaluator(m).run(None, {"x": x, "y": y})[0])
    nonzero = y != 0
    assert np.array_equal(out[nonzero], ref[nonzero])  # glow is judged (and right) where y != 0
    assert not np.array_equal(out, ref)  # ... and differs from numpy's 0 where y == 0 (glow gives x)
    assert _judge(m, [x, y], out) == "unjudged"
    planted = out.copy()
    planted[0] += 1  # a wrong quotient where the divisor is 2
    assert _judge(m, [x, y], planted) == "wrong"


def test_division_mask_is_none_without_a_zero_divisor_or_for_floats() -> None:
    m = _binary_model("Div", TensorProto.INT32, [3])
    assert division_by_zero_mask(m, [np.ones(3, np.int32), np.ones(3, np.int32)]) == [None]
    mf = _binary_model("Div", TensorProto.FLOAT, [3])
    assert division_by_zero_mask(mf, [np.ones(3, np.float32), np.zeros(3, np.float32)]) == [None]
    x, y = np.array([4, 5, 6], np.int32), np.array([1, 0, 2], np.int32)
    assert _judge(m, [x, y], np.array([5, 5, 3], np.int32)) == "wrong"  # no zero divisor at the disputed one


def _qlinear_matmul_model() -> object:
    names = ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "y_scale", "y_zp"]
    types = [TensorProto.INT8, TensorProto.FLOAT, TensorProto.INT8] * 2 + [TensorProto.FLOAT, TensorProto.INT8]
    shapes = [[2, 3], [], [], [3, 2], [], [], [], []]
    g = helper.make_graph([helper.make_node("QLinearMatMul", names, ["y"])], "g",
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in zip(names, types, shapes)],
                          [helper.make_tensor_value_info("y", TensorProto.INT8, [2, 2])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def _qlinear_inputs(b_scale: float) -> list[np.ndarray]:
    i8 = np.int8
    return [np.array([[1, 2, 3], [4, 5, 6]], i8), np.array(0.1, np.float32), np.array(0, i8),
            np.array([[1, 2], [3, 4], [5, 6]], i8), np.array(b_scale, np.float32), np.array(0, i8),
            np.array(0.2, np.float32), np.array(0, i8)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_qlinear_matmul_nan_scale_is_unjudged(backend: str) -> None:
    """Case 246 (QLinearMatMul int8, b_scale NaN, cpu only): the result is NaN converted to int8, which the
    spec leaves undefined (numpy and the interpreter give 0, LLVM's fptosi on cpu -128)."""
    m = _qlinear_matmul_model()
    out = np.asarray(onnx_backend.prepare(m, backend=backend).run(_qlinear_inputs(np.nan))[0])
    assert out.dtype == np.int8 and out.shape == (2, 2)  # glow answers; its value is not judged
    assert "NaN to an integer" in reference_caveat(m, _qlinear_inputs(np.nan))
    assert "QLinearMatMul" in reference_caveat(m, _qlinear_inputs(np.nan))
    assert reference_caveat(m, _qlinear_inputs(0.5)) == ""  # a finite scale stays judged
    finite = _qlinear_inputs(0.5)
    ref = np.asarray(ReferenceEvaluator(m).run(None, dict(zip(
        ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "y_scale", "y_zp"], finite)))[0])
    got = np.asarray(onnx_backend.prepare(m, backend=backend).run(finite)[0])
    assert np.abs(got.astype(int) - ref.astype(int)).max() <= 1
    planted = got.copy()
    planted[0, 0] += 5
    assert classify(Outcome("ok", {"kind": "outputs", "outputs": [planted]}),
                    Outcome("ok", ReferenceAnswer([ref])))[0] == "wrong"


def _quantize_model(elem: int, x: np.ndarray, scale: list[float]) -> object:
    from onnx import numpy_helper

    g = helper.make_graph([helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"], axis=0)], "g",
                          [helper.make_tensor_value_info("s", TensorProto.FLOAT, [len(scale)])],
                          [helper.make_tensor_value_info("y", elem, list(x.shape))],
                          [numpy_helper.from_array(x, "x"),
                           helper.make_tensor("zp", elem, [len(scale)], [1] * len(scale))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("elem, top", [(TensorProto.UINT4, 15), (TensorProto.INT8, 127)])
def test_reference_quantize_linear_saturates_huge_quotients(backend: str, elem: int, top: int) -> None:
    """Case 7853 (QuantizeLinear to uint4, x of 5.8e24 and 1.5e11): onnx.reference casts round(x / scale) to
    int32 before saturating, so a quotient past the int32 range wraps to 0; the spec saturates to the top of
    the range, as glow does. The corrected kernel agrees with glow; a planted wrong answer stays wrong."""
    from glow_tools.fuzz.reference_fixes import new_ops

    x = np.array([[5.8e24, 1.5e11, -3.0, 2.5], [-1e30, 6.0, 9.0, 20.5]], np.float32)
    scale = np.array([2.0, 3.0], np.float32)
    m = _quantize_model(elem, x, [2.0, 3.0])
    raw = np.asarray(ReferenceEvaluator(m).run(None, {"s": scale})[0]).astype(int)
    fixed = np.asarray(ReferenceEvaluator(m, new_ops=new_ops(21)).run(None, {"s": scale})[0])
    assert raw[0, 0] != top  # the uncorrected reference wraps
    assert fixed.astype(int)[0, :2].tolist() == [top, top]
    assert fixed.astype(int)[0, 2:].tolist() == raw[0, 2:].tolist()  # in-range quotients unchanged
    assert fixed.astype(int)[1, 1:].tolist() == raw[1, 1:].tolist()
    out = np.asarray(onnx_backend.prepare(m, backend=backend).run([scale])[0])
    answer = ReferenceAnswer([fixed])
    assert classify(Outcome("ok", {"kind": "outputs", "outputs": [out]}), Outcome("ok", answer))[0] == "match"
    planted = out.copy()
    planted[0, 0] = 3
    assert classify(Outcome("ok", {"kind": "outputs", "outputs": [planted]}), Outcome("ok", answer))[0] == "wrong"


def test_reference_quantize_linear_fix_leaves_float8_alone() -> None:
    from glow_tools.fuzz.reference_fixes import new_ops

    x = np.array([[1e30, 2.0], [-1e30, 3.0]], np.float32)
    m = _quantize_model(TensorProto.FLOAT8E4M3FN, x, [2.0, 3.0])
    s = {"s": np.array([2.0, 3.0], np.float32)}
    raw = ReferenceEvaluator(m).run(None, s)[0]
    fixed = ReferenceEvaluator(m, new_ops=new_ops(21)).run(None, s)[0]
    assert np.array_equal(raw.astype(np.float32), fixed.astype(np.float32), equal_nan=True)


def test_integer_mod_by_zero_is_unjudged_only_there() -> None:
    """Mod by 0 is as undefined as Div by 0 (glow gives numpy's 0 there today, so only planted answers differ)."""
    m = _binary_model("Mod", TensorProto.INT32, [4])
    x, y = np.array([7, -9, 5, 3], np.int32), np.array([2, 0, 0, -2], np.int32)
    ref = np.asarray(ReferenceEvaluator(m).run(None, {"x": x, "y": y})[0])
    at_zero = ref.copy()
    at_zero[1] = -9
    assert _judge(m, [x, y], at_zero) == "unjudged"
    elsewhere = ref.copy()
    elsewhere[0] = 0
    assert _judge(m, [x, y], elsewhere) == "wrong"


def test_qlinear_conv_nan_weight_scale_is_a_caveat() -> None:
    names = ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp"]
    u8, f = TensorProto.UINT8, TensorProto.FLOAT
    types, shapes = [u8, f, u8] * 2 + [f, u8], [[1, 1, 3, 3], [], [], [1, 1, 2, 2], [1], [1], [], []]
    g = helper.make_graph([helper.make_node("QLinearConv", names, ["y"])], "g",
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in zip(names, types, shapes)],
                          [helper.make_tensor_value_info("y", u8, [1, 1, 2, 2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])

    def feeds(w_scale: float) -> list[np.ndarray]:
        return [np.ones((1, 1, 3, 3), np.uint8), np.array(0.1, np.float32), np.array(0, np.uint8),
                np.ones((1, 1, 2, 2), np.uint8), np.array([w_scale], np.float32), np.array([0], np.uint8),
                np.array(0.2, np.float32), np.array(0, np.uint8)]

    assert "QLinearConv" in reference_caveat(m, feeds(np.nan))
    assert reference_caveat(m, feeds(0.5)) == ""
