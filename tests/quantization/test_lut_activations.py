"""Activations inside an int8 island become 256-entry lookups at conversion (``quantization/tables.py``).

SiLU (``x * Sigmoid(x)``, either operand order), HardSwish (the kind, and ``x * Clip(x + 3, 0, 6) / 6`` as
PaddleOCR's MobileNetV3 writes it), HardSigmoid, Sigmoid, Tanh and GELU (the ``Gelu`` kind, its erf form
and its tanh form) between two convolutions: the island runs through them on the integers (one
Quantize at the input, one Dequantize at the output), each table is ``quantize(f(dequantize(q)))``, the
answer stays within the quantization error of the float model, and the cpu backend (its QLookup kernel)
gives the interpreter's bytes.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.ir.graph import Constant

H = helper.make_node
_SQRT2 = numpy_helper.from_array(np.array(math.sqrt(2.0), np.float32), "sqrt2")
_ONE = numpy_helper.from_array(np.array(1.0, np.float32), "one")
_HALF = numpy_helper.from_array(np.array(0.5, np.float32), "half")
_K = numpy_helper.from_array(np.array(0.044715, np.float32), "k")
_C = numpy_helper.from_array(np.array(math.sqrt(2.0 / math.pi), np.float32), "c")
_THREE = numpy_helper.from_array(np.array(3.0, np.float32), "three")
_ZERO = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
_SIX = numpy_helper.from_array(np.array(6.0, np.float32), "six")

#: name -> (nodes from c1 to a, extra initializers, the activation in numpy float64)
ACTIVATIONS: dict[str, tuple[list[onnx.NodeProto], list[onnx.TensorProto], Any]] = {
    "silu": ([H("Sigmoid", ["c1"], ["s"]), H("Mul", ["c1", "s"], ["a"])], [], lambda x: x / (1 + np.exp(-x))),
    "silu-swapped": ([H("Sigmoid", ["c1"], ["s"]), H("Mul", ["s", "c1"], ["a"])], [],
                     lambda x: x / (1 + np.exp(-x))),
    "hardswish": ([H("HardSwish", ["c1"], ["a"])], [], lambda x: x * np.clip(x / 6 + 0.5, 0, 1)),
    "hardswish-clip": ([H("Add", ["c1", "three"], ["p3"]), H("Clip", ["p3", "zero", "six"], ["r6"]),
                        H("Mul", ["c1", "r6"], ["m"]), H("Div", ["m", "six"], ["a"])], [_THREE, _ZERO, _SIX],
                       lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "hardsigmoid": ([H("HardSigmoid", ["c1"], ["a"], alpha=0.2, beta=0.5)], [],
                    lambda x: np.clip(0.2 * x + 0.5, 0, 1)),
    "sigmoid": ([H("Sigmoid", ["c1"], ["a"])], [], lambda x: 1 / (1 + np.exp(-x))),
    "tanh": ([H("Tanh", ["c1"], ["a"])], [], np.tanh),
    "gelu": ([H("Gelu", ["c1"], ["a"])], [], None),
    "gelu-erf": ([H("Div", ["c1", "sqrt2"], ["d"]), H("Erf", ["d"], ["e"]), H("Add", ["e", "one"], ["p"]),
                  H("Mul", ["c1", "p"], ["m"]), H("Mul", ["m", "half"], ["a"])], [_SQRT2, _ONE, _HALF], None),
    "gelu-tanh": ([H("Mul", ["c1", "c1"], ["x2"]), H("Mul", ["x2", "c1"], ["x3"]), H("Mul", ["x3", "k"], ["kx3"]),
                   H("Add", ["c1", "kx3"], ["u"]), H("Mul", ["u", "c"], ["cu"]), H("Tanh", ["cu"], ["t"]),
                   H("Add", ["t", "one"], ["p"]), H("Mul", ["c1", "p"], ["m"]), H("Mul", ["m", "half"], ["a"])],
                  [_K, _C, _ONE, _HALF], None),
}
FLOAT_ACTIVATIONS = {"Sigmoid", "HardSwish", "HardSigmoid", "Tanh", "Gelu", "Erf", "Div", "Mul", "Add", "Clip"}


def _model(name: str) -> onnx.ModelProto:
    act, inits, _ = ACTIVATIONS[name]
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.5, "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 8, 3, 3)).astype(np.float32) * 0.3, "w2")
    nodes = ([H("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1])] + act
             + [H("Conv", ["a", "w2"], ["y"], pads=[1, 1, 1, 1])])
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 12, 12])],
                          [w1, w2, *inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])


def _inputs(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 1, 3, 12, 12)).astype(np.float32)


@pytest.mark.filterwarnings("ignore::glow_core.errors.GlowWarning")
def test_an_activation_only_float_kinds_read_stays_float() -> None:
    """A Sigmoid read by Softmax alone (or a graph output): a table would only add a rounding."""
    m = _model("sigmoid")
    m.graph.node[-1].CopyFrom(H("Softmax", ["a"], ["y"], axis=1))
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 12, 12]))
    net = _int8(m, "interpreter", glow_core.profile(m, {"x": _inputs(4, 1)}, "interpreter"))
    kinds = {n.kind.name for n in net.function.nodes}
    assert "Sigmoid" in kinds and "QLookup" not in kinds, kinds


def _int8(m: onnx.ModelProto, backend: str, prof: object) -> Any:
    return glow_core.compile(m, backend, quantize=prof, options={"cache": False})


@pytest.fixture(scope="module", params=sorted(ACTIVATIONS))
def case(request: pytest.FixtureRequest) -> tuple[str, onnx.ModelProto, object]:
    m = _model(request.param)
    return request.param, m, glow_core.profile(m, {"x": _inputs(8, 1)}, "interpreter")


@pytest.mark.filterwarnings("ignore::glow_core.errors.GlowWarning")
def test_the_island_runs_through_the_activation_as_a_table(case: tuple[str, onnx.ModelProto, object]) -> None:
    name, m, prof = case
    net = _int8(m, "interpreter", prof)
    kinds = Counter(n.kind.name for n in net.function.nodes)
    assert kinds["QLookup"] == 1 and kinds["QConv"] == 2, kinds
    assert kinds["Quantize"] == 1 and kinds["Dequantize"] == 1, kinds  # one island, unbroken
    assert not set(kinds) & FLOAT_ACTIVATIONS, kinds
    assert not net.stats.quantized.kept_float, net.stats.quantized.kept_float


@pytest.mark.filterwarnings("ignore::glow_core.errors.GlowWarning")
@pytest.mark.parametrize("name", ["silu", "hardswish", "hardswish-clip", "hardsigmoid", "sigmoid", "tanh"])
def test_table_entries_are_quantize_of_f_of_dequantize(name: str) -> None:
    """Each entry against the activation computed independently in float64: at most one step apart (a float32
    rounding that lands on the other side of a half step), and nearly all equal."""
    m = _model(name)
    net = _int8(m, "interpreter", glow_core.profile(m, {"x": _inputs(8, 1)}, "interpreter"))
    look = next(n for n in net.function.nodes if n.kind.name == "QLookup")
    tin, tout = look.inputs[0].type, look.outputs[0].type
    table = look.inputs[1]
    assert isinstance(table, Constant)
    codes = np.arange(-128, 128) if tin.elem.value == "int8q" else np.arange(256)
    real = ACTIVATIONS[name][2](tin.scale * (codes - tin.offset).astype(np.float64))
    lo, hi = (-128, 127) if tout.elem.value == "int8q" else (0, 255)
    want = np.clip(np.rint(real / tout.scale) + tout.offset, lo, hi)
    diff = np.abs(np.asarray(table.payload, np.int64) - want)
    assert diff.max() <= 1 and (diff == 0).sum() >= 250, diff


@pytest.mark.filterwarnings("ignore::glow_core.errors.GlowWarning")
def test_int8_answer_is_within_the_quantization_error(case: tuple[str, onnx.ModelProto, object]) -> None:
    name, m, prof = case
    flt = glow_core.compile(m, "interpreter")
    net = _int8(m, "interpreter", prof)
    x = _inputs(4, 7)  # held out: not the calibration inputs (a value past its calibrated range saturates)
    for i in range(len(x)):
        ref = flt.run({"x": x[i]})["y"]
        got = net.run({"x": x[i]})["y"]
        err = np.abs(got - ref).mean()
        cos = float((got * ref).sum() / (np.linalg.norm(got) * np.linalg.norm(ref)))
        assert cos > 0.998 and err < 0.01 * np.abs(ref).max(), (name, cos, err)


@pytest.mark.filterwarnings("ignore::glow_core.errors.GlowWarning")
def test_cpu_gives_the_interpreters_bytes(case: tuple[str, onnx.ModelProto, object]) -> None:
    name, m, prof = case
    cpu, interp = _int8(m, "cpu", prof), _int8(m, "interpreter", prof)
    assert any(n.kind.name == "QLookup" for n in cpu.function.nodes)  # the cpu kernel on plain codes
    assert not {n.kind.name for n in cpu.function.nodes} & {"Sigmoid", "Tanh", "HardSwish", "Gelu", "Erf"}
    x = _inputs(3, 11)
    for i in range(len(x)):
        np.testing.assert_array_equal(cpu.run({"x": x[i]})["y"], interp.run({"x": x[i]})["y"], err_msg=name)


def _yolo_block() -> onnx.ModelProto:
    """A C2f-like block: Conv+SiLU, Split, Conv+SiLU, residual Add, Concat, Conv+SiLU, Conv: every
    activation's result is read by integer kinds (Split, Add, Concat, Conv)."""
    rng = np.random.default_rng(5)

    def w(name: str, m: int, c: int, k: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal((m, c, k, k)).astype(np.float32) * 0.4, name)

    def conv_silu(x: str, wn: str, y: str, k: int) -> list[onnx.NodeProto]:
        return [H("Conv", [x, wn], [y + "c"], pads=[k // 2] * 4), H("Sigmoid", [y + "c"], [y + "s"]),
                H("Mul", [y + "c", y + "s"], [y])]

    split = numpy_helper.from_array(np.array([4, 4], np.int64), "split")
    nodes = (conv_silu("x", "w0", "a", 3) + [H("Split", ["a", "split"], ["a1", "a2"], axis=1)]
             + conv_silu("a2", "w1", "b", 3) + [H("Add", ["a2", "b"], ["r"]),
                                                H("Concat", ["a1", "a2", "r"], ["cat"], axis=1)]
             + conv_silu("cat", "w2", "z", 1) + [H("Conv", ["z", "w3"], ["y"])])
    g = helper.make_graph(nodes, "c2f", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 16, 16])],
                          [w("w0", 8, 3, 3), w("w1", 4, 4, 3), w("w2", 6, 12, 1), w("w3", 5, 6, 1), split])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.filterwarnings("ignore::glow_core.errors.GlowWarning")
@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_a_c2f_block_is_one_island(backend: str) -> None:
    m = _yolo_block()
    x = np.random.default_rng(2).standard_normal((8, 1, 3, 16, 16)).astype(np.float32)
    net = _int8(m, backend, glow_core.profile(m, {"x": x}, backend))  # (cpu runs the Split as Slices)
    kinds = Counter(n.kind.name for n in net.function.nodes)
    assert kinds["QLookup"] >= 3 and not set(kinds) & {"Sigmoid", "Dequantize", "Quantize"} - (
        {"Dequantize", "Quantize"} if backend == "interpreter" else set()), kinds
    if backend == "interpreter":
        assert kinds["Quantize"] == 1 and kinds["Dequantize"] == 1, kinds
    flt = glow_core.compile(m, backend)
    ref, got = flt.run({"x": x[0]})["y"], net.run({"x": x[0]})["y"]
    assert float((got * ref).sum() / (np.linalg.norm(got) * np.linalg.norm(ref))) > 0.995
