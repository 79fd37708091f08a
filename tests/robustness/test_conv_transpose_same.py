"""ConvTranspose with auto_pad SAME_* and a stride larger than the kernel (issue 32): the spec's "output_shape[i] =
input_shape[i] * strides[i]" (onnx.reference agrees) where onnx shape inference gives ``stride * (n - 1) +
kernel``. Glow warns, follows the spec and matches onnx.reference; it was refused as "a bug in glow"."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core.errors import GlowWarning
from glow_core.ir.types import ElemKind, TensorType
from tests.robustness.util import F, model

pytestmark = pytest.mark.robustness
BACKENDS = ["interpreter", "interpreter-primitives", "cpu"]


def _model(auto_pad: str, n: int, k: int, s: int, declared: int | None = None) -> onnx.ModelProto:
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], auto_pad=auto_pad, strides=[s, s], name="ct")
    w = np.arange(2 * k * k, dtype=np.float32).reshape(1, 2, k, k) + 1
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([0.5, -1], np.float32), "b")]
    out = declared if declared is not None else n * s
    return model([node], [("x", F, [1, 1, n, n])], [("y", F, [1, 2, out, out])], inits, opset=17)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("n,k,s", [(3, 2, 3), (3, 2, 5), (3, 1, 4), (4, 3, 2)])
def test_same_padding_follows_the_spec_and_the_reference(backend: str, auto_pad: str, n: int, k: int, s: int) -> None:
    if backend == "cpu":
        pytest.importorskip("glow_backend_cpu")
    m = _model(auto_pad, n, k, s)
    x = np.arange(n * n, dtype=np.float32).reshape(1, 1, n, n) + 1
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    assert want.shape == (1, 2, n * s, n * s)
    bare = onnx.ModelProto()
    bare.CopyFrom(m)
    bare.graph.output[0].type.tensor_type.ClearField("shape")
    inferred = onnx.shape_inference.infer_shapes(bare).graph.output[0].type.tensor_type.shape
    departs = [d.dim_value for d in inferred.dim][2:] != [n * s, n * s]
    assert departs == (s > k)  # onnx shape inference departs exactly when the total padding is negative
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = glow_core.compile(m, backend=backend).run({"x": x})["y"]
    told = [str(w.message) for w in caught if issubclass(w.category, GlowWarning)]
    if departs:
        assert len(told) == 1 and "onnx shape inference types output 'y' as float32[1,2," in told[0]
        assert "the spec says output_shape[i] = input_shape[i] * strides[i]" in told[0]
        assert "glow follows the spec" in told[0] and "bug" not in told[0]
    else:
        assert told == []
    np.testing.assert_array_equal(got, want)


def test_a_declaration_copied_from_onnx_inference_warns_too() -> None:
    """An exporter that wrote onnx inference's shape: the declaration's warning, then the spec's shape."""
    m = _model("SAME_UPPER", 3, 2, 3, declared=8)
    with pytest.warns(GlowWarning, match=r"declares shape \[1, 2, 8, 8\].*computes \[1, 2, 9, 9\]"):
        net = glow_core.compile(m)
    assert net.run({"x": np.ones((1, 1, 3, 3), np.float32)})["y"].shape == (1, 2, 9, 9)


def test_only_inference_departing_from_the_spec_is_excused() -> None:
    """Where glow's own shape is not the spec's, the disagreement stays glow's (None: no excuse)."""
    from glow_core.importer.precheck import inference_departure

    node = _model("SAME_UPPER", 3, 2, 3).graph.node[0]
    inferred = TensorType(ElemKind.FLOAT32, (1, 2, 8, 8))
    spec = TensorType(ElemKind.FLOAT32, (1, 2, 9, 9))
    assert inference_departure(node, [(1, 1, 3, 3)], spec, inferred) is not None
    assert inference_departure(node, [(1, 1, 3, 3)], TensorType(ElemKind.FLOAT32, (1, 2, 10, 10)), inferred) is None
    assert inference_departure(node, [(1, 1, 3, 3)], TensorType(ElemKind.FLOAT16, (1, 2, 9, 9)), inferred) is None
    other = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[3, 3], pads=[0, 0, 0, 0])
    assert inference_departure(other, [(1, 1, 3, 3)], spec, inferred) is None
