"""cpu's fusions survive the cuts: behind a narrow accelerator (Conv, MatMul, Gemm, Add, Relu), the nodes cpu
runs of a BERT-style encoder compile to no more kernels than cpu alone compiles for them (within 5%).

Counted: the nodes of every function cpu compiles (its kernels), against the nodes of cpu alone's compiled
function whose ONNX origin is one that cpu runs in the split. A fused node of cpu alone counts when the
origin it keeps (its first node's) is among them, so this side never counts more than cpu alone needs.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import glow_core
from glow_core.ir.graph import Function
from glow_core.plugin_host import get_backend
from glow_core.runtime.assign import WHOLE_BLOCKS
from tests.runtime.encoder import bert_encoder, encoder_feeds

#: the most kernels cpu may compile in the split for every kernel cpu alone compiles for the same nodes
MAX_RATIO = 1.05


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[Function]:
    cpu = get_backend("cpu")
    compiled: list[Function] = []
    original = type(cpu).compile

    def recording(self: object, function: Function, options: object) -> object:
        compiled.append(function)
        return original(self, function, options)  # type: ignore[arg-type]

    monkeypatch.setattr(type(cpu), "compile", recording)
    return compiled


def test_cpu_compiles_no_more_kernels_behind_a_narrow_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = _recording(monkeypatch)
    model = bert_encoder(layers=3)
    feeds = encoder_feeds()
    ref = glow_core.compile(model, "cpu", options={"cache": False}).run(feeds)
    (alone,) = compiled
    compiled.clear()
    net = glow_core.compile(model, devices="narrow:1,cpu:1", options={"cache": False})
    try:
        plan = net.executable.plan  # type: ignore[attr-defined]
        out = net.run(feeds)
    finally:
        net.executable.close()
    assert {p.backend for p in plan.partitions} == {"narrow", "cpu"}
    split = [n for fn in compiled for n in fn.nodes]
    origins = {n.origin for n in split}
    same = [n for n in alone.nodes if n.origin in origins]
    kinds = Counter(n.kind.name for n in split)
    assert len(split) <= MAX_RATIO * len(same), (len(split), len(same), kinds)
    assert all(kinds[k] == sum(n.kind.name == k for n in alone.nodes) for k in WHOLE_BLOCKS)  # 3 attentions, 7 LNs
    np.testing.assert_allclose(out["hidden_states"], ref["hidden_states"], rtol=1e-3, atol=1e-4)
