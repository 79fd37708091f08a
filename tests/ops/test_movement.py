"""Data-movement and shape ops against onnxruntime: constants and shapes, reshapes, Transpose,
Slice, Concat, Split, Pad, CenterCropPad, Tile, Expand, DepthToSpace, SpaceToDepth, Trilu, BitCast."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from glow_core.errors import DynamicValueError, GlowTypeError, UnsupportedError
from glow_core.importer import import_model
from glow_core.ir.graph import Function
from glow_core.ir.types import ElemKind, TensorType
from tests.ops.oputil import assert_same, one_node_model, run_glow, run_ort

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
I8, I32, I64, U8, BOOL = (np.dtype(t) for t in (np.int8, np.int32, np.int64, np.uint8, np.bool_))
DTYPES = [F32, F16, F64, I8, I32, I64, U8, BOOL]
INT_MAX, INT_MIN = 2**63 - 1, -(2**63)


def rand(shape: tuple[int, ...], dtype: np.dtype, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.uniform(-5, 5, shape).astype(dtype)
    if dtype == BOOL:
        return rng.integers(0, 2, shape).astype(bool)
    lo = 0 if dtype.kind == "u" else -50
    return rng.integers(lo, 100, shape).astype(dtype)


def check(op: str, feeds: dict[str, np.ndarray], *, n_outputs: int = 1, **kw: Any) -> list[np.ndarray]:
    """Run one node on glow and onnxruntime; data movement is exact, so compare exactly."""
    model = one_node_model(op, feeds, n_outputs, **kw)
    got = run_glow(model, feeds)
    assert_same(got, run_ort(model, feeds), 0.0, 0.0)
    return got


def i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


def imported(op: str, feeds: dict[str, np.ndarray], n_outputs: int = 1, **kw: Any) -> Function:
    """Import a one-node model; outputs the checker cannot type (invalid nodes) are declared as float."""
    model = one_node_model(op, feeds, n_outputs, **kw)
    for out in model.graph.output:
        if out.type.tensor_type.elem_type == TensorProto.UNDEFINED:
            out.type.tensor_type.elem_type = TensorProto.FLOAT
        out.type.tensor_type.shape.SetInParent()
    return import_model(model)


# -- constants and shapes -------------------------------------------------------------------

@pytest.mark.parametrize("attr,value", [
    ("value", onnx.numpy_helper.from_array(np.arange(6, dtype=np.float16).reshape(2, 3))),
    ("value_float", 2.5), ("value_floats", [1.0, 2.0]), ("value_int", 7), ("value_ints", [3, -4, 5]),
])
def test_constant_forms(attr: str, value: Any) -> None:
    node = helper.make_node("Constant", [], ["y"], **{attr: value})
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    model = onnx.shape_inference.infer_shapes(model)
    got = run_glow(model, {})
    assert_same(got, run_ort(model, {}), 0.0, 0.0)
    fn = import_model(model)
    assert not fn.nodes and fn.outputs[0][1] in fn.constants  # a graph constant, no node


@pytest.mark.parametrize("attr,value", [("value_string", "abc"), ("value_strings", ["a", "b"])])
def test_string_constants_are_unsupported(attr: str, value: Any) -> None:
    node = helper.make_node("Constant", [], ["y"], **{attr: value})
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.STRING, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    with pytest.raises(UnsupportedError, match=attr):
        import_model(model)


def test_sparse_constant_is_unsupported() -> None:
    sparse = helper.make_sparse_tensor(helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]),
                                       helper.make_tensor("i", TensorProto.INT64, [1], [0]), [3])
    node = helper.make_node("Constant", [], ["y"], sparse_value=sparse)
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    with pytest.raises(UnsupportedError, match="sparse"):
        import_model(model)


@pytest.mark.parametrize("start,end", [(None, None), (1, None), (-1, None), (None, -1), (1, 2), (-10, 10), (2, 1)])
def test_shape_becomes_a_constant(start: int | None, end: int | None) -> None:
    kw = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    x = rand((2, 3, 4), F32)
    check("Shape", {"x": x}, opset=19, **kw)
    assert not imported("Shape", {"x": x}, opset=19, **kw).nodes


def test_size() -> None:
    check("Size", {"x": rand((2, 3, 4), I8)}, opset=13)


@pytest.mark.parametrize("value", [None, np.array([7], np.int32), np.array([1.5], np.float16), np.array([True])])
@pytest.mark.parametrize("shape", [(2, 3), (0,), ()])
def test_constant_of_shape(value: np.ndarray | None, shape: tuple[int, ...]) -> None:
    kw: dict[str, Any] = {} if value is None else {"value": onnx.numpy_helper.from_array(value)}
    model = one_node_model("ConstantOfShape", {}, initializers={"s": np.array(shape, np.int64)}, opset=20, **kw)
    assert_same(run_glow(model, {}), run_ort(model, {}), 0.0, 0.0)


# -- reshapes -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reshape(dtype: np.dtype) -> None:
    x = rand((2, 3, 4), dtype)
    for shape in [(4, 6), (-1,), (0, 12), (0, -1, 2), (2, 0, 2, 2), (1, 24, 1), (24,)]:
        check("Reshape", {"x": x}, initializers={"s": i64(*shape)}, opset=13)


def test_reshape_allowzero() -> None:
    x = rand((0, 3), F32)
    check("Reshape", {"x": x}, initializers={"s": i64(3, 0)}, opset=14, allowzero=1)
    with pytest.raises(GlowTypeError, match="0 and -1"):
        imported("Reshape", {"x": x}, initializers={"s": i64(0, -1)}, opset=14, allowzero=1)


def test_reshape_to_the_same_shape_adds_no_node() -> None:
    fn = imported("Reshape", {"x": rand((2, 3), F32)}, initializers={"s": i64(0, -1)}, opset=13)
    assert fn.count_by_kind() == {}


def test_reshape_shape_from_an_input_must_be_bound() -> None:
    with pytest.raises(DynamicValueError, match="shape"):
        imported("Reshape", {"x": rand((2, 3), F32), "s": i64(3, 2)}, opset=13)


@pytest.mark.parametrize("opset", [9, 13])
def test_flatten(opset: int) -> None:
    x = rand((2, 3, 4, 5), F32)
    axes = range(5) if opset < 11 else range(-4, 5)
    for axis in axes:
        check("Flatten", {"x": x}, opset=opset, axis=axis)
    check("Flatten", {"x": x}, opset=opset)


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze(opset: int) -> None:
    x = rand((1, 3, 1, 4), I64)
    for axes in ([0], [-2], [0, 2], None):
        kw: dict[str, Any] = {}
        if axes is not None:
            kw = {"axes": axes} if opset < 13 else {"initializers": {"a": i64(*axes)}}
        check("Squeeze", {"x": x}, opset=opset, **kw)
    for axes in ([0], [-1], [0, 5], [4, 1, -1]):
        kw = {"axes": axes} if opset < 13 else {"initializers": {"a": i64(*axes)}}
        check("Unsqueeze", {"x": x}, opset=opset, **kw)
    fn = imported("Unsqueeze", {"x": x}, opset=13, initializers={"a": i64(0)})
    assert fn.count_by_kind() == {"Reshape": 1}


def test_squeeze_with_empty_axes_is_unsupported() -> None:
    with pytest.raises(UnsupportedError, match="empty axes"):
        imported("Squeeze", {"x": rand((1, 3), F32)}, opset=13, initializers={"a": np.zeros(0, np.int64)})


def test_squeeze_of_a_non_unit_axis_is_refused() -> None:
    with pytest.raises(GlowTypeError, match="not of size 1"):
        imported("Squeeze", {"x": rand((2, 3), F32)}, opset=13, initializers={"a": i64(1)})


@pytest.mark.parametrize("dtype", [F32, I64, BOOL], ids=str)
def test_transpose(dtype: np.dtype) -> None:
    x = rand((2, 3, 4), dtype)
    for perm in itertools.permutations(range(3)):
        check("Transpose", {"x": x}, opset=13, perm=list(perm))
    check("Transpose", {"x": x}, opset=13)


# -- slicing and joining -------------------------------------------------------------------

SLICES = [  # (starts, ends, axes, steps)
    ([0, 1], [2, 3], None, None),
    ([1], [-1], [1], None),
    ([-3], [INT_MAX], [-1], None),
    ([10], [20], [2], None),
    ([-100], [100], [0], [2]),
    ([INT_MAX], [INT_MIN], [1], [-1]),
    ([-1, 3], [INT_MIN, 0], [2, 1], [-2, -1]),
    ([3, 0], [0, 5], [1, 2], [-2, 3]),
    ([0], [0], [0], [1]),
    ([2], [-1], [0], [-1]),
    ([4], [-100], [2], [-3]),
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
def test_slice(starts: list[int], ends: list[int], axes: list[int] | None, steps: list[int] | None) -> None:
    x = rand((3, 4, 5), F32)
    inits = {"starts": i64(*starts), "ends": i64(*ends)}
    order = ["x", "starts", "ends", "", ""]
    if axes is not None:
        inits["axes"] = i64(*axes)
        order[3] = "axes"
    if steps is not None:
        inits["steps"] = i64(*steps)
        order[4] = "steps"
    check("Slice", {"x": x}, initializers=inits, input_order=order, opset=13)


def test_slice_attribute_form() -> None:
    x = rand((3, 4, 5), I32)
    check("Slice", {"x": x}, opset=9, starts=[1, -3], ends=[INT_MAX, -1], axes=[0, 2])
    check("Slice", {"x": x}, opset=9, starts=[0, 1, 2], ends=[2, 3, 4])


def test_slice_backwards_to_int_max_is_unsupported() -> None:
    # the spec clamps INT_MAX to the last element; onnxruntime reads it as "slice to the beginning"
    with pytest.raises(UnsupportedError, match="INT_MAX"):
        imported("Slice", {"x": rand((4,), F32)}, opset=13,
                 initializers={"s": i64(3), "e": i64(INT_MAX), "a": i64(0), "st": i64(-1)})


def test_slice_with_zero_step_is_refused() -> None:
    with pytest.raises(GlowTypeError, match="step 0"):
        imported("Slice", {"x": rand((3,), F32)}, opset=13,
                 initializers={"s": i64(0), "e": i64(2), "a": i64(0), "st": i64(0)})


@pytest.mark.parametrize("dtype", [F32, F16, I64, BOOL], ids=str)
def test_concat(dtype: np.dtype) -> None:
    a, b, c = rand((2, 3, 4), dtype, 1), rand((2, 1, 4), dtype, 2), rand((2, 0, 4), dtype, 3)
    for axis in (1, -2):
        check("Concat", {"a": a, "b": b, "c": c}, opset=13, axis=axis)
    check("Concat", {"a": a, "b": a}, opset=13, axis=-1)
    check("Concat", {"a": a}, opset=13, axis=0)


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_split(opset: int) -> None:
    x = rand((6, 4), F32)
    parts = {"num_outputs": 3} if opset >= 18 else {}
    check("Split", {"x": x}, n_outputs=3, opset=opset, **parts)
    check("Split", {"x": x}, n_outputs=2, opset=opset, axis=-1, **({"num_outputs": 2} if opset >= 18 else {}))
    sizes = [1, 0, 5]
    if opset < 13:
        check("Split", {"x": x}, n_outputs=3, opset=opset, split=sizes)
    else:
        check("Split", {"x": x}, n_outputs=3, opset=opset, initializers={"s": i64(*sizes)})


def test_split_num_outputs_with_an_uneven_last_chunk() -> None:
    x = rand((7, 2), I64)
    for n in (2, 3, 4):
        check("Split", {"x": x}, n_outputs=n, opset=18, num_outputs=n)


def test_split_into_unequal_parts_without_sizes_is_refused() -> None:
    with pytest.raises(GlowTypeError, match="equal parts"):
        imported("Split", {"x": rand((7,), F32)}, 2, opset=13)


# -- padding ---------------------------------------------------------------------------------

PADS = [[0, 2, 0, 0], [1, 1, 2, 2], [3, 0, 0, 1], [0, 0, 0, 0]]


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("dtype", [F32, I32, U8], ids=str)
def test_pad_modes(mode: str, dtype: np.dtype) -> None:
    x = rand((4, 5), dtype)
    for pads in PADS:
        check("Pad", {"x": x}, initializers={"p": i64(*pads)}, opset=19, mode=mode)
    if mode == "constant":
        check("Pad", {"x": x}, initializers={"p": i64(1, 0, 2, 3), "v": np.array(7, dtype)}, opset=19)


def test_pad_wrap_wider_than_the_axis() -> None:
    check("Pad", {"x": rand((2, 3), F32)}, initializers={"p": i64(3, 4, 5, 7)}, opset=19, mode="wrap")


def test_pad_negative_pads_crop() -> None:
    x = rand((4, 5), F32)
    check("Pad", {"x": x}, initializers={"p": i64(-1, 2, 1, -3), "v": np.array(1.5, np.float32)}, opset=13)
    with pytest.raises(UnsupportedError, match="negative pads"):
        imported("Pad", {"x": x}, initializers={"p": i64(-1, 0, 0, 0)}, opset=13, mode="edge")


def test_pad_axes_input() -> None:
    x = rand((2, 3, 4), F16)
    check("Pad", {"x": x}, initializers={"p": i64(1, 2, 3, 0), "v": np.array(2, np.float16), "a": i64(-1, 0)},
          opset=18)


def test_pad_attribute_form() -> None:
    x = rand((2, 3), F32)
    check("Pad", {"x": x}, opset=10, pads=[0, 1, 2, 0], value=3.5)
    check("Pad", {"x": x}, opset=10, pads=[1, 1, 1, 1], mode="reflect")


def test_pad_reflect_wider_than_the_axis_is_unsupported() -> None:
    with pytest.raises(UnsupportedError, match="reflect"):
        imported("Pad", {"x": rand((2, 3), F32)}, initializers={"p": i64(0, 3, 0, 0)}, opset=13, mode="reflect")


def test_pad_value_from_an_input_must_be_bound() -> None:
    model = one_node_model("Pad", {"x": rand((2, 3), F32), "v": np.array(1, np.float32)},
                           initializers={"p": i64(0, 1, 0, 1)}, input_order=["x", "p", "v"], opset=13)
    with pytest.raises(DynamicValueError):
        import_model(model)


@pytest.mark.parametrize("shape,axes", [([3, 7], None), ([5, 2], None), ([2], [-1]), ([6], [0])])
def test_center_crop_pad(shape: list[int], axes: list[int] | None) -> None:
    kw = {} if axes is None else {"axes": axes}
    check("CenterCropPad", {"x": rand((4, 5), F32)}, initializers={"s": i64(*shape)}, opset=18, **kw)


# -- repetition, blocks, triangles ----------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, I64, BOOL], ids=str)
def test_tile_and_expand(dtype: np.dtype) -> None:
    x = rand((2, 1, 3), dtype)
    for reps in [(1, 1, 1), (2, 3, 1), (1, 0, 2)]:
        check("Tile", {"x": x}, initializers={"r": i64(*reps)}, opset=13)
    for shape in [(2, 4, 3), (5, 1, 1, 1), (3,), (1, 1), (4, 2, 0, 3)]:
        check("Expand", {"x": x}, initializers={"s": i64(*shape)}, opset=13)


def test_expand_to_an_incompatible_shape_is_refused() -> None:
    with pytest.raises(GlowTypeError, match="broadcast"):
        imported("Expand", {"x": rand((2, 3), F32)}, initializers={"s": i64(4, 3)}, opset=13)


@pytest.mark.parametrize("dtype", [F32, U8], ids=str)
def test_depth_to_space_and_back(dtype: np.dtype) -> None:
    x = rand((2, 8, 3, 2), dtype)
    for mode in ("DCR", "CRD"):
        check("DepthToSpace", {"x": x}, opset=13, blocksize=2, mode=mode)
    legacy = run_glow(one_node_model("DepthToSpace", {"x": x}, opset=9, blocksize=2), {"x": x})
    assert_same(legacy, check("DepthToSpace", {"x": x}, opset=13, blocksize=2), 0.0, 0.0)  # DCR before opset 11
    check("SpaceToDepth", {"x": rand((1, 2, 6, 9), dtype)}, opset=13, blocksize=3)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("dtype", [F32, I64, BOOL], ids=str)
def test_trilu(upper: int, dtype: np.dtype) -> None:
    for shape in [(4, 5), (2, 3, 5, 3)]:
        x = rand(shape, dtype)
        check("Trilu", {"x": x}, opset=14, upper=upper)
        for k in (-7, -1, 0, 2, 6):
            check("Trilu", {"x": x}, initializers={"k": np.array(k, np.int64)}, opset=14, upper=upper)


@pytest.mark.parametrize("src,to", [(F32, TensorProto.INT32), (I64, TensorProto.DOUBLE), (U8, TensorProto.INT8),
                                    (F16, TensorProto.UINT16)])
def test_bitcast(src: np.dtype, to: int) -> None:
    check("BitCast", {"x": rand((3, 4), src)}, opset=26, to=to)


def test_bitcast_of_bool() -> None:  # onnxruntime has no bool BitCast: compare with numpy's view
    x = rand((3, 4), BOOL)
    got = run_glow(one_node_model("BitCast", {"x": x}, opset=26, to=TensorProto.UINT8), {"x": x})
    assert_same(got, [x.view(np.uint8)], 0.0, 0.0)


def test_bitcast_to_bool_is_unsupported() -> None:
    with pytest.raises(UnsupportedError, match="bool"):
        imported("BitCast", {"x": rand((3,), U8)}, opset=26, to=TensorProto.BOOL)


# -- the kinds' type rules -------------------------------------------------------------------

@pytest.mark.parametrize("kind,attrs,match", [
    ("Reshape", {"shape": (5, 5)}, "elements"),
    ("Transpose", {"perm": (0, 0, 1)}, "permutation"),
    ("Slice", {"starts": (0, 0, 4), "sizes": (1, 1, 2), "steps": (1, 1, 1)}, "outside"),
    ("Slice", {"starts": (0, 0, 0), "sizes": (1, 1, 1), "steps": (1, 0, 1)}, "step"),
    ("Pad", {"pads": (0, 0, -1, 0, 0, 0)}, ">= 0"),
    ("Pad", {"pads": (0, 0, 5, 0, 0, 0), "mode": "reflect"}, "smaller"),
    ("Tile", {"repeats": (1, 2)}, "entries"),
    ("Broadcast", {"shape": (2, 2, 4)}, "broadcast"),
    ("Split", {"axis": 1, "splits": (1, 1)}, "add up"),
    ("DepthToSpace", {"blocksize": 2}, "rank-4"),
])
def test_type_rules_refuse_invalid_attributes(kind: str, attrs: dict[str, Any], match: str) -> None:
    fn = Function()
    x = fn.add_input("x", TensorType(ElemKind.FLOAT32, (2, 3, 4)))
    with pytest.raises(GlowTypeError, match=match):
        fn.create(kind, [x], attrs)
