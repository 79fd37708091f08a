"""``lut-islands``: element-wise float activations inside an int8 island become one 256-entry QLookup."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.ir.types import ElemKind, TensorType
from glow_core.quantization import lut, tables
from glow_core.reference import run_kernel

BACKENDS = ["interpreter", "cpu"]
ACTIVATIONS = {
    "silu": [helper.make_node("Sigmoid", ["c1"], ["s"]), helper.make_node("Mul", ["c1", "s"], ["a"])],
    "hardswish": [helper.make_node("HardSwish", ["c1"], ["a"])],
    "tanh": [helper.make_node("Tanh", ["c1"], ["a"])],
    "gelu": [helper.make_node("Gelu", ["c1"], ["a"])],
}


def _conv_act_conv(act: list[onnx.NodeProto]) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3, "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 8, 3, 3)).astype(np.float32) * 0.3, "w2")
    nodes = ([helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1])] + act
             + [helper.make_node("Conv", ["a", "w2"], ["y"], pads=[1, 1, 1, 1])])
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 12, 12])], [w1, w2])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])


def _compile(m: onnx.ModelProto, backend: str, prof: object) -> Any:
    return glow_core.compile(m, backend, quantize=prof, debug=True, options={"cache": False})


@pytest.mark.filterwarnings("ignore::glow_core.errors.GlowWarning")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
def test_activation_becomes_a_table_with_the_float_islands_answer(backend: str, act: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    m = _conv_act_conv(ACTIVATIONS[act])
    x = np.random.default_rng(1).standard_normal((6, 3, 12, 12)).astype(np.float32)
    prof = glow_core.profile(m, {"x": x}, "interpreter")
    monkeypatch.setattr(tables, "MAX_CHAIN", 0)  # no table at conversion (test_lut_activations.py): the pass's
    net = _compile(m, backend, prof)
    kinds = {n.kind.name for n in net.function.nodes}
    assert "Gather" in kinds or "QLookup" in kinds
    assert not kinds & {"Sigmoid", "HardSwish", "Tanh", "Gelu", "Erf"}
    got = net.run({"x": x[:1]})["y"]
    monkeypatch.setattr(lut, "MAX_ISLAND", 0)  # no island qualifies: the float nodes stay
    float_island = _compile(m, backend, prof)
    assert len(float_island.function.nodes) > len(net.function.nodes)
    np.testing.assert_array_equal(got, float_island.run({"x": x[:1]})["y"])  # the same codes, bit for bit


@pytest.mark.filterwarnings("ignore::glow_core.errors.GlowWarning")
def test_island_reading_two_quantized_values_is_not_one_table() -> None:
    """Mul(Sigmoid(c1), c2) depends on two codes: no table of 256 entries computes it; the Sigmoid alone
    becomes a table and the product a QMul of the two codes."""
    act = [helper.make_node("Conv", ["x", "w3"], ["c2"], pads=[1, 1, 1, 1], name="second"),
           helper.make_node("Sigmoid", ["c1"], ["s"]), helper.make_node("Mul", ["c2", "s"], ["a"])]
    m = _conv_act_conv(act)
    w3 = np.random.default_rng(3).standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    m.graph.initializer.append(numpy_helper.from_array(w3, "w3"))
    x = np.random.default_rng(2).standard_normal((4, 3, 12, 12)).astype(np.float32)
    net = _compile(m, "interpreter", glow_core.profile(m, {"x": x}, "interpreter"))
    kinds = [n.kind.name for n in net.function.nodes]
    assert "Sigmoid" not in kinds and kinds.count("QLookup") == 1 and "QMul" in kinds


@pytest.mark.parametrize("elem, lo", [(ElemKind.INT8Q, -128), (ElemKind.UINT8Q, 0)])
def test_qlookup_kernel_indexes_by_code(elem: ElemKind, lo: int) -> None:
    table = (np.arange(256)[::-1] - 128).astype(np.int8 if elem is ElemKind.INT8Q else np.int16).astype(
        elem.dtype)
    codes = np.array([lo, lo + 1, lo + 255, lo + 7], elem.dtype)
    out = TensorType(elem, (4,), 0.5, 3)
    got = run_kernel("QLookup", {}, [codes, table], [out], "test")[0]
    assert got.tolist() == [int(table[0]), int(table[1]), int(table[255]), int(table[7])]
