"""Weights held once: every specialization of a model, and every compile of the same model file, reads one
copy of each weight (glow_core/importer/weights.py, the cpu backend's shared regions)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import glow_core
from glow_core.importer.weights import intern, read_initializer, split_weights
from glow_core.pipeline.specialize import _root
from glow_sdk.backend import CACHE_DIR_ENV
from tests.dynamic.models import bert_feeds, bert_like

ROOT = Path(__file__).resolve().parents[2]


def _payloads(net: object) -> dict[str, np.ndarray]:
    return {c.name: c.payload for c in net.function.constants if c.payload.nbytes >= 16384}  # type: ignore[attr-defined]


def test_split_weights_drops_the_models_bytes_and_reads_each_weight_once() -> None:
    model = bert_like()
    stripped, weights = split_weights(model)
    big = [t for t in model.graph.initializer if np.prod(t.dims) > 4096]
    assert big and sorted(weights) == sorted(t.name for t in big)
    for t in stripped.graph.initializer:
        if t.name in weights:
            assert not t.raw_data and not t.float_data and list(t.dims) == list(weights[t.name].shape)
    assert stripped.ByteSize() < model.ByteSize() - sum(a.nbytes for a in weights.values()) + 4096
    again = {t.name: read_initializer(t) for t in model.graph.initializer if t.name in weights}
    for name, a in weights.items():
        assert again[name] is a and not a.flags.writeable  # one array per content
        np.testing.assert_array_equal(a, onnx.numpy_helper.to_array(
            next(t for t in model.graph.initializer if t.name == name)))
    same = np.array(weights["emb"])  # a new array of equal content interns to the shared one
    assert intern(same) is weights["emb"]


@pytest.mark.parametrize("cache", [False, True])
def test_specializations_share_every_weight_and_the_cpu_regions(cache: bool, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """With the object cache (a fresh one: misses, then hits that map the images) and without it. (The packed
    panels depend on the GEMM geometry, which changes for products of very few rows: shapes of one regime.)"""
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))
    nets = [glow_core.compile(bert_like(), "cpu", options={"cache": cache, "symbolic_dims": False}) for _ in range(2)]
    for net in nets:
        net.run(bert_feeds(1, 16))
        net.run(bert_feeds(2, 12))
    specs = [s for net in nets for s in net.specializations]
    if cache:
        assert [s.executable.object_key is not None for s in specs] == [True] * 4
    first = _payloads(specs[0])
    assert "emb" in first and "l0.q" in first
    for spec in specs[1:]:
        other = _payloads(spec)
        assert other.keys() == first.keys()
        assert all(_root(first[n]) is _root(other[n]) for n in first)
        assert spec.executable._consts is specs[0].executable._consts  # the graph-constant region, once
        assert spec.executable._packed is specs[0].executable._packed  # the packed GEMM panels, once


def test_separate_compiles_of_one_file_share_the_weights(tmp_path: Path) -> None:
    path = tmp_path / "bert.onnx"
    onnx.save(bert_like(), str(path))
    one = glow_core.compile(path, "interpreter", {"ids": (1, 4), "mask": (1, 4)}, options={"cache": False})
    two = glow_core.compile(str(path), "interpreter", dims={"batch": 2, "sequence": 3}, options={"cache": False})
    p1, p2 = _payloads(one), _payloads(two)
    assert "l1.f2" in p1 and all(_root(p1[n]) is _root(p2[n]) for n in p1 if n in p2)


RSS_SCRIPT = """
import gc, sys
sys.path.insert(0, {root!r})
import numpy as np
import glow_core
from tests.dynamic.models import bert_feeds, bert_like
from tests.dynamic.rss_measure import rss
model = bert_like(layers=4, hidden=512, heads=8, ffn=2048, vocab=20000)
weights = sum(int(np.prod(t.dims)) * 4 for t in model.graph.initializer)
net = glow_core.compile(model, "cpu", options={{"cache": False, "symbolic_dims": {symbolic}}})
del model
net.run(bert_feeds(1, 8, 20000)); gc.collect()
first = rss()["VmRSS"]
for n in (16, 24, 32):
    net.run(bert_feeds(1, n, 20000))
gc.collect()
print(weights >> 20, first, rss()["VmRSS"], net.specializations_compiled)
"""


@pytest.mark.parametrize("symbolic", [False, True])
def test_more_shapes_add_far_less_than_a_copy_of_the_weights(symbolic: bool) -> None:
    """Before the weights were shared, each shape of this model held about 2.5 copies of its weights
    (3 more shapes: ~7 copies); now the growth after the first shape must stay below one copy: with a
    specialization per shape, and (one compile) for symbolic dims."""
    out = subprocess.run([sys.executable, "-c", RSS_SCRIPT.format(root=str(ROOT), symbolic=symbolic)],
                         capture_output=True, text=True, timeout=900, check=True)
    weight_mb, first, last, compiled = (int(x) for x in out.stdout.split())
    assert compiled == (1 if symbolic else 4) and weight_mb > 80
    assert last - first < weight_mb, f"RSS {first} MB after one shape, {last} MB after four ({weight_mb} MB weights)"
