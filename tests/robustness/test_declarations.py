"""What a model declares about shapes, checked against what its ops compute and what the caller gives."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

import glow_core
from glow_core import onnx_backend
from glow_core.errors import GlowWarning, ImportShapeError, ModelError
from tests.robustness.util import F, model

pytestmark = pytest.mark.robustness


@pytest.mark.parametrize("declared", [[2, 5], [3], [7, 7, 7]])
def test_wrong_declared_output_shape_warns_and_uses_the_computed_shape(declared: list[int]) -> None:
    """onnxruntime runs such models; the op's result is defined by its inputs, not by the declaration."""
    m = model([helper.make_node("Transpose", ["x"], ["y"])], [("x", F, [2, 3])], [("y", F, declared)])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with pytest.warns(GlowWarning, match=r"graph output 'y': the model declares shape .*, the node producing it "
                                          r"computes \[3, 2\]"):
        net = glow_core.compile(m)
    np.testing.assert_array_equal(net.run({"x": x})["y"], x.T)


def test_wrong_declared_output_shape_of_an_inner_chain_is_not_called_a_glow_bug() -> None:
    m = model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Unsqueeze", ["r", "axes"], ["y"])],
              [("x", F, [4]), ("axes", TensorProto.INT64, [1])], [("y", F, [4, 1, 9])])
    m.graph.input.pop()
    m.graph.initializer.append(helper.make_tensor("axes", TensorProto.INT64, [1], [0]))
    with pytest.warns(GlowWarning, match=r"declares shape \[4, 1, 9\].*computes \[1, 4\]"):
        net = glow_core.compile(m)
    assert net.run({"x": np.ones(4, np.float32)})["y"].shape == (1, 4)


def test_wrong_declared_output_element_type_is_a_model_error() -> None:
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2])], [("y", TensorProto.INT64, [2])])
    with pytest.raises(ModelError, match="declares element type INT64, the node producing it computes float32"):
        glow_core.compile(m)


def test_a_correct_declaration_gives_no_warning() -> None:
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2, 3])], [("y", F, [2, "n"])])
    with warnings.catch_warnings():
        warnings.simplefilter("error", GlowWarning)
        glow_core.compile(m)


def test_negative_dims_are_dynamic_on_inputs_outputs_and_value_info() -> None:
    """paddle2onnx writes dim_value -1 for a dynamic dimension."""
    m = model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])],
              [("x", F, [-1, 10])], [("y", F, [-1, 10])])
    m.graph.value_info.append(helper.make_tensor_value_info("r", F, [-1, 10]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", GlowWarning)
        net = glow_core.compile(m, input_shapes={"x": (1, 10)})
    x = np.linspace(-1, 1, 10, dtype=np.float32).reshape(1, 10)
    np.testing.assert_array_equal(net.run({"x": x})["y"], -np.maximum(x, 0))
    with pytest.raises(ImportShapeError, match=r"x \['\?', 10\]"):
        glow_core.compile(m)


def _two_inputs_sharing_n():  # type: ignore[no-untyped-def]
    return model([helper.make_node("Add", ["x", "y"], ["z"])], [("x", F, ["N", 10]), ("y", F, ["N", 10])],
                 [("z", F, ["N", 10])])


def test_symbolic_dims_must_agree_across_inputs() -> None:
    with pytest.raises(ImportShapeError, match=r"symbolic dimension 'N' is 3 in input 'x' but 1 in input 'y'"):
        glow_core.compile(_two_inputs_sharing_n(), input_shapes={"x": (3, 10), "y": (1, 10)})
    x = np.ones((3, 10), np.float32)
    with pytest.raises(ImportShapeError, match="symbolic dimension 'N'"):
        onnx_backend.prepare(_two_inputs_sharing_n()).run([x, np.ones((1, 10), np.float32)])
    out = glow_core.compile(_two_inputs_sharing_n(), input_shapes={"x": (3, 10), "y": (3, 10)}).run({"x": x, "y": x})
    np.testing.assert_array_equal(out["z"], 2 * x)
