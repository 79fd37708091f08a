"""fuse-activations with HardSwish: the node and its lowering fused into FusedConv / FusedMatMul
{activation: hardswish}, bitwise the unfused graph on the interpreter and on the cpu backend."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from glow_backend_interpreter.backend import InterpreterBackend
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.pipeline import prepare_function
from glow_core.errors import GlowTypeError
from glow_core.ir.graph import Function, Node, Value
from glow_core.ir.types import ElemKind, TensorType
from glow_core.quantization import QuantizationConfig
from glow_core.quantization.calibration import QuantParams
from glow_core.quantization.convert import convert
from tests.passes.passutil import FusingPrimitivesBackend, check, kinds
from tests.passes.test_fusion import CONV_ATTRS, FUSE, conv, matmul, scalar

F32 = ElemKind.FLOAT32
#: the lowering of HardSwish: (kind, constant, constant first)
CHAIN = (("Add", 3.0), ("Div", 6.0), ("Min", 1.0), ("Max", 0.0))


def lowered_hswish(fn: Function, y: Value, const_first: bool = False, shape: tuple[int, ...] = (),
                   values: dict[str, float] | None = None) -> Value:
    """``Mul(y, Max(Min(Div(Add(y, 3), 6), 1), 0))`` (the constants on the left where they commute)."""
    t = y
    for kind, value in CHAIN:
        c = scalar(fn, (values or {}).get(kind, value), y, shape)
        t = fn.create(kind, [c, t] if const_first and kind != "Div" else [t, c]).result
    return fn.create("Mul", [t, y] if const_first else [y, t]).result


def special_values(shape: tuple[int, ...], seed: int = 0, first_column: bool = False) -> np.ndarray:
    """Values in [-4, 4], with every float32 next to -3, 0 and 3, +-inf, NaN and huge values in
    random places (``first_column``: in x[..., 0] alone, the rest finite)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-4, 4, shape).astype(np.float32)
    f = np.float32
    near = [v for c in (-3.0, 3.0, 0.0) for v in (f(c), np.nextafter(f(c), f(-9)), np.nextafter(f(c), f(9)))]
    specials = np.array(near + [np.inf, -np.inf, np.nan, 3e38, -3e38, 1e-40, -1e-40], np.float32)
    if first_column:
        col = x[..., 0].reshape(-1)  # (a copy)
        col[:specials.size] = specials
        x[..., 0] = col.reshape(x.shape[:-1])
        return x
    flat = x.reshape(-1)
    idx = rng.choice(flat.size, size=min(flat.size, 4 * specials.size), replace=False)
    flat[idx] = np.resize(specials, idx.size)
    return x


def same_bits(a: np.ndarray, b: np.ndarray) -> None:
    """NaN where the other has NaN (of any sign: the convolutions' 0 * inf already differ in it), the
    same bits everywhere else (the sign of zero included)."""
    assert a.dtype == b.dtype == np.float32 and a.shape == b.shape
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
    keep = ~np.isnan(b)
    np.testing.assert_array_equal(a[keep].view(np.uint32), b[keep].view(np.uint32))


# -- the graph pass --------------------------------------------------------------------------------------

@pytest.mark.parametrize("const_first", [False, True])
@pytest.mark.parametrize("shape", [(), (1, 1, 1)])
def test_lowered_hardswish_fused_after_conv(const_first: bool, shape: tuple[int, ...]) -> None:
    fn, y = conv()
    fn.set_output("y", lowered_hswish(fn, y, const_first, shape))
    assert check(fn, *FUSE, backend=FusingPrimitivesBackend(), exact=True)
    assert kinds(fn) == {"FusedConv": 1}
    assert fn.nodes[0].attrs["activation"] == "hardswish"


@pytest.mark.parametrize("node_form", [True, False])
@pytest.mark.parametrize("with_bias", [True, False])
def test_hardswish_fused_after_matmul(node_form: bool, with_bias: bool) -> None:
    fn, y = matmul()
    if with_bias:
        y = fn.create("Add", [y, scalar(fn, 0.5, y, (4,))]).result
    fn.set_output("y", fn.create("HardSwish", [y]).result if node_form else lowered_hswish(fn, y))
    backend = InterpreterBackend() if node_form else FusingPrimitivesBackend()
    assert check(fn, *FUSE, backend=backend, exact=True)
    assert kinds(fn) == {"FusedMatMul": 1}
    node = fn.nodes[0]
    assert node.attrs["activation"] == "hardswish" and (node.inputs[2] is not None) == with_bias


def test_hardswish_node_fused_on_the_interpreter() -> None:
    fn, y = conv()
    fn.set_output("y", fn.create("HardSwish", [y]).result)
    assert check(fn, *FUSE, backend=InterpreterBackend(), exact=True)
    assert kinds(fn) == {"FusedConv": 1}


NOT_FUSED = ["add_3_inexact", "div_6_swapped", "min_1_other", "max_negative_zero", "mul_by_other",
             "y_read_thrice", "step_is_output", "y_is_output", "float64"]


@pytest.mark.parametrize("case", NOT_FUSED)
def test_hardswish_chain_not_fused(case: str) -> None:
    fn, y = conv(np.float64 if case == "float64" else np.float32)
    values = {"add_3_inexact": {"Add": float(np.nextafter(np.float32(3), np.float32(4)))},
              "min_1_other": {"Min": 2.0}, "max_negative_zero": {"Max": -0.0}}.get(case)
    out = lowered_hswish(fn, y, values=values)
    div = [n for n in fn.nodes if n.kind.name == "Div"][0]
    assert_not_fused(fn, y, out, case, div, out.producer, div)  # (div_6_swapped: 6 / (y + 3))


def assert_not_fused(fn: Function, y: Value, out: Value, case: str, div: Node, mul: Node, step: Node) -> None:
    """Apply ``case``'s change to a hard swish chain ``out`` of ``y`` (its Div and Mul given; ``step``: the
    node whose result becomes an output in step_is_output) and check that the pass fuses nothing."""
    if case == "div_6_swapped":
        a, b = div.inputs
        div.set_input(0, b)
        div.set_input(1, a)
    elif case == "mul_by_other":
        mul.set_input(0, fn.add_input("z", y.type))
    elif case == "y_read_thrice":
        fn.set_output("n", fn.create("Neg", [y]).result)
    elif case == "step_is_output":
        fn.set_output("s", step.result)
    elif case == "y_is_output":
        fn.set_output("c", y)
    fn.set_output("y", out)
    before = kinds(fn)
    assert not check(fn, *FUSE, backend=FusingPrimitivesBackend(), exact=True)
    assert kinds(fn) == before


@pytest.mark.parametrize("quantizable", [False, True])
def test_hardswish_not_fused_for_the_int8_conversion(quantizable: bool) -> None:
    fn, y = conv()
    fn.set_output("y", fn.create("HardSwish", [y]).result)
    fn = prepare_function(fn, InterpreterBackend(), quantizable=quantizable)
    assert kinds(fn) == ({"Conv": 1, "HardSwish": 1} if quantizable else {"FusedConv": 1})


def test_int8_conversion_keeps_a_fused_hardswish_float() -> None:
    fn, y = conv()
    node = y.producer
    x, w, b = node.inputs
    fn.erase_node(node)
    params = QuantParams(0.05, 0, "int8", (-6.4, 6.35))
    outs = {}
    for act in ("relu", "hardswish"):
        outs[act] = fn.create("FusedConv", [x, w, b], {**CONV_ATTRS, "group": 1, "activation": act}).result
        fn.set_output(act, outs[act])
    names = {act: v.producer.name for act, v in outs.items()}
    done = convert(fn, {v.name: params for v in (x, *outs.values())}, QuantizationConfig())
    assert done.quantized == {"FusedConv": [names["relu"]]}
    assert names["hardswish"] in done.kept_float
    assert kinds(fn)["FusedConv"] == 1 and fn.nodes_of("FusedConv")[0].attrs["activation"] == "hardswish"


def test_fused_hardswish_needs_float32() -> None:
    fn, y = conv(np.float64)
    x, w, b = y.producer.inputs
    with pytest.raises(GlowTypeError, match="hardswish"):
        fn.create("FusedConv", [x, w, b], {**CONV_ATTRS, "group": 1, "activation": "hardswish"})


# -- end to end: interpreter and cpu, bitwise the unfused lowering --------------------------------------------

def _model(nodes: list[onnx.NodeProto], inits: list[np.ndarray], x: tuple[int, ...], y: tuple[int, ...]) -> Any:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y))],
                              [numpy_helper.from_array(a, f"k{i}") for i, a in enumerate(inits)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def conv_model(case: str) -> tuple[Any, tuple[int, ...]]:
    """Convolutions whose result is exactly their input (one weight 1, the rest 0, bias 0), so the
    special values reach the activation whatever the summation order of the path."""
    if case in ("gemm", "residual"):  # 1x1, 16 -> 16 channels: the GEMM path
        c, shape, kern, group = 16, (1, 16, 9, 9), (1, 1), 1
        w = np.eye(c, dtype=np.float32).reshape(c, c, 1, 1)
    elif case == "depthwise":  # 3x3 depthwise: the direct path
        c, shape, kern, group = 8, (1, 8, 9, 9), (3, 3), 8
        w = np.zeros((c, 1, 3, 3), np.float32)
        w[:, 0, 1, 1] = 1.0
    else:  # 3-D: the scalar path
        c, shape, kern, group = 4, (1, 4, 3, 4, 5), (1, 1, 1), 1
        w = np.eye(c, dtype=np.float32).reshape(c, c, 1, 1, 1)
    pads = [k // 2 for k in kern] * 2
    nodes = [helper.make_node("Conv", ["x", "k0", "k1"], ["c"], group=group, pads=pads)]
    if case == "residual":  # conv(x) + x = 2x exactly
        nodes.append(helper.make_node("Add", ["c", "x"], ["c2"]))
    nodes.append(helper.make_node("HardSwish", [nodes[-1].output[0]], ["y"]))
    return _model(nodes, [w, np.zeros(c, np.float32)], shape, shape), shape


def matmul_model(n: int) -> tuple[Any, tuple[int, ...]]:
    """x [2, 24, 8] @ the first n columns of the identity + 0, HardSwish."""
    nodes = [helper.make_node("MatMul", ["x", "k0"], ["m"]), helper.make_node("Add", ["m", "k1"], ["a"]),
             helper.make_node("HardSwish", ["a"], ["y"])]
    return _model(nodes, [np.eye(8, n, dtype=np.float32), np.zeros(n, np.float32)], (2, 24, 8), (2, 24, n)), (2, 24, 8)


MODELS = {"conv-gemm": lambda: conv_model("gemm"), "conv-depthwise": lambda: conv_model("depthwise"),
          "conv-3d-scalar": lambda: conv_model("3d"), "conv-residual": lambda: conv_model("residual"), "matmul": lambda: matmul_model(8),
          "matvec": lambda: matmul_model(1)}


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("case", sorted(MODELS))
def test_fused_hardswish_bitwise_the_unfused_graph(backend: str, case: str) -> None:
    model, shape = MODELS[case]()
    x = special_values(shape, first_column=case.startswith("mat"))
    unfused = glow_core.compile(model, "interpreter-primitives", debug=True)
    assert unfused.function.count_by_kind()["Div"] == 1  # the lowering of HardSwish, not fused
    fused = glow_core.compile(model, backend, debug=True)
    kind = "FusedMatMul" if case.startswith("mat") else "FusedConv"
    assert fused.function.count_by_kind() == {kind: 1}
    node = fused.function.nodes_of(kind)[0]
    assert node.attrs["activation"] == "hardswish"
    assert (len(node.inputs) > 3 and node.inputs[3] is not None) == (case == "conv-residual")
    want = unfused.run({"x": x})["y"]
    assert np.isnan(want).any() and np.isinf(want).any() and (want == 0).any()
    same_bits(fused.run({"x": x})["y"], want)


class _NoHardswishBackend(FusingPrimitivesBackend):
    """A vendor's backend written before hardswish: it declares the fused kinds, not the new activation."""

    name = "test-no-hardswish"
    fused_activations = frozenset({"none", "relu", "clip"})


def test_a_backend_that_does_not_declare_hardswish_never_gets_it() -> None:
    be = _NoHardswishBackend()
    fn, y = conv()
    fn.set_output("y", lowered_hswish(fn, y))
    assert not check(fn, *FUSE, backend=be, exact=True)  # same results, nothing fused into the conv
    assert "FusedConv" not in kinds(fn) and kinds(fn)["Mul"] == 1
    fused = next(n for n in _fused_hswish_conv().nodes if n.kind.name == "FusedConv")
    assert not be.supports(fused)  # (the conformance suite lowers such a case for it)
    assert FusingPrimitivesBackend().supports(fused)


def _fused_hswish_conv() -> Function:
    fn, y = conv()
    fn.set_output("y", lowered_hswish(fn, y))
    check(fn, *FUSE, backend=FusingPrimitivesBackend(), exact=True)
    return fn
