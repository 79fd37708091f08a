"""Quantization ops on the interpreter vs onnxruntime (integer results must match exactly)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest

from glow_core.errors import ModelError, UnsupportedError
from tests.ops.oputil import assert_same, check_against_ort, one_node_model, run_glow, run_ort, run_reference

RNG = np.random.default_rng(1)
QTYPES = [np.int8, np.uint8, np.int16, np.uint16]


def qrand(dtype: Any, *shape: int) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, int(info.max) + 1, shape).astype(dtype)


def zero_point(dtype: Any, *shape: int) -> np.ndarray:
    info = np.iinfo(dtype)
    lo, hi = max(int(info.min), -20), min(int(info.max), 20)
    return RNG.integers(min(0, lo), hi + 1, shape).astype(dtype)


@pytest.mark.parametrize("dtype", QTYPES)
def test_quantize_per_tensor(dtype: Any) -> None:
    x = (RNG.standard_normal((3, 4, 5)) * 200).astype(np.float32)
    x[0, 0, :3] = [0.5, 1.5, -2.5]  # ties round to even
    inits = {"s": np.array(0.5, np.float32), "z": zero_point(dtype)}
    check_against_ort("QuantizeLinear", {"x": x}, initializers=inits, opset=21)


def test_quantize_default_uint8_no_zero_point() -> None:
    x = (RNG.standard_normal((4, 6)) * 100).astype(np.float32)
    check_against_ort("QuantizeLinear", {"x": x}, initializers={"s": np.array(0.7, np.float32)}, opset=13)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_quantize_per_axis(dtype: Any, axis: int) -> None:
    x = (RNG.standard_normal((3, 4, 5)) * 50).astype(np.float32)
    n = x.shape[axis]
    inits = {"s": RNG.uniform(0.1, 1.0, n).astype(np.float32), "z": zero_point(dtype, n)}
    check_against_ort("QuantizeLinear", {"x": x}, initializers=inits, axis=axis, opset=13)


@pytest.mark.parametrize("block", [2, 3])
def test_quantize_blocked(block: int) -> None:
    x = (RNG.standard_normal((4, 7)) * 50).astype(np.float32)
    nb = -(-7 // block)
    inits = {"s": RNG.uniform(0.1, 1.0, (4, nb)).astype(np.float32), "z": zero_point(np.int8, 4, nb)}
    check_against_ort("QuantizeLinear", {"x": x}, initializers=inits, axis=1, block_size=block, opset=21)


def test_quantize_int32_input() -> None:
    x = RNG.integers(-1000, 1000, (5, 6)).astype(np.int32)
    inits = {"s": np.array(4.0, np.float32), "z": np.array(3, np.int8)}
    model = one_node_model("QuantizeLinear", {"x": x}, initializers=inits, opset=13)
    got = run_glow(model, {"x": x})[0]  # (onnxruntime has no int32 QuantizeLinear)
    want = np.clip(np.rint(x.astype(np.float32) / np.float32(4.0)) + 3, -128, 127).astype(np.int8)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", QTYPES + [np.int32])
def test_dequantize_per_tensor(dtype: Any) -> None:
    x = qrand(dtype, 3, 4)
    inits: dict[str, np.ndarray] = {"s": np.array(0.25, np.float32)}
    if dtype != np.int32:
        inits["z"] = zero_point(dtype)
    check_against_ort("DequantizeLinear", {"x": x}, initializers=inits, opset=21)


@pytest.mark.parametrize("axis", [0, 2, -2])
def test_dequantize_per_axis(axis: int) -> None:
    x = qrand(np.uint8, 3, 4, 5)
    n = x.shape[axis]
    inits = {"s": RNG.uniform(0.1, 1.0, n).astype(np.float32), "z": zero_point(np.uint8, n)}
    check_against_ort("DequantizeLinear", {"x": x}, initializers=inits, axis=axis, opset=13)


def test_dequantize_blocked() -> None:
    x = qrand(np.int8, 3, 8)
    inits = {"s": RNG.uniform(0.1, 1.0, (3, 3)).astype(np.float32), "z": zero_point(np.int8, 3, 3)}
    check_against_ort("DequantizeLinear", {"x": x}, initializers=inits, axis=1, block_size=3, opset=21)


def test_dequantize_float16_scale() -> None:
    x = qrand(np.int8, 4, 5)
    inits = {"s": np.array(0.125, np.float16), "z": np.array(-3, np.int8)}
    check_against_ort("DequantizeLinear", {"x": x}, initializers=inits, opset=19)


def test_quantize_to_int4_by_output_dtype() -> None:
    # (int4 / float8 in depth: tests/ops/test_lowprec.py)
    x = (RNG.standard_normal((2, 4)) * 4).astype(np.float32)
    model = one_node_model("QuantizeLinear", {"x": x}, initializers={"s": np.array(0.5, np.float32)}, opset=21,
                           output_dtype=onnx.TensorProto.INT4)
    (got,) = run_glow(model, {"x": x})
    (want,) = run_reference(model, {"x": x})
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.astype(np.int8), np.clip(np.rint(x / 0.5), -8, 7).astype(np.int8))
    np.testing.assert_array_equal(got.astype(np.int8), want.astype(np.int8))


@pytest.mark.parametrize("shape", [(3, 4), (2, 5, 6), (1,)])
def test_dynamic_quantize(shape: tuple[int, ...]) -> None:
    x = (RNG.standard_normal(shape) * 3).astype(np.float32)
    check_against_ort("DynamicQuantizeLinear", {"x": x}, n_outputs=3, opset=11)


@pytest.mark.parametrize("value", [0.0, -2.0, 3.0])
def test_dynamic_quantize_constant_input(value: float) -> None:
    check_against_ort("DynamicQuantizeLinear", {"x": np.full((2, 3), value, np.float32)}, n_outputs=3, opset=11)


def test_dynamic_quantize_positive_only() -> None:
    x = RNG.uniform(1.0, 5.0, (4, 4)).astype(np.float32)
    check_against_ort("DynamicQuantizeLinear", {"x": x}, n_outputs=3, opset=11)


@pytest.mark.parametrize("ta,tb", [(np.uint8, np.uint8), (np.int8, np.int8), (np.uint8, np.int8)])
@pytest.mark.parametrize("zp", ["none", "scalar", "vector"])
def test_matmul_integer(ta: Any, tb: Any, zp: str) -> None:
    a, b = qrand(ta, 2, 3, 4), qrand(tb, 4, 5)
    inputs = {"a": a, "b": b}
    order = ["a", "b"]
    inits: dict[str, np.ndarray] = {}
    if zp == "scalar":
        inits = {"az": zero_point(ta), "bz": zero_point(tb)}
        order += ["az", "bz"]
    elif zp == "vector":
        inits = {"bz": zero_point(tb, 5)}
        order += ["", "bz"]
    check_against_ort("MatMulInteger", inputs, initializers=inits, input_order=order, opset=10)


def test_matmul_integer_per_row_a() -> None:
    a, b = qrand(np.uint8, 3, 4), qrand(np.uint8, 4, 2)
    inits = {"az": zero_point(np.uint8, 3)}
    model = one_node_model("MatMulInteger", {"a": a, "b": b}, initializers=inits, input_order=["a", "b", "az"],
                           opset=10)
    got = run_glow(model, {"a": a, "b": b})[0]  # (onnxruntime refuses per-row zero points)
    want = (a.astype(np.int32) - inits["az"].astype(np.int32)[:, None]) @ b.astype(np.int32)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 1, 1, 1], "strides": [2, 1]}, {"group": 2, "dilations": [2, 2]}])
def test_conv_integer(attrs: dict[str, Any]) -> None:
    x, w = qrand(np.uint8, 1, 4, 7, 6), qrand(np.uint8, 6, 4 // attrs.get("group", 1), 3, 3)
    inits = {"xz": np.array(7, np.uint8), "wz": np.array(3, np.uint8)}
    check_against_ort("ConvInteger", {"x": x, "w": w}, initializers=inits, input_order=["x", "w", "xz", "wz"],
                      opset=10, **attrs)


@pytest.mark.parametrize("ta,tb,ty", [(np.uint8, np.uint8, np.uint8), (np.int8, np.int8, np.int8),
                                      (np.uint8, np.int8, np.uint8)])
@pytest.mark.parametrize("per_column", [False, True])
def test_qlinear_matmul(ta: Any, tb: Any, ty: Any, per_column: bool) -> None:
    a, b = qrand(ta, 2, 3, 8), qrand(tb, 8, 5)
    n = 5 if per_column else 1
    shape = (n,) if per_column else ()
    inits = {
        "a_s": np.array(0.05, np.float32), "a_z": zero_point(ta),
        "b_s": RNG.uniform(0.01, 0.1, shape).astype(np.float32), "b_z": zero_point(tb, *shape),
        "y_s": np.array(0.7, np.float32), "y_z": zero_point(ty),
    }
    order = ["a", "a_s", "a_z", "b", "b_s", "b_z", "y_s", "y_z"]
    check_against_ort("QLinearMatMul", {"a": a, "b": b}, initializers=inits, input_order=order, opset=10)


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_qlinear_conv(per_channel: bool, bias: bool) -> None:
    x, w = qrand(np.uint8, 1, 3, 8, 8), qrand(np.int8, 4, 3, 3, 3)
    shape = (4,) if per_channel else ()
    inits = {
        "x_s": np.array(0.02, np.float32), "x_z": np.array(128, np.uint8),
        "w_s": RNG.uniform(0.005, 0.02, shape).astype(np.float32), "w_z": np.zeros(shape, np.int8),
        "y_s": np.array(0.5, np.float32), "y_z": np.array(10, np.uint8),
    }
    order = ["x", "x_s", "x_z", "w", "w_s", "w_z", "y_s", "y_z"]
    if bias:
        inits["b"] = RNG.integers(-1000, 1000, 4).astype(np.int32)
        order.append("b")
    check_against_ort("QLinearConv", {"x": x, "w": w}, initializers=inits, input_order=order, opset=10,
                      pads=[1, 1, 1, 1])


def test_qdq_roundtrip_matches_ort() -> None:
    x = (RNG.standard_normal((2, 8)) * 4).astype(np.float32)
    q = onnx.helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"])
    dq = onnx.helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])
    graph = onnx.helper.make_graph(
        [q, dq], "g", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, x.shape)],
        [onnx.numpy_helper.from_array(np.array(0.05, np.float32), "s"),
         onnx.numpy_helper.from_array(np.array(-4, np.int8), "z")])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)], ir_version=8)
    assert_same(run_glow(model, {"x": x}), run_ort(model, {"x": x}))


@pytest.mark.parametrize("scale", [0.1, 0.37, 3.3])
def test_quantize_float16(scale: float) -> None:
    x = (RNG.standard_normal(500) * 100).astype(np.float16)
    inits = {"s": np.array(scale, np.float16), "z": np.array(3, np.int8)}
    check_against_ort("QuantizeLinear", {"x": x}, initializers=inits, opset=19)


def test_quantize_float16_scale_opset23_unsupported() -> None:
    x = RNG.standard_normal(8).astype(np.float32)
    inits = {"s": np.array(0.1, np.float16), "z": np.array(3, np.int8)}
    model = one_node_model("QuantizeLinear", {"x": x}, initializers=inits, opset=23)
    with pytest.raises(UnsupportedError, match="precision"):
        run_glow(model, {"x": x})


@pytest.mark.parametrize("xt", [np.int8, np.uint8, np.int16])
@pytest.mark.parametrize("opset", [19, 21, 23])
def test_dequantize_float16(xt: Any, opset: int) -> None:
    x = qrand(xt, 2000)
    inits = {"s": np.array(0.0137, np.float16), "z": np.array(3, xt)}
    model = one_node_model("DequantizeLinear", {"x": x}, initializers=inits, opset=opset)
    if xt == np.int16 and opset < 21:  # int16 arrived in DequantizeLinear at opset 21: an invalid model
        with pytest.raises(ModelError, match="int16, which DequantizeLinear does not accept at opset 19"):
            run_glow(model, {"x": x})
    elif xt == np.int16:  # 16-bit differences are not exact in float16: spec and onnxruntime disagree
        with pytest.raises(UnsupportedError, match="int16 to float16"):
            run_glow(model, {"x": x})
    else:
        assert_same(run_glow(model, {"x": x}), run_ort(model, {"x": x}))


def test_dequantize_output_dtype_float32() -> None:
    x = qrand(np.int16, 4, 5)
    inits = {"s": np.array(0.01, np.float32), "z": np.array(7, np.int16)}
    check_against_ort("DequantizeLinear", {"x": x}, initializers=inits, opset=23,
                      output_dtype=onnx.TensorProto.FLOAT)
