"""ai.onnx.ml ArrayFeatureExtractor and Binarizer on interpreter and cpu against onnx.reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from glow_core import onnx_backend

RNG = np.random.default_rng(6)


def _model(op: str, inputs: dict[str, np.ndarray], out_shape, **attrs) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
           for k, v in inputs.items()]
    elem = helper.np_dtype_to_tensor_dtype(next(iter(inputs.values())).dtype)
    node = helper.make_node(op, list(inputs), ["y"], domain="ai.onnx.ml", **attrs)
    g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", elem, out_shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])


def _check(m: onnx.ModelProto, feeds: dict[str, np.ndarray], backend: str) -> None:
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    got = onnx_backend.prepare(m, backend=backend).run(list(feeds.values()))[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("shape,idx", [((3, 4), [0, 3]), ((5,), [4, 1, 1]), ((2, 3, 6), [[5, 0], [2, 2]]),
                                       ((2, 4), [-1])])
def test_array_feature_extractor(backend: str, shape, idx) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    i = np.array(idx, np.int64)
    k = i.size
    out = [1, k] if len(shape) == 1 else list(shape[:-1]) + [k]
    _check(_model("ArrayFeatureExtractor", {"x": x, "i": i}, out), {"x": x, "i": i}, backend)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("dtype,threshold", [(np.float32, 0.25), (np.float64, -0.5), (np.int64, 1.0)])
def test_binarizer(backend: str, dtype, threshold: float) -> None:
    x = (RNG.standard_normal((3, 5)) * 2).astype(dtype)
    _check(_model("Binarizer", {"x": x}, [3, 5], threshold=threshold), {"x": x}, backend)
