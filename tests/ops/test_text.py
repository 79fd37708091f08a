"""TfIdfVectorizer on interpreter, interpreter-primitives (lowered) and cpu against onnx.reference; errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from glow_core import onnx_backend
from glow_core.api import compile as glow_compile
from glow_core.errors import ModelError, UnsupportedError

BACKENDS = ["interpreter", "interpreter-primitives", "cpu"]
RNG = np.random.default_rng(4)
POOL = dict(ngram_counts=[0, 3, 7], pool_int64s=[1, 2, 3, 1, 2, 3, 0, 2, 1, 1, 2, 3, 2, 1, 0, 1],
            ngram_indexes=[0, 1, 2, 3, 4, 5, 6, 7])  # 3 unigrams, 2 bigrams, 3 trigrams
W = [0.5, 1, 2, 3, 4, 5, 6, 7]


def _model(shape: list[int], elem: int = TensorProto.INT32, **attrs) -> onnx.ModelProto:
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs)
    out_shape = shape[:-1] + [max(attrs["ngram_indexes"]) + 1]
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape,lo,hi,skip,mode,weights", [
    ([12], 1, 3, 0, "TF", None), ([3, 10], 1, 2, 2, "TF", None), ([3, 10], 2, 3, 4, "IDF", W),
    ([2, 9], 1, 3, 1, "IDF", W), ([2, 9], 1, 3, 3, "TFIDF", W), ([4], 2, 3, 100, "TFIDF", W), ([30], 3, 3, 2, "TF", None),
])
def test_tfidf_matches_onnx_reference(backend: str, shape, lo, hi, skip, mode, weights) -> None:
    attrs = dict(POOL, min_gram_length=lo, max_gram_length=hi, max_skip_count=skip, mode=mode)
    if weights is not None:
        attrs["weights"] = weights
    m = _model(shape, **attrs)
    x = RNG.integers(0, 4, shape).astype(np.int32)
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    got = onnx_backend.prepare(m, backend=backend).run([x])[0]
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tfidf_without_weights(backend: str) -> None:
    """(onnx.reference cannot run IDF/TFIDF without weights: the spec's meaning is checked against TF.)"""
    x = RNG.integers(0, 4, (3, 10)).astype(np.int32)
    out = {}
    for mode in ("TF", "IDF", "TFIDF"):
        m = _model([3, 10], min_gram_length=1, max_gram_length=3, max_skip_count=1, mode=mode, **POOL)
        out[mode] = onnx_backend.prepare(m, backend=backend).run([x])[0]
    assert out["TF"].max() > 1
    np.testing.assert_array_equal(out["IDF"], (out["TF"] > 0).astype(np.float32))
    np.testing.assert_array_equal(out["TFIDF"], out["TF"])


def test_tfidf_string_pool_is_unsupported_and_bad_counts_are_model_errors() -> None:
    m = _model([5], min_gram_length=1, max_gram_length=1, max_skip_count=0, mode="TF", ngram_counts=[0],
               ngram_indexes=[0], pool_strings=["a"])
    with pytest.raises(UnsupportedError):
        glow_compile(m, "interpreter")
    bad = dict(POOL, ngram_counts=[0, 4, 7])  # 4 - 0 unigrams but then 3 entries for bigrams: not whole bigrams
    m = _model([5], min_gram_length=1, max_gram_length=2, max_skip_count=0, mode="TF", **bad)
    with pytest.raises(ModelError, match="do not cut the pool"):
        glow_compile(m, "interpreter")
