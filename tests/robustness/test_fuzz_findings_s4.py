"""Findings of the campaign with seed 4, cases 5,000 to 9,999 (docs/robustness.md), each reduced to a small model.

Every test fails on the code before its fix:

- case 7754 (memory): a Resize whose ``sizes`` asked for 2.5e16 rows built the source coordinates of every
  output row (``numpy.arange``) before any budget check, and the importer turned numpy's MemoryError into
  "out of memory importing it"; the result's size is now checked first (BudgetError naming the shape);
- case 6910 (internal error): Attention's ``qk_matmul_output`` with a ``past_key`` is (batch, heads, q_len,
  past + new keys) in the spec and in onnx.reference; onnx shape inference gives the new keys' length alone,
  and the importer's cross-check took that for a bug of glow's;
- case 8088 (wrong): DynamicQuantizeLinear over an input holding a NaN: the spec's ``minimum(0, min(x))``
  is NaN, so is the scale (onnx.reference); glow took Python's ``min`` (NaN gives 0) and answered a scale of 1.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core.errors import BudgetError
from tests.robustness.util import F, model

pytestmark = pytest.mark.robustness

BACKENDS = ["interpreter", "cpu"]


def test_resize_with_corrupt_sizes_is_refused_before_allocating() -> None:
    sizes = helper.make_tensor("sizes", TensorProto.INT64, [2], [13360, 25051272934391900])
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear", axes=[3, 2])
    m = model([node], [helper.make_tensor_value_info("x", F, [1, 1, 4, 4])], [("y", F, ["a", "b", "c", "d"])], [sizes], opset=19)
    with pytest.raises(BudgetError, match=r"result of shape \[1, 1, 25051272934391900, 13360\]"):
        glow_core.compile(m, "interpreter", options={"cache": False})


def _attention_with_past() -> onnx.ModelProto:
    b, q_len, kv_len, past, heads, d = 2, 4, 6, 12, 3, 8
    node = helper.make_node("Attention", ["Q", "K", "V", "", "past_key", "past_value"],
                            ["Y", "present_key", "present_value", "qk"], q_num_heads=heads, kv_num_heads=heads)
    ins = [helper.make_tensor_value_info("Q", F, [b, q_len, heads * d]),
           helper.make_tensor_value_info("K", F, [b, kv_len, heads * d]),
           helper.make_tensor_value_info("V", F, [b, kv_len, heads * d]),
           helper.make_tensor_value_info("past_key", F, [b, heads, past, d]),
           helper.make_tensor_value_info("past_value", F, [b, heads, past, d])]
    total = past + kv_len
    outs = [("Y", F, [b, q_len, heads * d]), ("present_key", F, [b, heads, total, d]),
            ("present_value", F, [b, heads, total, d]), ("qk", F, [b, heads, q_len, total])]
    return model([node], ins, outs, [], opset=23)


def _with_past_as_output(m: onnx.ModelProto) -> onnx.ModelProto:
    """The mutation of case 6910: an input listed again as a graph output."""
    m = onnx.ModelProto.FromString(m.SerializeToString())
    m.graph.output.append(helper.make_tensor_value_info("past_key", F, [2, 3, 12, 8]))
    return m


@pytest.mark.parametrize("backend", BACKENDS)
def test_attention_scores_with_a_past_have_the_total_length(backend: str) -> None:
    m = _attention_with_past()
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in m.graph.input}
    net = glow_core.compile(_with_past_as_output(m), backend, options={"cache": False})
    got = net.run(feeds)
    want = ReferenceEvaluator(m).run(None, feeds)
    assert got["qk"].shape == (2, 3, 4, 18) == want[3].shape
    np.testing.assert_allclose(got["qk"], want[3], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["Y"], want[0], rtol=1e-5, atol=1e-5)


def _dynamic_quantize() -> onnx.ModelProto:
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zp"])
    return model([node], [helper.make_tensor_value_info("x", F, [6])],
                 [("y", TensorProto.UINT8, [6]), ("scale", F, []), ("zp", TensorProto.UINT8, [])], [], opset=11)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_quantize_of_a_nan_has_a_nan_scale(backend: str) -> None:
    net = glow_core.compile(_dynamic_quantize(), backend, options={"cache": False})
    x = np.array([np.nan, 2.0, -3.0, -2.5, np.nan, np.nan], np.float32)
    out = net.run({"x": x})
    with np.errstate(invalid="ignore"):
        want = ReferenceEvaluator(_dynamic_quantize()).run(None, {"x": x})
    assert np.isnan(out["scale"]) and np.isnan(want[1])
    # the result and the zero point are NaN converted to uint8 (undefined in the spec): glow gives 0
    assert not out["y"].any() and out["zp"] == 0
    finite = np.array([1.0, -2.0, 3.0, 0.5, 7.0, -1.0], np.float32)
    got, ref = net.run({"x": finite}), ReferenceEvaluator(_dynamic_quantize()).run(None, {"x": finite})
    assert got["scale"] == ref[1] and got["zp"] == ref[2] and np.array_equal(got["y"], ref[0])
