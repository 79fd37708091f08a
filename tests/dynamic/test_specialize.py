"""Compile once, run any conforming shape: glow_core.compile on models with symbolic dims, the LRU of
specializations (glow_core/pipeline/specialize.py), the session and the ONNX backend on the same mechanism."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

import glow_core
import glow_core.onnx_backend as onnx_backend
from glow_core.errors import InputError
from glow_core.pipeline.specialize import CacheLimits, DynamicNetwork, Specializations
from tests.dynamic.models import bert_feeds, bert_like, conv_net, ocr_like


def _images(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_one_compile_serves_batch_1_2_4_as_per_shape_compiles(backend: str) -> None:
    model = conv_net()
    net = glow_core.compile(model, backend)
    assert isinstance(net, DynamicNetwork) and net.input_dims == {"x": "float32[batch,3,16,16]"}
    assert net.specializations_compiled == 0
    ref = ReferenceEvaluator(model)
    one = glow_core.compile(model, backend, {"x": (1, 3, 16, 16)})
    for batch in (1, 2, 4, 2, 1):
        x = _images((batch, 3, 16, 16), batch)
        got = net.run({"x": x})["y"]
        # the samples never meet: each is what the batch-1 network gives it (glow_core/pipeline/batching.py)
        alone = np.concatenate([one.run({"x": x[i:i + 1]})["y"] for i in range(batch)])
        np.testing.assert_array_equal(got, alone)
        np.testing.assert_allclose(got, ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert net.specializations_compiled == 1 and len(net.specializations) == 1
    net.batches = "compile"  # a network per batch size, as a batched product
    for batch in (2, 4):
        x = _images((batch, 3, 16, 16), batch)
        got = net.run({"x": x})["y"]
        np.testing.assert_array_equal(got, glow_core.compile(model, backend, {"x": x.shape}).run({"x": x})["y"])
    assert net.specializations_compiled == 3


def test_a_minus_one_3_unknown_unknown_classifier_runs_48x192_and_48x320() -> None:
    """Both sizes from one compile for symbolic dims (the image axes in steps: docs/dynamic-shapes.md, "Image
    sizes"); the answers those of a compile per shape (a global pool sums in another order: not bit-equal)."""
    model = ocr_like()
    net = glow_core.compile(model, "cpu")
    for h, w in ((48, 192), (48, 320)):
        x = _images((1, 3, h, w), w)
        got = net({"x": x})["y"]  # (a network is callable)
        want = glow_core.compile(model, "cpu", {"x": (1, 3, h, w)}).run({"x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert net.specializations_compiled == 1 and net.symbolic.plans


@pytest.mark.parametrize("symbolic", [True, False])
def test_a_transformer_with_batch_and_sequence_matches_the_reference(symbolic: bool) -> None:
    """On cpu the encoder compiles once for symbolic dims (its sequence free up to a bound, batches one sample at
    a time); with options={"symbolic_dims": False} each shape compiles a specialization."""
    model = bert_like()
    net = glow_core.compile(model, "cpu", options={"symbolic_dims": symbolic})
    ref = ReferenceEvaluator(model)
    for batch, seq in ((1, 5), (2, 9), (1, 16)):
        feeds = bert_feeds(batch, seq)
        np.testing.assert_allclose(net.run(feeds)["out"], ref.run(None, feeds)[0], rtol=1e-4, atol=1e-4)
    assert net.specializations_compiled == (1 if symbolic else 3)
    assert [p.describe() for p in net.symbolic.plans] == ["sequence<=511, batch=1"] if symbolic else net.symbolic is None


def test_dims_fix_or_bound_symbols() -> None:
    model = bert_like()
    fixed = glow_core.compile(model, "interpreter", dims={"batch": 1, "sequence": 6})
    assert not isinstance(fixed, DynamicNetwork) and fixed.input_types["ids"].shape == (1, 6)
    bounded = glow_core.compile(model, "interpreter", dims={"sequence": (2, 8)})
    assert isinstance(bounded, DynamicNetwork)
    assert bounded.run(bert_feeds(3, 8))["out"].shape == (3, 8, 64)
    with pytest.raises(InputError, match=r"input 'ids' has 9 at axis 1 \(dimension 'sequence'\), above the "
                                         r"maximum 8: the bound of 'sequence' is 2\.\.8"):
        bounded.run(bert_feeds(1, 9))
    with pytest.raises(InputError, match="missing input.*'mask'"):
        bounded.run({"ids": bert_feeds(1, 4)["ids"]})
    assert bounded.specializations_compiled == 1  # refused feeds compile nothing


def test_the_lru_evicts_by_count_and_bytes_and_frees_what_it_evicts() -> None:
    net = glow_core.compile(conv_net(), "interpreter", specializations=CacheLimits(count=2))
    net.batches = "compile"  # (one specialization per batch size)
    first = net.specialization({"x": _images((1, 3, 16, 16))})
    gone = weakref.ref(first)
    del first
    for batch in (2, 3):
        net.run({"x": _images((batch, 3, 16, 16))})
    gc.collect()
    assert gone() is None, "an evicted specialization is freed"
    assert len(net.specializations) == 2 and net.cache.evicted == 1 and net.specializations_compiled == 3
    net.set_cache_limits(count=8, bytes=1)  # smaller than any network: only the most recent stays
    assert len(net.specializations) == 1 and net.cache.nbytes() > 1
    net.run({"x": _images((1, 3, 16, 16))})
    assert [n.input_types["x"].shape[0] for n in net.specializations] == [1]
    net.close()
    assert net.specializations == []


def test_shared_buffers_count_once_in_the_byte_total() -> None:
    class Net:
        def __init__(self, *arrays: np.ndarray) -> None:
            self.arrays = arrays

    def sizes(net: Net) -> dict[int, int]:
        return {id(a): a.nbytes for a in net.arrays}

    shared, own1, own2 = np.zeros(1000), np.zeros(10), np.zeros(20)
    cache: Specializations[Net] = Specializations(CacheLimits(4), size_of=sizes, close=lambda n: None)
    cache.get("a", {}, lambda bound: Net(shared, own1))
    cache.get("b", {}, lambda bound: Net(shared, own2))
    assert cache.nbytes() == shared.nbytes + own1.nbytes + own2.nbytes and cache.compiled == 2
    assert cache.get("a", {}, lambda bound: Net()).arrays[1] is own1 and cache.compiled == 2


def test_the_onnx_backend_and_the_session_share_the_mechanism() -> None:
    model = conv_net()
    rep = onnx_backend.prepare(model, backend="interpreter", specializations=CacheLimits(count=1))
    assert isinstance(rep.compiled, Specializations)
    for batch in (1, 2):
        (y,) = rep.run([_images((batch, 3, 16, 16))])
        assert y.shape == (batch, 10)
    assert rep.compiled.compiled == 2 and len(rep.compiled.entries()) == 1
    sess = glow_core.InferenceSession(bert_like(), providers=["interpreter"], dims={"sequence": (1, 8)})
    assert sess.run(None, bert_feeds(2, 8))[0].shape == (2, 8, 64)
    with pytest.raises(InputError, match="above the maximum 8"):
        sess.run(None, bert_feeds(1, 9))
    opts = glow_core.SessionOptions()
    opts.add_free_dimension_override_by_name("batch", 1)
    sess = glow_core.InferenceSession(bert_like(), opts, providers=["interpreter"])
    with pytest.raises(InputError, match="dimension 'batch' \\(fixed by dims\\) is 1"):
        sess.run(None, bert_feeds(2, 4))
