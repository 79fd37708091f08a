"""Findings of the fuzzer (glow_tools.fuzz, docs/robustness.md), each reduced to a small model.

Each test names the campaign case it came from (campaign seed 0 unless said otherwise).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import glow_core
from glow_core import onnx_backend
from glow_core.errors import ModelError
from tests.robustness.util import F, model

pytestmark = pytest.mark.robustness


def _invalid_utf8(m: onnx.ModelProto, marker: str, bad: bytes) -> bytes:
    data = m.SerializeToString()
    assert data.count(marker.encode()) >= 1 and len(bad) == len(marker)
    return data.replace(marker.encode(), bad)


def test_invalid_utf8_input_name_in_onnx_backend_is_a_model_error() -> None:
    """Case 81: an input name of invalid UTF-8 reached sorted() as bytes among str (TypeError)."""
    m = model([helper.make_node("Add", ["x", "Zqinputname"], ["y"])], [("x", F, [2]), ("Zqinputname", F, [2])],
              [("y", F, [2])])
    proto = onnx.ModelProto()
    proto.ParseFromString(_invalid_utf8(m, "Zqinputname", b"\xff" * 11))
    with pytest.raises(ModelError, match="not valid UTF-8"):
        onnx_backend.prepare(proto, backend="interpreter").run([np.ones(2, np.float32)] * 2)


def test_invalid_utf8_string_attribute_is_a_model_error() -> None:
    """Case 505: SoftmaxCrossEntropyLoss's reduction of invalid UTF-8 was 'cannot import: UnicodeDecodeError'."""
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["z"], reduction="Zqmean")
    m = model([node], [("x", F, [3, 5]), ("t", onnx.TensorProto.INT64, [3])], [("z", F, [])], opset=13)
    with pytest.raises(ModelError, match="attribute 'reduction' .* is not valid UTF-8"):
        glow_core.compile(_invalid_utf8(m, "Zqmean", b"\xf8\x88\x80\x80\x80\xf8"))


@pytest.mark.parametrize("op", ["Constant", "ConstantOfShape"])
def test_tensor_attribute_with_short_raw_data_is_a_model_error(op: str) -> None:
    """Cases 72, 336 (Constant) and a ConstantOfShape: raw_data 3 bytes too long was a numpy ValueError."""
    t = numpy_helper.from_array(np.ones(1, np.float32), "")
    t.raw_data = t.raw_data + b"\x01\x02\x03"  # too long (the onnx checker only refuses too short)
    if op == "Constant":
        m = model([helper.make_node("Constant", [], ["c"], value=t), helper.make_node("Add", ["x", "c"], ["y"])],
                  [("x", F, [1])], [("y", F, [1])])
    else:
        shape = numpy_helper.from_array(np.array([2], np.int64), "s")
        m = model([helper.make_node("ConstantOfShape", ["s"], ["c"], value=t),
                   helper.make_node("Add", ["x", "c"], ["y"])], [("x", F, [2])], [("y", F, [2])], [shape])
    with pytest.raises(ModelError, match=r"tensor '' of shape \[1\] cannot be read"):
        glow_core.compile(m)


@pytest.mark.parametrize("dims, what", [([2**62, 4], "needs"), ([3, -2], "negative dimension")])
def test_tensor_attribute_dims_are_checked_before_numpy_reads_them(dims: list[int], what: str) -> None:
    """tensor_array (every tensor attribute) checks dims against the budget before reading the data."""
    from glow_core.importer.context import tensor_array

    t = numpy_helper.from_array(np.ones(4, np.float32), "v")
    del t.dims[:]
    t.dims.extend(dims)
    with pytest.raises(ModelError, match=f"tensor 'v'.*{what}"):
        tensor_array(t, "ONNX node 'c'")
