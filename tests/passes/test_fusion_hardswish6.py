"""fuse-activations with hard swish in its ReLU6 form, ``Div(Mul(y, Clip(Add(y, 3), 0, 6)), 6)`` (what
paddle2onnx writes for PP-LCNet and MobileNetV3), fused into FusedConv / FusedMatMul {activation:
hardswish6}: bitwise the unfused graph on the interpreter and on the cpu backend, special values included."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.errors import GlowTypeError
from glow_core.ir.graph import Function, Value
from glow_core.pipeline import prepare_function
from glow_backend_interpreter.backend import InterpreterBackend
from tests.passes.passutil import FusingPrimitivesBackend, check, kinds
from tests.passes.test_fusion import CONV_ATTRS, FUSE, conv, matmul, scalar
from tests.passes.test_fusion_hardswish import assert_not_fused, same_bits, special_values


def hswish6(fn: Function, y: Value, *, clip_node: bool = True, const_first: bool = False,
            values: dict[str, float] | None = None) -> Value:
    """``Div(Mul(y, Clip(Add(y, 3), 0, 6)), 6)``; ``clip_node`` False: the Clip as ``Min(Max(., 0), 6)``."""
    v = {"Add": 3.0, "lo": 0.0, "hi": 6.0, "Div": 6.0, **(values or {})}
    k3 = scalar(fn, v["Add"], y)
    t = fn.create("Add", [k3, y] if const_first else [y, k3]).result
    if clip_node:
        t = fn.create("Clip", [t, scalar(fn, v["lo"], y), scalar(fn, v["hi"], y)]).result
    else:
        t = fn.create("Max", [t, scalar(fn, v["lo"], y)]).result
        t = fn.create("Min", [t, scalar(fn, v["hi"], y)]).result
    m = fn.create("Mul", [t, y] if const_first else [y, t]).result
    return fn.create("Div", [m, scalar(fn, v["Div"], y)]).result


@pytest.mark.parametrize("clip_node", [True, False])
@pytest.mark.parametrize("const_first", [False, True])
def test_relu6_hardswish_fused_after_conv(clip_node: bool, const_first: bool) -> None:
    fn, y = conv()
    fn.set_output("y", hswish6(fn, y, clip_node=clip_node, const_first=const_first))
    assert check(fn, *FUSE, backend=FusingPrimitivesBackend(), exact=True)
    assert kinds(fn) == {"FusedConv": 1}
    assert fn.nodes[0].attrs["activation"] == "hardswish6"


def test_relu6_hardswish_fused_after_matmul() -> None:
    fn, y = matmul()
    fn.set_output("y", hswish6(fn, y))
    assert check(fn, *FUSE, backend=InterpreterBackend(), exact=True)
    assert kinds(fn) == {"FusedMatMul": 1} and fn.nodes[0].attrs["activation"] == "hardswish6"


NOT_FUSED = ["add_3_inexact", "clip_to_5", "clip_from_negative_zero", "div_6_swapped", "div_by_3",
             "mul_by_other", "y_read_thrice", "step_is_output", "float64"]


@pytest.mark.parametrize("case", NOT_FUSED)
def test_other_chains_are_not_fused(case: str) -> None:
    fn, y = conv(np.float64 if case == "float64" else np.float32)
    values = {"add_3_inexact": {"Add": float(np.nextafter(np.float32(3), np.float32(4)))},
              "clip_to_5": {"hi": 5.0}, "clip_from_negative_zero": {"lo": -0.0}, "div_by_3": {"Div": 3.0}}.get(case)
    out = hswish6(fn, y, values=values)
    div = out.producer
    mul = div.inputs[0].producer
    assert_not_fused(fn, y, out, case, div, mul, mul)  # (div_6_swapped: 6 / (y * clip))


def test_not_fused_for_the_int8_conversion() -> None:
    fn, y = conv()
    fn.set_output("y", hswish6(fn, y))
    fn = prepare_function(fn, InterpreterBackend(), quantizable=True)
    assert "FusedConv" not in kinds(fn) and kinds(fn)["Div"] == 1


def test_needs_float32() -> None:
    fn, y = conv(np.float64)
    x, w, b = y.producer.inputs
    with pytest.raises(GlowTypeError, match="hardswish6"):
        fn.create("FusedConv", [x, w, b], {**CONV_ATTRS, "group": 1, "activation": "hardswish6"})


# -- end to end ---------------------------------------------------------------------------------------------

def _chain(src: str) -> list[onnx.NodeProto]:
    return [helper.make_node("Add", [src, "three"], ["h0"]), helper.make_node("Clip", ["h0", "zero", "six"], ["h1"]),
            helper.make_node("Mul", [src, "h1"], ["h2"]), helper.make_node("Div", ["h2", "six"], ["y"])]


def model(case: str) -> tuple[Any, tuple[int, ...]]:
    """A convolution whose result is exactly its input (or a product with the identity), then the chain."""
    consts = {"three": 3.0, "zero": 0.0, "six": 6.0}
    inits = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in consts.items()]
    if case == "matmul":
        shape, out = (2, 24, 8), (2, 24, 8)
        inits.append(numpy_helper.from_array(np.eye(8, dtype=np.float32), "w"))
        nodes = [helper.make_node("MatMul", ["x", "w"], ["c"])]
    else:
        c, shape, kern, group = (16, (1, 16, 9, 9), (1, 1), 1) if case == "conv-gemm" else (8, (1, 8, 9, 9), (3, 3), 8)
        w = np.zeros((c, c // group, *kern), np.float32)
        for o in range(c):
            w[o, o if group == 1 else 0, kern[0] // 2, kern[1] // 2] = 1.0
        inits += [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.zeros(c, np.float32), "b")]
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=group, pads=[k // 2 for k in kern] * 2)]
        out = shape
    graph = helper.make_graph(nodes + _chain("c"), "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), shape


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("case", ["conv-gemm", "conv-depthwise", "matmul"])
def test_fused_bitwise_the_unfused_graph(backend: str, case: str) -> None:
    onnx_model, shape = model(case)
    x = special_values(shape, first_column=case == "matmul")
    unfused = glow_core.compile(onnx_model, "interpreter-primitives", debug=True)
    assert unfused.function.count_by_kind()["Div"] == 1
    fused = glow_core.compile(onnx_model, backend, debug=True)
    kind = "FusedMatMul" if case == "matmul" else "FusedConv"
    assert fused.function.count_by_kind() == {kind: 1}
    assert fused.function.nodes_of(kind)[0].attrs["activation"] == "hardswish6"
    want = unfused.run({"x": x})["y"]
    assert np.isnan(want).any() and np.isinf(want).any() and (want == 0).any()
    same_bits(fused.run({"x": x})["y"], want)
