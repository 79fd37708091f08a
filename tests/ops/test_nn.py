"""Neural-network compute ops on the interpreter vs onnxruntime: conv, pooling, matmul, gemm, einsum, no-ops."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest

from glow_core.errors import UnsupportedError
from tests.ops.oputil import assert_same, check_against_ort, one_node_model, run_glow, run_ort

RNG = np.random.default_rng(0)


def rand(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def tol(dtype: Any) -> dict[str, float]:
    return {"rtol": 1e-2, "atol": 1e-2} if np.dtype(dtype) == np.float16 else {"rtol": 1e-4, "atol": 1e-5}


# -- Conv ---------------------------------------------------------------------------------------

CONV_CASES = [
    # (x shape, w shape, attrs)
    ((1, 3, 9), (4, 3, 3), {}),
    ((2, 4, 10), (6, 2, 3), {"group": 2, "strides": [2], "pads": [1, 2], "dilations": [2]}),
    ((1, 3, 8, 9), (5, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 4, 11, 10), (4, 2, 3, 2), {"group": 2, "strides": [2, 3], "pads": [0, 1, 2, 0], "dilations": [2, 1]}),
    ((1, 6, 7, 7), (6, 1, 3, 3), {"group": 6, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 8, 7), (3, 2, 4, 3), {"auto_pad": "SAME_LOWER", "strides": [3, 2]}),
    ((1, 2, 8, 7), (3, 2, 2, 3), {"auto_pad": "VALID", "strides": [2, 2]}),
    ((1, 8, 5, 5), (16, 8, 1, 1), {}),
    ((1, 2, 9, 10), (3, 2, 2, 2), {"auto_pad": "SAME_LOWER", "strides": [3, 3]}),  # stride > kernel
    ((1, 2, 5, 6, 4), (3, 2, 2, 3, 2), {"pads": [1, 0, 1, 0, 1, 1], "strides": [1, 2, 1]}),
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
def test_conv(xs: tuple[int, ...], ws: tuple[int, ...], attrs: dict[str, Any], bias: bool) -> None:
    inputs = {"x": rand(*xs), "w": rand(*ws)}
    if bias:
        inputs["b"] = rand(ws[0])
    check_against_ort("Conv", inputs, **attrs, **tol(np.float32))


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_conv_dtypes(dtype: Any) -> None:
    inputs = {"x": rand(1, 3, 6, 6, dtype=dtype), "w": rand(4, 3, 3, 3, dtype=dtype), "b": rand(4, dtype=dtype)}
    model = one_node_model("Conv", inputs, pads=[1, 1, 1, 1])
    got = run_glow(model, inputs)
    # reference in float32 (onnxruntime's CPU Conv has neither float64 nor (on every build) float16)
    f32 = {k: v.astype(np.float32) for k, v in inputs.items()}
    want = run_ort(one_node_model("Conv", f32, pads=[1, 1, 1, 1]), f32)
    assert got[0].dtype == np.dtype(dtype)
    np.testing.assert_allclose(got[0].astype(np.float64), want[0], **tol(dtype))


# -- ConvTranspose ---------------------------------------------------------------------------------

CONVT_CASES = [
    ((1, 2, 5), (2, 3, 3), {"strides": [2]}),
    ((1, 2, 4, 5), (2, 3, 3, 3), {}),
    ((2, 4, 3, 4), (4, 2, 3, 2), {"group": 2, "strides": [2, 3], "pads": [1, 0, 0, 1], "dilations": [1, 2]}),
    ((1, 2, 4, 4), (2, 3, 3, 3), {"strides": [2, 2], "output_padding": [1, 1]}),
    ((1, 2, 4, 4), (2, 3, 3, 3), {"strides": [2, 2], "output_shape": [10, 9]}),
    ((1, 2, 4, 4), (2, 3, 3, 3), {"strides": [2, 2], "output_shape": [8, 8]}),
    ((1, 2, 3, 3), (2, 1, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 3, 3, 3), (2, 2, 2, 2, 2), {"strides": [2, 1, 2]}),
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", CONVT_CASES)
def test_conv_transpose(xs: tuple[int, ...], ws: tuple[int, ...], attrs: dict[str, Any], bias: bool) -> None:
    inputs = {"x": rand(*xs), "w": rand(*ws)}
    if bias:
        inputs["b"] = rand(ws[1] * attrs.get("group", 1))
    check_against_ort("ConvTranspose", inputs, **attrs, **tol(np.float32))


# -- pooling ------------------------------------------------------------------------------------------

POOL_CASES = [
    ((1, 2, 9), {"kernel_shape": [3]}),
    ((2, 3, 8, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 2], "strides": [2, 3], "ceil_mode": 1}),
    ((1, 2, 8, 7), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 0, 0, 0], "ceil_mode": 1}),
    ((1, 2, 9, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 8, 8), {"kernel_shape": [2, 3], "strides": [3, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 9, 10), {"kernel_shape": [2, 3], "dilations": [2, 3], "pads": [1, 1, 0, 2]}),
    ((1, 1, 5, 6, 7), {"kernel_shape": [2, 3, 2], "strides": [1, 2, 2], "pads": [0, 1, 1, 1, 0, 0]}),
]


@pytest.mark.parametrize("xs,attrs", POOL_CASES)
def test_maxpool(xs: tuple[int, ...], attrs: dict[str, Any]) -> None:
    check_against_ort("MaxPool", {"x": rand(*xs)}, **attrs)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.float16, np.float64])
def test_maxpool_dtypes(dtype: Any) -> None:
    x = RNG.integers(0, 100, (1, 2, 7, 7)).astype(dtype)
    check_against_ort("MaxPool", {"x": x}, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])


@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("xs,attrs", [POOL_CASES[1], POOL_CASES[2], POOL_CASES[6]])
def test_maxpool_indices(xs: tuple[int, ...], attrs: dict[str, Any], storage_order: int) -> None:
    check_against_ort("MaxPool", {"x": rand(*xs)}, n_outputs=2, storage_order=storage_order, **attrs)


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("xs,attrs", POOL_CASES)
def test_averagepool(xs: tuple[int, ...], attrs: dict[str, Any], count_include_pad: int) -> None:
    check_against_ort("AveragePool", {"x": rand(*xs)}, count_include_pad=count_include_pad, opset=19, **attrs)


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("xs,attrs", [c for c in POOL_CASES if not c[1].get("ceil_mode")])
def test_lppool(xs: tuple[int, ...], attrs: dict[str, Any], p: int) -> None:
    check_against_ort("LpPool", {"x": rand(*xs)}, p=p, opset=18, **attrs, rtol=1e-4)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
@pytest.mark.parametrize("xs", [(2, 3, 5), (1, 4, 6, 7), (1, 2, 3, 4, 5), (1, 3, 40, 40)])
def test_global_pools(op: str, xs: tuple[int, ...]) -> None:
    check_against_ort(op, {"x": rand(*xs)}, rtol=1e-4)


# -- matrix products -------------------------------------------------------------------------------------

MATMUL_SHAPES = [((3,), (3,)), ((3,), (3, 4)), ((2, 3), (3,)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)),
                 ((2, 1, 2, 3), (3, 3, 4)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,))]


@pytest.mark.parametrize("a,b", MATMUL_SHAPES)
def test_matmul_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    check_against_ort("MatMul", {"a": rand(*a), "b": rand(*b)})


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64, np.uint32, np.uint64])
def test_matmul_dtypes(dtype: Any) -> None:
    a = RNG.integers(0, 50, (2, 3, 4)).astype(dtype)
    b = RNG.integers(0, 50, (4, 5)).astype(dtype)
    check_against_ort("MatMul", {"a": a, "b": b})


GEMM_CASES = [
    ((3, 4), (4, 5), None, {}),
    ((4, 3), (4, 5), (5,), {"transA": 1, "alpha": 0.5}),
    ((3, 4), (5, 4), (3, 1), {"transB": 1, "beta": 2.0}),
    ((4, 3), (5, 4), (3, 5), {"transA": 1, "transB": 1, "alpha": 1.5, "beta": -0.5}),
    ((3, 4), (4, 5), (1,), {"beta": 0.0}),
    ((3, 4), (4, 5), (), {}),
]


@pytest.mark.parametrize("a,b,c,attrs", GEMM_CASES)
def test_gemm(a: tuple[int, ...], b: tuple[int, ...], c: tuple[int, ...] | None, attrs: dict[str, Any]) -> None:
    inputs = {"a": rand(*a), "b": rand(*b)}
    if c is not None:
        inputs["c"] = rand(*c)
    check_against_ort("Gemm", inputs, **attrs)


def test_gemm_int_unsupported_alpha() -> None:
    a = np.ones((2, 2), np.int32)
    model = one_node_model("Gemm", {"a": a, "b": a}, alpha=2.0)
    with pytest.raises(UnsupportedError, match="alpha"):
        run_glow(model, {"a": a, "b": a})


EINSUM_CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]),
    ("ii->i", [(3, 3)]),
    ("ij->", [(3, 4)]),
    ("...ij,...jk->...ik", [(2, 3, 2, 3), (2, 3, 3, 4)]),
    ("...ij->...ji", [(2, 3, 4)]),
    ("ij,ij", [(2, 3), (2, 3)]),
    ("ba", [(2, 3)]),
    ("i,j->ij", [(3,), (4,)]),
    ("abc,cd,de->abe", [(2, 2, 3), (3, 2), (2, 4)]),
    ("aB,Ba->aB", [(2, 3), (3, 2)]),
]


@pytest.mark.parametrize("eq,shapes", EINSUM_CASES)
def test_einsum(eq: str, shapes: list[tuple[int, ...]]) -> None:
    inputs = {f"x{i}": rand(*s) for i, s in enumerate(shapes)}
    model = one_node_model("Einsum", inputs, equation=eq, opset=12)
    out_type = model.graph.output[0].type.tensor_type
    if out_type.elem_type == onnx.TensorProto.UNDEFINED:  # onnx shape inference gives up on '...' broadcasting
        want = np.einsum(eq, *inputs.values())
        model.graph.output[0].CopyFrom(onnx.helper.make_tensor_value_info("out0", onnx.TensorProto.FLOAT, want.shape))
    assert_same(run_glow(model, inputs), run_ort(model, inputs), rtol=1e-5, atol=1e-5)


def test_einsum_ellipsis_broadcast() -> None:
    # numpy broadcasting of '...' (onnxruntime refuses ellipses of different sizes)
    inputs = {"a": rand(2, 1, 2, 3), "b": rand(3, 3, 4)}
    node = onnx.helper.make_node("Einsum", ["a", "b"], ["y"], equation="...ij,...jk->...ik")
    graph = onnx.helper.make_graph(
        [node], "g", [onnx.helper.make_tensor_value_info(k, onnx.TensorProto.FLOAT, v.shape) for k, v in inputs.items()],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, (2, 3, 2, 4))])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 12)], ir_version=8)
    got = run_glow(model, inputs)
    np.testing.assert_allclose(got[0], np.einsum("...ij,...jk->...ik", *inputs.values()), rtol=1e-5)


def test_einsum_int() -> None:
    inputs = {"a": RNG.integers(-5, 5, (3, 4)).astype(np.int64), "b": RNG.integers(-5, 5, (4, 2)).astype(np.int64)}
    check_against_ort("Einsum", inputs, equation="ij,jk->ik", opset=12)


def test_einsum_ellipsis_summed_unsupported() -> None:
    x = rand(2, 3, 4)
    model = one_node_model("Einsum", {"x": x}, equation="...ij->ij", opset=12)
    with pytest.raises(UnsupportedError):
        run_glow(model, {"x": x})


# -- no-ops ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_identity(dtype: Any) -> None:
    x = RNG.integers(0, 2, (2, 3)).astype(dtype)
    got = check_against_ort("Identity", {"x": x})
    assert got[0] is not x


@pytest.mark.parametrize("opset", [12, 13, 22])
def test_dropout_with_mask(opset: int) -> None:
    x = rand(2, 3, 4)
    model = one_node_model("Dropout", {"x": x}, n_outputs=2, opset=opset)
    got = run_glow(model, {"x": x})
    want = run_ort(model, {"x": x})
    assert_same(got, want)
    assert got[1].dtype == np.bool_ and bool(got[1].all())


def test_dropout_old_mask_unsupported() -> None:
    x = rand(2, 3)
    model = one_node_model("Dropout", {"x": x}, n_outputs=2, opset=10)
    with pytest.raises(UnsupportedError, match="mask"):
        run_glow(model, {"x": x})


def test_dropout_old_unread_mask() -> None:
    x = rand(2, 3)
    node = onnx.helper.make_node("Dropout", ["x"], ["y", "mask"], ratio=0.2)
    relu = onnx.helper.make_node("Relu", ["y"], ["z"])
    graph = onnx.helper.make_graph(
        [node, relu], "g", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
        [onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, x.shape)])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 9)], ir_version=8)
    assert_same(run_glow(model, {"x": x}), run_ort(model, {"x": x}))


def test_dropout_old_without_mask() -> None:
    check_against_ort("Dropout", {"x": rand(2, 3)}, opset=10, ratio=0.3)


def test_dropout_training_false() -> None:
    x = rand(3, 4)
    inits = {"r": np.array(0.3, np.float32), "t": np.array(False)}
    check_against_ort("Dropout", {"x": x}, initializers=inits, n_outputs=2, opset=13)


def test_dropout_training_zero_ratio() -> None:
    x = rand(3, 4)
    inits = {"r": np.array(0.0, np.float32), "t": np.array(True)}
    check_against_ort("Dropout", {"x": x}, initializers=inits, n_outputs=2, opset=13)


def test_dropout_training_unsupported() -> None:
    x = rand(3, 4)
    inits = {"r": np.array(0.5, np.float32), "t": np.array(True)}
    model = one_node_model("Dropout", {"x": x}, initializers=inits, opset=13)
    with pytest.raises(UnsupportedError, match="training_mode"):
        run_glow(model, {"x": x})


def test_conv_kernel_shape_mismatch_unsupported() -> None:
    x, w = rand(1, 1, 5, 5), rand(1, 1, 3, 3)
    node = onnx.helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[2, 2])
    graph = onnx.helper.make_graph(
        [node], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape),
         onnx.helper.make_tensor_value_info("w", onnx.TensorProto.FLOAT, w.shape)],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 1, 3, 3])])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(UnsupportedError, match="kernel_shape"):
        run_glow(model, {"x": x, "w": w})
