"""Symbols and bounds at the model boundary (glow_core/importer/symbols.py) and the importer's use of them."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core.errors import ImportShapeError, InputError
from glow_core.importer.symbols import DimBound, InputShapes, ModelSymbols, check_dims
from tests.dynamic.models import bert_like, ocr_like


def two_inputs_model() -> object:
    """``x = Relu(a)``, ``y = Relu(b)``; a and b are both declared float32[n, 3]."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["a"], ["x"]), helper.make_node("Relu", ["b"], ["y"])], "two",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 3]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_each_unknown_dim_is_its_own_symbol_and_names_are_shared() -> None:
    ocr = ModelSymbols(ocr_like())
    assert ocr.inputs["x"].describe() == "float32[?,3,?,?]" and ocr.symbols() == []
    probed, names = ocr.probe({}, taken={3, 8})
    assert len(set(probed["x"][i] for i in (0, 2, 3))) == 3 and probed["x"][1] == 3  # independent h and w
    assert sorted(names.values()) == ["?", "?", "?"]
    bert = ModelSymbols(bert_like())
    assert bert.symbols() == ["batch", "sequence"]
    assert bert.inputs["ids"].describe() == "int64[batch,sequence]"
    probed, _ = bert.probe({}, taken=set())
    assert probed["ids"] == probed["mask"]  # one size per named symbol


def test_dims_fix_a_symbol_in_every_input_that_names_it() -> None:
    symbols = ModelSymbols(bert_like(), {"batch": 2, "sequence": 7})
    assert symbols.resolve(None) == {"ids": (2, 7), "mask": (2, 7)} and symbols.open_inputs(None) == []
    partly = ModelSymbols(bert_like(), {"sequence": 7})
    assert partly.resolve(None) == {} and partly.open_inputs(None) == ["ids", "mask"]


def test_a_fed_shape_is_checked_against_fixed_sizes_dims_and_bounds() -> None:
    symbols = ModelSymbols(bert_like(), {"batch": 1, "sequence": DimBound(2, 16, multiple_of=2)})
    symbols.check("ids", (1, 8))
    with pytest.raises(InputError, match=r"input 'ids' has 17 at axis 1 \(dimension 'sequence'\), above the maximum 16"):
        symbols.check("ids", (1, 17), InputError)
    with pytest.raises(ImportShapeError, match="not a multiple of 2"):
        symbols.check("mask", (1, 7))
    with pytest.raises(ImportShapeError, match="below the minimum 2"):
        symbols.check("mask", (1, 0))
    with pytest.raises(ImportShapeError, match=r"input 'ids' has 3 at axis 0, where the model's dimension 'batch' "):
        symbols.check("ids", (3, 8))
    with pytest.raises(ImportShapeError, match="rank 3"):
        symbols.check("ids", (1, 8, 1))
    with pytest.raises(ImportShapeError, match="fixed dimension is 3"):
        ModelSymbols(ocr_like()).check("x", (1, 4, 48, 192))


def test_dims_arguments_are_checked() -> None:
    assert check_dims({"s": 4, "t": (1, None), "u": DimBound(0, 8)}) == {
        "s": 4, "t": DimBound(1, None), "u": DimBound(0, 8)}
    for bad in ({"s": -1}, {"s": "x"}, {"s": (4, 2)}, [("s", 1)], {"": 1}):
        with pytest.raises(ImportShapeError):
            check_dims(bad)
    with pytest.raises(ImportShapeError, match="'nosuch', which no input of the model uses; its symbols are: "
                                                "batch, sequence"):
        ModelSymbols(bert_like(), {"nosuch": 1})


def test_one_symbol_fed_two_sizes_is_accepted_as_onnxruntime_accepts_it() -> None:
    model = two_inputs_model()
    a, b = -np.ones((2, 3), np.float32), np.arange(15, dtype=np.float32).reshape(5, 3) - 7
    want = ReferenceEvaluator(model).run(None, {"a": a, "b": b})
    for net in (glow_core.compile(model, "interpreter"),
                glow_core.compile(model, "interpreter", {"a": (2, 3), "b": (5, 3)})):
        out = net.run({"a": a, "b": b})
        np.testing.assert_array_equal(out["x"], want[0])
        np.testing.assert_array_equal(out["y"], want[1])


def test_the_paddleocr_declaration_imports_at_any_height_and_width() -> None:
    # refused before: "symbolic dimension '?' is 48 ... but 192 ... the model says they are the same size"
    net = glow_core.compile(ocr_like(), "interpreter", {"x": (1, 3, 48, 192)})
    assert net.input_types["x"].shape == (1, 3, 48, 192)


def test_bounds_reach_the_importer_through_input_shapes() -> None:
    shapes = InputShapes({"ids": (1, 20), "mask": (1, 20)}, {"sequence": DimBound(1, 16)})
    with pytest.raises(ImportShapeError, match="'sequence'.*above the maximum 16"):
        glow_core.compile(bert_like(), "interpreter", shapes)
    with pytest.raises(ImportShapeError, match="above the maximum 16"):
        glow_core.compile(bert_like(), "interpreter", {"ids": (1, 20), "mask": (1, 20)}, dims={"sequence": (1, 16)})
