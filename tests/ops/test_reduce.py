"""Reductions, ArgMax/ArgMin, CumSum/CumProd, TopK and the softmax family against onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

import glow_core
from glow_core import onnx_backend
from glow_core.errors import DynamicValueError, GlowTypeError, UnsupportedError
from glow_core.ir.graph import Function
from glow_core.ir.types import ElemKind, TensorType
from tests.ops.oputil import assert_same, one_node_model, run_glow, run_ort

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
I32, I64, U8 = np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.uint8)

REDUCTIONS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]
LOG_REDUCTIONS = {"ReduceLogSum", "ReduceLogSumExp"}


def rand(shape: tuple[int, ...], dtype: np.dtype, lo: float = -3, hi: float = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.uniform(lo, hi, shape).astype(dtype)
    if dtype.kind == "u":
        lo = max(lo, 0)
    return rng.integers(int(lo), int(hi) + 1, shape).astype(dtype)


def tol(dtype: np.dtype) -> tuple[float, float]:
    return {F16: (2e-3, 2e-3), F32: (1e-5, 1e-5), F64: (1e-10, 1e-12)}.get(np.dtype(dtype), (0.0, 0.0))


def check(op: str, feeds: dict[str, np.ndarray], *, dtype: np.dtype, n_outputs: int = 1, **kw: Any) -> list[np.ndarray]:
    model = one_node_model(op, feeds, n_outputs, **kw)
    got = run_glow(model, feeds)
    assert_same(got, run_ort(model, feeds), *tol(dtype))
    return got


# -- reductions ------------------------------------------------------------------------------

def _reduce_input(op: str, dtype: np.dtype) -> np.ndarray:
    if op == "ReduceProd":
        return rand((2, 3, 4), dtype, -2, 2) if dtype.kind != "f" else rand((2, 3, 4), dtype, 0.5, 1.5)
    if op == "ReduceLogSum":
        return rand((2, 3, 4), dtype, 0.1, 3)
    return rand((2, 3, 4), dtype)


@pytest.mark.parametrize("form", ["attribute", "input"])
@pytest.mark.parametrize("dtype", [F32, F16, F64, I32, I64], ids=str)
@pytest.mark.parametrize("op", REDUCTIONS)
def test_reduction(op: str, dtype: np.dtype, form: str) -> None:
    if op in LOG_REDUCTIONS and dtype.kind != "f":
        pytest.skip("integer log reductions are refused (see test_log_reduction_of_ints_is_unsupported)")
    x = _reduce_input(op, dtype)
    since = 13 if op == "ReduceSum" else 18
    for axes in (None, [1], [-1, 0], [0, 1, 2]):
        for keepdims in (0, 1):
            if form == "attribute":
                kw: dict[str, Any] = {"opset": since - 2 if op == "ReduceSum" else since - 5}
                if axes is not None:
                    kw["axes"] = axes
            else:
                kw = {"opset": since}
                if axes is not None:
                    kw["initializers"] = {"axes": np.array(axes, np.int64)}
            check(op, {"x": x}, dtype=dtype, keepdims=keepdims, **kw)


@pytest.mark.parametrize("op", REDUCTIONS)
def test_noop_with_empty_axes_reduces_each_element_alone(op: str) -> None:
    x = _reduce_input(op, F32)
    for inits in ({}, {"axes": np.array([], np.int64)}):
        got = check(op, {"x": x}, dtype=F32, opset=18, noop_with_empty_axes=1, initializers=inits)
        assert got[0].shape == x.shape


@pytest.mark.parametrize("op", REDUCTIONS)
def test_empty_set(op: str) -> None:
    x = np.zeros((2, 0, 3), np.float32)
    model = one_node_model(op, {"x": x}, opset=18, initializers={"axes": np.array([1], np.int64)})
    got = run_glow(model, {"x": x})[0]
    assert got.shape == (2, 1, 3)
    if op == "ReduceMean":  # 0/0: onnxruntime returns 0, the spec leaves it undefined
        assert np.isnan(got).all()
    else:
        assert_same([got], run_ort(model, {"x": x}))


def test_empty_set_keeps_empty_outer_axis() -> None:
    x = np.zeros((0, 3), np.float32)
    check("ReduceSum", {"x": x}, dtype=F32, opset=13, initializers={"axes": np.array([1], np.int64)})


@pytest.mark.parametrize("dtype", [np.dtype(np.bool_), np.dtype(np.int8), U8], ids=str)
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_max_min_small_kinds(op: str, dtype: np.dtype) -> None:
    x = rand((3, 4), I32, 0, 1).astype(dtype) if dtype == np.bool_ else rand((3, 4), dtype, -100, 100)
    check(op, {"x": x}, dtype=dtype, opset=20, initializers={"axes": np.array([1], np.int64)})


def test_integer_mean_truncates_toward_zero() -> None:
    x = np.array([[-1, -2, -4], [3, -5, -6], [1, 1, 0]], np.int32)
    got = check("ReduceMean", {"x": x}, dtype=I32, opset=17, axes=[1], keepdims=0)
    assert got[0].tolist() == [-2, -2, 0]


def test_float16_sum_accumulates_in_float32() -> None:
    x = np.full((1, 4096), 1.0, np.float16)
    got = run_glow(one_node_model("ReduceSum", {"x": x}, opset=13), {"x": x})[0]
    assert got.dtype == np.float16 and float(got.ravel()[0]) == 4096.0


def test_log_reduction_of_ints_is_unsupported() -> None:
    x = rand((2, 3), I32, 1, 5)
    with pytest.raises(UnsupportedError, match="element kind int32"):
        run_glow(one_node_model("ReduceLogSum", {"x": x}, opset=17, axes=[1]), {"x": x})


def test_run_time_axes_are_bound_as_constants() -> None:
    x = rand((2, 3, 4), F32)
    axes = np.array([0, 2], np.int64)
    model = one_node_model("ReduceSum", {"x": x, "axes": axes}, opset=13)
    out = model.graph.output[0]
    out.CopyFrom(helper.make_tensor_value_info(out.name, TensorProto.FLOAT, ["a", "b", "c"]))
    with pytest.raises(DynamicValueError, match="axes"):
        glow_core.compile(model, "interpreter")
    got = onnx_backend.prepare(model).run([x, axes])
    assert_same(list(got), run_ort(model, {"x": x, "axes": axes}), *tol(F32))


def test_duplicate_axes_are_refused() -> None:
    x = rand((2, 3), F32)
    with pytest.raises(UnsupportedError, match="twice"):
        run_glow(one_node_model("ReduceMax", {"x": x}, opset=13, axes=[1, -1]), {"x": x})


def test_kind_rejects_unnormalized_axes() -> None:
    fn = Function()
    x = fn.add_input("x", TensorType(ElemKind.FLOAT32, (2, 3)))
    with pytest.raises(GlowTypeError, match="sorted"):
        fn.create("ReduceSum", [x], {"axes": (1, 0)})
    with pytest.raises(GlowTypeError, match="element kind"):
        fn.create("ReduceLogSum", [fn.add_input("i", TensorType(ElemKind.INT32, (2,)))], {"axes": (0,)})
    node = fn.create("ReduceSum", [x], {"axes": (1,), "keepdims": False})
    assert node.result.type == TensorType(ElemKind.FLOAT32, (2,))


# -- ArgMax / ArgMin -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16, F64, I32, I64, U8], ids=str)
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_reduction(op: str, dtype: np.dtype) -> None:
    x = rand((3, 4, 5), dtype, 0, 3)  # few distinct values: many ties
    if dtype.kind == "f":
        x = np.round(x)
    for axis in (0, 1, -1):
        for keepdims in (0, 1):
            for last in (0, 1):
                check(op, {"x": x}, dtype=dtype, opset=13, axis=axis, keepdims=keepdims, select_last_index=last)
    check(op, {"x": x}, dtype=dtype, opset=11)  # defaults: axis 0, keepdims 1


def test_arg_reduction_over_empty_axis_is_unsupported() -> None:
    x = np.zeros((2, 0), np.float32)
    with pytest.raises(UnsupportedError, match="length 0"):
        run_glow(one_node_model("ArgMax", {"x": x}, opset=13, axis=1), {"x": x})


# -- CumSum / CumProd --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F64, I32, I64], ids=str)
@pytest.mark.parametrize("op,opset", [("CumSum", 14), ("CumProd", 26)])
def test_scan(op: str, opset: int, dtype: np.dtype) -> None:
    x = rand((3, 4), dtype, -2, 2) if op == "CumProd" and dtype.kind != "f" else rand((3, 4), dtype, 0.5, 1.5)
    for axis in (0, 1, -1):
        for exclusive in (0, 1):
            for reverse in (0, 1):
                check(op, {"x": x}, dtype=dtype, opset=opset, exclusive=exclusive, reverse=reverse,
                      initializers={"axis": np.array(axis, np.int32)})


def test_cumsum_float16() -> None:
    x = rand((3, 50), F16)
    check("CumSum", {"x": x}, dtype=F16, opset=14, initializers={"axis": np.array([1], np.int64)})


# -- TopK ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16, F64, I32, I64, U8], ids=str)
def test_topk(dtype: np.dtype) -> None:
    x = rand((3, 4, 6), dtype, 0, 4)  # ties: lower index first
    if dtype.kind == "f":
        x = np.round(x)
    for axis in (0, 1, -1):
        for largest in (0, 1):
            for k in (0, 1, 3):
                check("TopK", {"x": x}, dtype=dtype, n_outputs=2, opset=11, axis=axis, largest=largest,
                      initializers={"k": np.array([k], np.int64)})


def test_topk_opset1_attribute_k_and_ties() -> None:
    x = np.array([[1, 3, 3, 2, 3, 1]], np.float32)
    got = check("TopK", {"x": x}, dtype=F32, n_outputs=2, opset=9, k=4)
    assert got[1].tolist() == [[1, 2, 4, 3]]
    got = check("TopK", {"x": x}, dtype=F32, n_outputs=2, opset=11, largest=0,
                initializers={"k": np.array([3], np.int64)})
    assert got[1].tolist() == [[0, 5, 3]]


def test_topk_k_too_large_is_unsupported() -> None:
    x = rand((2, 3), F32)
    model = one_node_model("TopK", {"x": x}, 2, opset=11, initializers={"k": np.array([4], np.int64)})
    for out, elem in zip(model.graph.output, (TensorProto.FLOAT, TensorProto.INT64)):
        out.CopyFrom(helper.make_tensor_value_info(out.name, elem, [2, 4]))
    with pytest.raises(UnsupportedError, match="k=4"):
        run_glow(model, {"x": x})


# -- Softmax family ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=str)
@pytest.mark.parametrize("opset", [9, 11, 13])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_family(op: str, opset: int, dtype: np.dtype) -> None:
    if op == "Hardmax" and dtype == F64:
        pytest.skip("onnxruntime has no float64 Hardmax")
    for shape in ((2, 3, 4, 5), (2, 1, 3, 1)):
        x = np.round(rand(shape, dtype), 0 if op == "Hardmax" else 3).astype(dtype)  # Hardmax: ties
        for axis in (None, 0, 1, 2, -1):
            if axis is not None and axis < 0 and opset < 11:
                continue
            kw = {} if axis is None else {"axis": axis}
            check(op, {"x": x}, dtype=dtype, opset=opset, **kw)


def test_opset9_softmax_coerces_to_2d() -> None:
    x = rand((2, 3, 4), F32)
    got = check("Softmax", {"x": x}, dtype=F32, opset=9)  # default axis 1: over the 12 trailing values
    np.testing.assert_allclose(got[0].reshape(2, -1).sum(axis=1), 1.0, rtol=1e-6)
    got13 = check("Softmax", {"x": x}, dtype=F32, opset=13, axis=1)
    np.testing.assert_allclose(got13[0].sum(axis=1), 1.0, rtol=1e-6)


def test_softmax_large_values_are_stable() -> None:
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 3.0]], np.float32)
    for op in ("Softmax", "LogSoftmax"):
        got = check(op, {"x": x}, dtype=F32, opset=13)
        assert np.isfinite(got[0]).all()


def test_softmax_axis_out_of_range_is_unsupported() -> None:
    x = rand((3,), F32)
    with pytest.raises(UnsupportedError, match="out of range"):
        run_glow(one_node_model("Softmax", {"x": x}, opset=9), {"x": x})


def test_softmax_kind_declares_activation() -> None:
    from glow_core.ir.kinds import Category, get_kind

    assert get_kind("Softmax").is_(Category.ACTIVATION)
    assert get_kind("ReduceSum").is_(Category.REDUCTION)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_over_empty_axis(op: str) -> None:
    for shape in ((3, 0), (0, 3)):
        x = np.zeros(shape, np.float32)
        got = run_glow(one_node_model(op, {"x": x}, opset=13), {"x": x})[0]
        assert got.shape == shape and got.dtype == np.float32


def test_exclusive_scan_over_empty_axis() -> None:
    x = np.zeros((2, 0, 3), np.float32)
    for exclusive in (0, 1):
        model = one_node_model("CumSum", {"x": x}, opset=14, exclusive=exclusive, reverse=1,
                               initializers={"axis": np.array(1, np.int64)})
        assert run_glow(model, {"x": x})[0].shape == x.shape
