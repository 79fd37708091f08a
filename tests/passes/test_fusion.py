"""fuse-activations (and the fused kinds' kernels and lowerings), backend-transforms."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from glow_backend_interpreter.backend import InterpreterBackend, PrimitivesInterpreterBackend
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.ir.graph import Function, Value
from glow_core.ir.kinds import Category, get_kind
from glow_core.ir.types import ElemKind, TensorType
from glow_core.passinfra import FixedPoint
from tests.passes.passutil import Float32OnlyFusionBackend, FusingPrimitivesBackend, check, f, kinds

F32 = ElemKind.FLOAT32
FUSE = ("fuse-activations", "dce")
CONV_ATTRS = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1)}


def conv(dtype: Any = np.float32, bias: bool = True) -> tuple[Function, Value]:
    fn = Function()
    elem = ElemKind.from_dtype(dtype)
    x = fn.add_input("x", TensorType(elem, (1, 3, 6, 6)))
    w = fn.add_constant(f((4, 3, 3, 3), dtype), "w")
    b = fn.add_constant(f((4,), dtype, seed=2), "b") if bias else None
    return fn, fn.create("Conv", [x, w, b], CONV_ATTRS).result


def scalar(fn: Function, value: float, like: Value, shape: tuple[int, ...] = ()) -> Value:
    return fn.add_constant(np.full(shape, value, like.type.dtype), "k")


def matmul(elem: ElemKind = F32) -> tuple[Function, Value]:
    fn = Function()
    a = fn.add_input("a", TensorType(elem, (2, 3, 5)))
    b = fn.add_constant(f((5, 4), elem.dtype), "b")
    return fn, fn.create("MatMul", [a, b]).result


# -- conv --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bias", [True, False])
def test_conv_relu_fused_on_the_interpreter(bias: bool) -> None:
    fn, y = conv(bias=bias)
    fn.set_output("y", fn.create("Relu", [y]).result)
    assert check(fn, *FUSE, backend=InterpreterBackend(), exact=True)
    assert kinds(fn) == {"FusedConv": 1}
    assert fn.nodes[0].attrs["activation"] == "relu"


@pytest.mark.parametrize("act", ["Relu", None])
@pytest.mark.parametrize("residual_first", [False, True])
def test_conv_add_residual_fused(act: str | None, residual_first: bool) -> None:
    fn, y = conv()
    r = fn.add_input("r", y.type)
    a = fn.create("Add", [r, y] if residual_first else [y, r]).result
    fn.set_output("y", fn.create(act, [a]).result if act else a)
    assert check(fn, *FUSE, backend=InterpreterBackend(), exact=True)
    assert kinds(fn) == {"FusedConv": 1}
    node = fn.nodes[0]
    assert node.inputs[3] is r
    assert node.attrs["activation"] == ("relu" if act else "none")


@pytest.mark.parametrize("quantizable", [False, True])
def test_residual_fusion_off_for_the_int8_conversion(quantizable: bool) -> None:
    from glow_core.pipeline import prepare_function

    fn, y = conv()
    r = fn.add_input("r", y.type)
    fn.set_output("y", fn.create("Relu", [fn.create("Add", [y, r]).result]).result)
    fn = prepare_function(fn, InterpreterBackend(), quantizable=quantizable)
    want = {"Conv": 1, "Add": 1, "Relu": 1} if quantizable else {"FusedConv": 1}
    assert {k: v for k, v in kinds(fn).items() if k in ("FusedConv", "Conv", "Add", "Relu", "Max")} == want


@pytest.mark.parametrize("case", ["broadcast", "self"])
def test_conv_add_not_fused_as_residual(case: str) -> None:
    fn, y = conv()
    if case == "broadcast":  # a per-channel constant broadcasts: not the result's type
        other = fn.add_constant(f((4, 1, 1), np.float32, seed=3), "c")
    else:  # Add(y, y): the conv result is read twice
        other = y
    fn.set_output("y", fn.create("Relu", [fn.create("Add", [y, other]).result]).result)
    assert not check(fn, "fuse-activations", backend=InterpreterBackend(), exact=True)
    assert kinds(fn) == {"Conv": 1, "Add": 1, "Relu": 1}


def test_fused_conv_rejects_a_residual_of_another_type() -> None:
    fn, y = conv()
    x, w, b = fn.nodes[0].inputs
    r = fn.add_input("r", TensorType(F32, (1, 4, 6, 5)))
    with pytest.raises(glow_core.errors.GlowTypeError, match="Residual"):
        fn.create("FusedConv", [x, w, b, r], {**CONV_ATTRS, "activation": "relu"})


@pytest.mark.parametrize("lo,hi", [(0.0, 6.0), (None, 0.5), (-0.5, None), (1.0, -1.0)])
def test_conv_clip_fused(lo: float | None, hi: float | None) -> None:
    fn, y = conv()
    bounds = [scalar(fn, v, y) if v is not None else None for v in (lo, hi)]
    fn.set_output("y", fn.create("Clip", [y, *bounds]).result)
    assert check(fn, *FUSE, backend=InterpreterBackend(), exact=True)
    assert kinds(fn) == {"FusedConv": 1}
    attrs = fn.nodes[0].attrs
    assert attrs["activation"] == "clip"
    assert attrs["clip_min"] == (lo if lo is not None else -math.inf)
    assert attrs["clip_max"] == (hi if hi is not None else math.inf)


LOWERED = [
    # (ops applied in order, kinds left besides FusedConv)
    ([("Max", 0.0)], {}),
    ([("Max", -1.0), ("Min", 2.0)], {}),
    ([("Min", 2.0), ("Max", -1.0)], {}),         # lo <= hi: both orders agree
    ([("Min", -1.0), ("Max", 2.0)], {"Max": 1}),  # lo > hi: Max(Min(y, hi), lo) is lo, not clip's hi
    ([("Min", 3.0)], {}),
]


@pytest.mark.parametrize("ops,left", LOWERED)
@pytest.mark.parametrize("const_first", [False, True])
def test_lowered_activation_forms_fused(ops: list[tuple[str, float]], left: dict[str, int], const_first: bool) -> None:
    fn, y = conv()
    for kind, value in ops:
        c = scalar(fn, value, y, (1, 1, 1))
        y = fn.create(kind, [c, y] if const_first else [y, c]).result
    fn.set_output("y", y)
    assert check(fn, *FUSE, backend=FusingPrimitivesBackend(), exact=True)
    assert kinds(fn) == {"FusedConv": 1, **left}


@pytest.mark.parametrize("case", ["conv_read_twice", "conv_is_output", "non_constant_bound", "mixed_bound",
                                  "broadcasting_bound", "nan_bound", "not_an_activation"])
def test_conv_not_fused(case: str) -> None:
    fn, y = conv()
    if case == "conv_read_twice":
        fn.set_output("a", fn.create("Relu", [y]).result)
        fn.set_output("b", fn.create("Neg", [y]).result)
    elif case == "conv_is_output":
        fn.set_output("conv", y)
        fn.set_output("y", fn.create("Relu", [y]).result)
    elif case == "non_constant_bound":
        lo = fn.add_input("lo", TensorType(F32, ()))
        fn.set_output("y", fn.create("Max", [y, lo]).result)
    elif case == "mixed_bound":
        fn.set_output("y", fn.create("Max", [y, fn.add_constant(np.array([0, 1, 0, 0], np.float32).reshape(4, 1, 1),
                                                                  "k")]).result)
    elif case == "broadcasting_bound":
        fn.set_output("y", fn.create("Max", [y, scalar(fn, 0.0, y, (2, 1, 1, 1))]).result)
    elif case == "nan_bound":
        fn.set_output("y", fn.create("Max", [y, scalar(fn, math.nan, y)]).result)
    else:
        fn.set_output("y", fn.create("Sigmoid", [y]).result)
    before = kinds(fn)
    assert not check(fn, *FUSE, backend=FusingPrimitivesBackend(), exact=True)
    assert kinds(fn) == before


@pytest.mark.parametrize("backend", [None, PrimitivesInterpreterBackend(), Float32OnlyFusionBackend()])
def test_not_fused_without_backend_support(backend: Any) -> None:
    fn, y = conv(np.float64)
    fn.set_output("y", fn.create("Relu", [y]).result)
    assert not check(fn, *FUSE, backend=backend, exact=True)
    assert kinds(fn) == {"Conv": 1, "Relu": 1}


def test_float32_only_backend_fuses_float32() -> None:
    fn, y = conv(np.float32)
    fn.set_output("y", fn.create("Relu", [y]).result)
    assert check(fn, *FUSE, backend=Float32OnlyFusionBackend(), exact=True)
    assert kinds(fn) == {"FusedConv": 1}


# -- matmul ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("with_bias,act", [(True, "Relu"), (True, None), (False, "Relu"), (True, "Clip")])
def test_matmul_bias_activation_fused(with_bias: bool, act: str | None) -> None:
    fn, y = matmul()
    if with_bias:
        y = fn.create("Add", [fn.add_constant(f((4,), seed=4), "bias"), y]).result
    if act == "Relu":
        y = fn.create("Relu", [y]).result
    elif act == "Clip":
        y = fn.create("Clip", [y, scalar(fn, -0.25, y), scalar(fn, 0.75, y)]).result
    fn.set_output("y", y)
    assert check(fn, *FUSE, backend=InterpreterBackend(), exact=True)
    assert kinds(fn) == {"FusedMatMul": 1}
    node = fn.nodes[0]
    assert (node.inputs[2] is not None) == with_bias
    assert node.attrs["activation"] == {"Relu": "relu", None: "none", "Clip": "clip"}[act]


def test_int_matmul_clip_fused_exactly() -> None:
    fn, y = matmul(ElemKind.INT32)
    y = fn.create("Add", [y, fn.add_input("bias", TensorType(ElemKind.INT32, (3, 1)))]).result
    y = fn.create("Min", [fn.create("Max", [y, scalar(fn, -3, y)]).result, scalar(fn, 7, y)]).result
    fn.set_output("y", y)
    assert check(fn, *FUSE, backend=FusingPrimitivesBackend(), exact=True)
    assert kinds(fn) == {"FusedMatMul": 1}


def test_matmul_alone_not_fused() -> None:
    fn, y = matmul()
    fn.set_output("y", fn.create("Neg", [y]).result)
    assert not check(fn, *FUSE, backend=InterpreterBackend(), exact=True)


def test_matmul_add_that_broadcasts_not_fused() -> None:
    fn, y = matmul()
    fn.set_output("y", fn.create("Add", [y, fn.add_constant(f((5, 1, 1, 4)), "big")]).result)
    assert not check(fn, *FUSE, backend=InterpreterBackend(), exact=True)
    assert kinds(fn) == {"Add": 1, "MatMul": 1}


def test_matmul_add_read_twice_fuses_only_the_bias() -> None:
    fn, y = matmul()
    s = fn.create("Add", [y, fn.add_constant(f((4,)), "bias")]).result
    fn.set_output("s", s)
    fn.set_output("y", fn.create("Relu", [s]).result)
    assert check(fn, *FUSE, backend=InterpreterBackend(), exact=True)
    assert kinds(fn) == {"FusedMatMul": 1, "Relu": 1}
    assert fn.nodes_of("FusedMatMul")[0].attrs["activation"] == "none"


# -- the fused kinds: declared, lowered back ----------------------------------------------------------------

@pytest.mark.parametrize("kind", ["FusedConv", "FusedMatMul"])
def test_fused_kinds_are_not_primitives_and_lower_back(kind: str) -> None:
    assert Category.PRIMITIVE not in get_kind(kind).categories
    if kind == "FusedConv":
        fn, _ = conv()
        producer = fn.nodes[-1]
        inputs = list(producer.inputs)
        fn.erase_node(producer)
        attrs: dict[str, Any] = {**CONV_ATTRS, "activation": "clip", "clip_min": -0.5, "clip_max": 0.5}
    else:
        fn, _ = matmul()
        producer = fn.nodes[-1]
        inputs = [*producer.inputs, fn.add_constant(f((4,)), "bias")]
        fn.erase_node(producer)
        attrs = {"activation": "relu"}
    fn.set_output("y", fn.create(kind, inputs, attrs).result)
    assert check(fn, "lower", FixedPoint("fold-constants", "simplify-arith", "cse", "dce"),
                 backend=PrimitivesInterpreterBackend(), exact=True)
    assert all(Category.PRIMITIVE in n.kind.categories for n in fn.nodes), kinds(fn)


def test_fused_kind_type_rule_refuses_unknown_activation() -> None:
    fn, _ = matmul()
    a, b = fn.nodes[-1].inputs
    with pytest.raises(glow_core.errors.GlowTypeError, match="activation"):
        fn.create("FusedMatMul", [a, b], {"activation": "gelu"})


# -- end to end --------------------------------------------------------------------------------------------

def conv_act_model(act: str) -> Any:
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    lo = numpy_helper.from_array(np.array(-0.5, np.float32), "lo")
    hi = numpy_helper.from_array(np.array(1.5, np.float32), "hi")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1])]
    nodes.append(helper.make_node("Relu", ["c"], ["y"]) if act == "relu" else
                 helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])], [w, b, lo, hi])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("act", ["relu", "clip"])
def test_end_to_end_fusion_follows_the_backend(act: str) -> None:
    from glow_core.pipeline import prepare_function
    from glow_core.importer import import_model
    from tests.passes.passutil import run

    model = conv_act_model(act)
    x = np.random.default_rng(0).standard_normal((1, 3, 5, 5)).astype(np.float32)
    ref = glow_core.compile(model, "interpreter", debug=True)
    assert set(ref.function.count_by_kind()) == {"FusedConv"}
    prims = glow_core.compile(model, "interpreter-primitives", debug=True)
    assert "FusedConv" not in prims.function.count_by_kind()
    fn = prepare_function(import_model(model), FusingPrimitivesBackend(), debug=True)
    assert fn.count_by_kind() == {"FusedConv": 1}  # lowered Relu / Clip forms fused after lowering
    want = ref.run({"x": x})["y"]
    np.testing.assert_array_equal(prims.run({"x": x})["y"], want)
    np.testing.assert_array_equal(run(fn, {"x": x})["y"], want)


class _RecordingBackend(InterpreterBackend):
    name = "test-recording"

    def __init__(self) -> None:
        self.seen: list[int] = []

    def transform_post_lowering(self, function: Function) -> bool:
        self.seen.append(len(function.nodes))
        return True


def test_backend_transforms_calls_the_backend() -> None:
    fn, y = matmul()
    fn.set_output("y", y)
    be = _RecordingBackend()
    assert check(fn, "backend-transforms", backend=be, exact=True)
    assert be.seen == [1]
    assert not check(fn, "backend-transforms", backend=None, exact=True)
