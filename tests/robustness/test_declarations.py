"""What a model declares about shapes, checked against what its ops compute and what the caller gives."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

import glow_core
from glow_core import onnx_backend
from glow_core.errors import GlowError, GlowWarning, InputError, ModelError
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
    with pytest.raises(InputError, match="cannot read profile no-such-profile.json"):
        glow_core.compile(m, quantize="no-such-profile.json")  # (int8 per shape fed: the profile is read first)
    dynamic = glow_core.compile(m)  # compiled per shape fed (docs/dynamic-shapes.md)
    x2 = np.concatenate([x, -x])
    np.testing.assert_array_equal(dynamic.run({"x": x2})["y"], -np.maximum(x2, 0))


def _two_inputs_sharing_n():  # type: ignore[no-untyped-def]
    return model([helper.make_node("Add", ["x", "y"], ["z"])], [("x", F, ["N", 10]), ("y", F, ["N", 10])],
                 [("z", F, ["N", 10])])


def test_symbolic_dims_fed_two_sizes_are_accepted_where_the_ops_allow_it() -> None:
    """Issue 28: one dim_param fed 3 and 1 is accepted as onnxruntime accepts it (the Add broadcasts); fed 3
    and 2 the Add's own rule refuses it."""
    x, y = np.ones((3, 10), np.float32), np.arange(10, dtype=np.float32).reshape(1, 10)
    out = glow_core.compile(_two_inputs_sharing_n(), input_shapes={"x": (3, 10), "y": (1, 10)}).run({"x": x, "y": y})
    np.testing.assert_array_equal(out["z"], x + y)
    (z,) = onnx_backend.prepare(_two_inputs_sharing_n()).run([x, y])
    np.testing.assert_array_equal(z, x + y)
    with pytest.raises(GlowError, match="Add"):
        glow_core.compile(_two_inputs_sharing_n(), input_shapes={"x": (3, 10), "y": (2, 10)})
    out = glow_core.compile(_two_inputs_sharing_n(), input_shapes={"x": (3, 10), "y": (3, 10)}).run({"x": x, "y": x})
    np.testing.assert_array_equal(out["z"], 2 * x)


@pytest.mark.parametrize("elem_type", [99, -3, TensorProto.STRING, TensorProto.COMPLEX64])
def test_an_output_element_type_that_is_no_data_type_or_not_computed_is_a_model_error(elem_type: int) -> None:
    """Issue 32: an output declared with ``elem_type`` 99 (not a TensorProto data type) was accepted."""
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2])], [("y", elem_type, [2])])
    match = "not an ONNX TensorProto data type" if elem_type in (99, -3) else "the node producing it computes float"
    with pytest.raises(ModelError, match=rf"graph output 'y': the model declares element type .*{match}"):
        glow_core.compile(m)


def test_an_input_element_type_that_is_no_data_type_is_a_model_error() -> None:
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", 99, [2])], [("y", F, [2])])
    with pytest.raises(ModelError, match=r"input 'x': element type 99 is not an ONNX TensorProto data type"):
        glow_core.compile(m)


@pytest.mark.parametrize("opset,ok", [(13, False), (14, True)])
def test_int8_div_is_refused_before_the_opset_that_allows_it(opset: int, ok: bool) -> None:
    """Issue 32: int8 arrived in Div at opset 14 (its schema's type constraint T); at opset 13 it was
    accepted. The refusal names the node, the op, the type, the opset and the opset that allows it."""
    i8 = TensorProto.INT8
    m = model([helper.make_node("Div", ["a", "b"], ["y"], name="d")], [("a", i8, [2]), ("b", i8, [2])],
              [("y", i8, [2])], opset=opset)
    feeds = {"a": np.array([7, -9], np.int8), "b": np.array([2, 4], np.int8)}
    if ok:
        np.testing.assert_array_equal(glow_core.compile(m).run(feeds)["y"], [3, -2])
        return
    with pytest.raises(ModelError, match=r"ONNX node 'd' \(Div, opset 13\): input 0 \('a'\) is int8, which Div does "
                                         r"not accept at opset 13 \(int8 is allowed from opset 14\)"):
        glow_core.compile(m)


def test_a_type_chosen_by_an_attribute_is_checked_against_the_opset() -> None:
    """Cast to bfloat16 arrived at opset 13: a Cast with ``to = BFLOAT16`` at opset 12 is refused."""
    m = model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16, name="c")], [("x", F, [2])],
              [("y", TensorProto.BFLOAT16, [2])], opset=12)
    with pytest.raises(ModelError, match=r"\(Cast, opset 12\): output 0 \('y'\) is bfloat16, which Cast does not "
                                         r"accept at opset 12 \(bfloat16 is allowed from opset 13\)"):
        glow_core.compile(m)
