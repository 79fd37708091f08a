"""Indexing and value-generating ops against onnxruntime: Gather*, Scatter*, OneHot, Compress,
NonZero, ReverseSequence, TensorScatter, Range, EyeLike and the window functions."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto

from glow_core.errors import DynamicValueError, ExecutionError, GlowTypeError, UnsupportedError
from glow_core.ir.graph import Function
from glow_core.ir.types import ElemKind, TensorType
from tests.ops.oputil import assert_same, one_node_model, run_glow, run_ort, run_reference
from tests.ops.test_movement import BOOL, F16, F32, F64, I8, I32, I64, U8, check, imported, rand


def idx(values: Any, dtype: np.dtype = I64) -> np.ndarray:
    return np.array(values, dtype)


# -- gathers -------------------------------------------------------------------------------

@pytest.mark.parametrize("index_dtype", [I64, I32], ids=str)
@pytest.mark.parametrize("dtype", [F32, F16, I64, U8, BOOL], ids=str)
def test_gather(dtype: np.dtype, index_dtype: np.dtype) -> None:
    x = rand((3, 4, 5), dtype)
    for axis, indices in [(0, [2, 0, -1]), (1, [[0, -4], [3, 1]]), (-1, 4), (2, np.zeros((2, 0), int))]:
        check("Gather", {"x": x, "i": idx(indices, index_dtype)}, opset=13, axis=axis)


def test_gathers_producing_scalars() -> None:
    check("Gather", {"x": rand((5,), F32), "i": np.array(-2, np.int64)}, opset=13)
    feeds = {"x": rand((2, 3), I32), "i": idx([1, -2])}
    nd = one_node_model("GatherND", feeds, opset=13)
    nd.graph.output[0].type.tensor_type.elem_type = TensorProto.INT32  # onnx infers nothing for 1-D indices
    nd.graph.output[0].type.tensor_type.shape.SetInParent()
    assert_same(run_glow(nd, feeds), run_ort(nd, feeds), 0.0, 0.0)
    model = one_node_model("Gather", {}, initializers={"x": rand((5,), F32), "i": np.array(3, np.int64)}, opset=13)
    assert_same(run_glow(model, {}), run_ort(model, {}), 0.0, 0.0)  # folded to a 0-d constant


def test_gather_of_constant_data_with_constant_indices_folds() -> None:
    fn = imported("Gather", {}, initializers={"x": rand((4, 3), F32), "i": idx([1, -1])}, opset=13)
    assert not fn.nodes


def test_gather_out_of_range_index_fails_at_run_time() -> None:
    feeds = {"x": rand((3, 2), F32), "i": idx([3])}
    with pytest.raises(ExecutionError, match="out of range"):
        run_glow(one_node_model("Gather", feeds, opset=13), feeds)


@pytest.mark.parametrize("dtype", [F32, I32, BOOL], ids=str)
def test_gather_elements(dtype: np.dtype) -> None:
    x = rand((3, 4), dtype)
    check("GatherElements", {"x": x, "i": idx([[0, 2, -1, 1], [2, 2, 0, -3]])}, opset=13, axis=0)
    check("GatherElements", {"x": x, "i": idx([[3, -1], [0, 1], [2, 2]], I32)}, opset=13, axis=-1)


@pytest.mark.parametrize("dtype", [F32, I64], ids=str)
def test_gather_nd(dtype: np.dtype) -> None:
    x = rand((2, 3, 4), dtype)
    check("GatherND", {"x": x, "i": idx([[0, 1], [1, -1]])}, opset=13)
    check("GatherND", {"x": x, "i": idx([[[1, 2, 3]], [[0, 0, -1]]])}, opset=13)
    check("GatherND", {"x": x, "i": idx([[1], [0]])}, opset=13, batch_dims=1)
    check("GatherND", {"x": x, "i": idx([[[2, 3], [0, 0]], [[1, 1], [-1, -1]]])}, opset=13, batch_dims=1)
    check("GatherND", {"x": x, "i": idx([[[3], [1]], [[0], [2]], ][:2]).reshape(2, 2, 1)[:, :1].repeat(3, 1)},
          opset=13, batch_dims=2)
    check("GatherND", {"x": x, "i": idx([[0, 1]])}, opset=11)


# -- scatters ------------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [F32, I64, F64], ids=str)
def test_scatter_elements(dtype: np.dtype, reduction: str) -> None:
    x = rand((3, 4), dtype)
    unique = idx([[1, 0, 2, -1], [0, 2, 1, 0]])
    dup = idx([[1, 1], [0, 0], [-1, 2]], I32)
    check("ScatterElements", {"x": x, "i": unique, "u": rand((2, 4), dtype, 1)}, opset=18, axis=0,
          reduction=reduction)
    if reduction != "none":  # duplicates are defined only with a reduction
        check("ScatterElements", {"x": x, "i": dup, "u": rand((3, 2), dtype, 2)}, opset=18, axis=-1,
              reduction=reduction)


def test_scatter_elements_without_reduction_and_old_scatter() -> None:
    x, i, u = rand((3, 4), F32), idx([[1, 0, 2, 3]]), rand((1, 4), F32, 1)
    check("ScatterElements", {"x": x, "i": i, "u": u}, opset=11, axis=1)
    check("Scatter", {"x": x, "i": i, "u": u}, opset=10, axis=1)
    check("Scatter", {"x": x, "i": idx([[1], [0]]), "u": rand((2, 1), F32, 2)}, opset=9)


def test_scatter_reduction_before_its_opset_is_unsupported() -> None:
    x, i, u = rand((3,), F32), idx([0]), rand((1,), F32)
    with pytest.raises(UnsupportedError, match="max"):
        imported("ScatterElements", {"x": x, "i": i, "u": u}, opset=16, reduction="max")


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [F32, I32], ids=str)
def test_scatter_nd(dtype: np.dtype, reduction: str) -> None:
    x = rand((4, 3, 2), dtype)
    check("ScatterND", {"x": x, "i": idx([[0], [-1]]), "u": rand((2, 3, 2), dtype, 1)}, opset=18,
          reduction=reduction)
    check("ScatterND", {"x": x, "i": idx([[[0, 1, 1]], [[3, -1, 0]]]), "u": rand((2, 1), dtype, 2)}, opset=18,
          reduction=reduction)
    if reduction != "none":
        check("ScatterND", {"x": x, "i": idx([[1, 2], [1, 2], [0, 0]]), "u": rand((3, 2), dtype, 3)}, opset=18,
              reduction=reduction)


# -- one-hot, compress, nonzero ------------------------------------------------------------

ONE_HOT_AXES = [None, 0, 1, 2, -1, -2, -3]


@pytest.mark.parametrize("axis", ONE_HOT_AXES)
def test_one_hot(axis: int | None) -> None:
    kw = {} if axis is None else {"axis": axis}
    # (indices, depth, values) type combinations onnxruntime implements
    for indices, depth, values in [
        (idx([[0, 3, -1], [-5, 5, 2]]), np.array(5, np.int64), np.array([0, 1], np.int64)),
        (idx([[0, 3, -1], [-4, 4, 2]]), np.array(4, np.int64), np.array([-2.5, 3.0], np.float32)),
        (idx([[1, -2, 7], [0, 2, -3]], I32), np.array(3.0, np.float32), np.array([2, 1], np.float32)),
    ]:
        check("OneHot", {"i": indices, "v": values}, initializers={"d": depth}, input_order=["i", "d", "v"],
              opset=11, **kw)


@pytest.mark.parametrize("axis", ONE_HOT_AXES)
def test_one_hot_with_fractional_float_indices_follows_the_reference(axis: int | None) -> None:
    """Fractional float indices: the spec's reference implementation (``onnx.reference``) compares
    each index with 0..depth-1 as it is, so 1.7 matches no position; onnxruntime 1.32 truncates it
    to 1 (1.31 did not). Where the two disagree the reference decides, so this compares with it;
    integral float indices, where both agree, are also checked against onnxruntime."""
    kw = {} if axis is None else {"axis": axis}
    feeds = {"i": np.array([[1.7, -1.2, 3.0], [0.0, 2.9, -4.0]], np.float32), "v": np.array([0, 9], np.float32)}
    model = one_node_model("OneHot", feeds, initializers={"d": np.array(4.0, np.float32)},
                           input_order=["i", "d", "v"], opset=11, **kw)
    want = run_reference(model, feeds)
    assert_same(run_glow(model, feeds), want, 0.0, 0.0)
    integral = {"i": np.trunc(feeds["i"]), "v": feeds["v"]}  # where onnxruntime and the reference agree
    assert_same(run_glow(model, integral), run_reference(model, integral), 0.0, 0.0)
    assert_same(run_glow(model, integral), run_ort(model, integral), 0.0, 0.0)


def test_one_hot_depth_from_an_input_must_be_bound() -> None:
    with pytest.raises(DynamicValueError, match="depth"):
        imported("OneHot", {"i": idx([1]), "d": np.array(3, np.int64), "v": np.array([0, 1], np.int64)}, opset=11)


def test_compress_with_a_constant_condition() -> None:
    x = rand((3, 4), F32)
    for axis in (None, 0, -1):
        kw = {} if axis is None else {"axis": axis}
        check("Compress", {"x": x}, initializers={"c": np.array([True, False, True], bool)}, opset=11, **kw)
    fn = imported("Compress", {"x": x}, initializers={"c": np.array([0, 1, 1, 0], bool)}, opset=11, axis=1)
    assert fn.count_by_kind() == {"Gather": 1}


def test_compress_with_a_runtime_condition_needs_binding() -> None:
    with pytest.raises(DynamicValueError, match="condition"):
        imported("Compress", {"x": rand((3,), F32), "c": np.array([1, 0, 1], bool)}, opset=11)


def test_nonzero_of_constant_data() -> None:
    model = one_node_model("NonZero", {}, initializers={"x": rand((3, 4), I32)}, opset=13)
    assert_same(run_glow(model, {}), run_ort(model, {}), 0.0, 0.0)
    with pytest.raises(DynamicValueError, match="NonZero"):
        imported("NonZero", {"x": rand((3, 4), I32)}, opset=13)


# -- ReverseSequence, TensorScatter ---------------------------------------------------------

@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence(batch_axis: int, time_axis: int) -> None:
    x = rand((4, 3, 2) if batch_axis == 1 else (3, 4, 2), F32)
    check("ReverseSequence", {"x": x, "l": idx([4, 0, 2])}, opset=10, batch_axis=batch_axis, time_axis=time_axis)


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter(mode: str) -> None:
    past, upd = rand((2, 3, 5, 4), F32), rand((2, 3, 2, 4), F32, 1)
    write = idx([0, 3]) if mode == "linear" else idx([4, 2])
    check("TensorScatter", {"p": past, "u": upd, "w": write}, opset=24, mode=mode)
    check("TensorScatter", {"p": past, "u": rand((2, 3, 5, 2), F32, 2)}, opset=24, axis=-1, mode=mode)
    check("TensorScatter", {"p": past, "u": upd}, opset=24, mode=mode)


# -- generated values ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,start,limit,delta", [
    (I64, 3, 9, 3), (I32, 10, 4, -2), (np.dtype(np.int16), 1, 1, 1), (F32, 0.0, 1.0, 0.1),
    (F64, -2.5, 7.0, 0.75), (F32, 5.0, 1.0, -0.5), (F32, 0.0, 1.0, -1.0),
])
def test_range(dtype: np.dtype, start: float, limit: float, delta: float) -> None:
    inits = {n: np.array(v, dtype) for n, v in (("s", start), ("l", limit), ("d", delta))}
    model = one_node_model("Range", {}, initializers=inits, opset=11)
    assert_same(run_glow(model, {}), run_ort(model, {}), 1e-6, 1e-6)


def test_range_of_half_floats_computes_in_float32() -> None:
    inits = {n: np.array(v, np.float16) for n, v in (("s", 1.0), ("l", 4.0), ("d", 0.3))}
    got = run_glow(one_node_model("Range", {}, initializers=inits, opset=27), {})[0]
    want = (np.float32(1.0) + np.arange(10, dtype=np.float32) * np.float32(np.float16(0.3))).astype(np.float16)
    assert_same([got], [want], 0.0, 0.0)


@pytest.mark.parametrize("k", [-2, 0, 1, 4])
def test_eye_like(k: int) -> None:
    x = rand((3, 5), F32)
    check("EyeLike", {"x": x}, opset=9, k=k)
    check("EyeLike", {"x": x}, opset=9, k=k, dtype=TensorProto.INT32)
    assert not imported("EyeLike", {"x": x}, opset=9, k=k).nodes  # depends on the shape only


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows(op: str, periodic: int) -> None:
    for size, out_type in [(np.array(10, np.int64), TensorProto.FLOAT), (np.array(7, np.int32), TensorProto.DOUBLE),
                           (np.array(1, np.int64), TensorProto.FLOAT)]:
        if size == 1 and not periodic:
            continue  # 0 / 0: NaN in every implementation
        model = one_node_model(op, {}, initializers={"n": size}, opset=17, periodic=periodic,
                               output_datatype=out_type)
        assert_same(run_glow(model, {}), run_ort(model, {}), 1e-6, 1e-6)


# -- type rules ------------------------------------------------------------------------------

def test_index_kinds_refuse_invalid_operands() -> None:
    fn = Function()
    x = fn.add_input("x", TensorType(ElemKind.FLOAT32, (3, 4)))
    fi = fn.add_input("fi", TensorType(ElemKind.FLOAT32, (2,)))
    i3 = fn.add_input("i3", TensorType(ElemKind.INT64, (2, 3)))
    with pytest.raises(GlowTypeError, match="indices"):
        fn.create("Gather", [x, fi], {"axis": 0})
    with pytest.raises(GlowTypeError, match="out of range"):
        fn.create("Gather", [x, i3], {"axis": 2})
    with pytest.raises(GlowTypeError, match="last dimension"):
        fn.create("GatherND", [x, i3], {"batch_dims": 0})
    with pytest.raises(GlowTypeError, match="updates"):
        fn.create("ScatterElements", [x, i3, x], {"axis": 0})
    with pytest.raises(GlowTypeError, match="reduction"):
        fn.create("ScatterND", [x, fn.add_input("i1", TensorType(ElemKind.INT64, (1, 1))),
                                fn.add_input("u", TensorType(ElemKind.FLOAT32, (1, 4)))], {"reduction": "sub"})
    b = fn.add_input("b", TensorType(ElemKind.BOOL, (3, 4)))
    with pytest.raises(GlowTypeError, match="element kind"):
        fn.create("ScatterElements", [b, fn.add_input("ib", TensorType(ElemKind.INT64, (3, 4))), b],
                  {"axis": 0, "reduction": "add"})


_ = (I8, U8)  # dtype names shared with test_movement
