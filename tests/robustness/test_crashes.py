"""Hostile models that used to crash the process (SIGSEGV, heap corruption) or a native library."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from onnx import helper

import glow_core
from tests.robustness.util import F, model

pytestmark = pytest.mark.robustness


def test_duplicate_graph_output_keeps_every_buffer_alive_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph output listed twice has two io regions: both buffers must live while native code writes them."""
    pytest.importorskip("glow_backend_cpu")
    from glow_backend_cpu import runtime

    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [256, 256])], [("y", F, [256, 256])] * 2)
    net = glow_core.compile(m, backend="cpu")
    made: list[weakref.ref] = []
    real_empty, real_run = runtime.aligned_empty, runtime.CpuExecutable._run

    def recording_empty(shape, dtype, align=runtime.ALIGN):  # type: ignore[no-untyped-def]
        a = real_empty(shape, dtype, align)
        made.append(weakref.ref(a.base if a.base is not None else a))
        return a

    dead: list[int] = []

    def checking_run(self):  # type: ignore[no-untyped-def]
        gc.collect()
        dead.extend(k for k, r in enumerate(made) if r() is None)
        return real_run(self)

    monkeypatch.setattr(runtime, "aligned_empty", recording_empty)
    monkeypatch.setattr(runtime.CpuExecutable, "_run", checking_run)
    x = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    out = net.run({"x": x})
    assert len(made) >= 2, "a fresh buffer per output region"
    assert not dead, "an output buffer was freed before the native run wrote it"
    np.testing.assert_array_equal(out["y"], np.maximum(x, 0))


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_duplicate_graph_output_runs_like_onnxruntime(backend: str) -> None:
    if backend == "cpu":
        pytest.importorskip("glow_backend_cpu")
    m = model([helper.make_node("Neg", ["x"], ["y"])], [("x", F, [64, 64])], [("y", F, [64, 64])] * 2)
    from glow_core import onnx_backend

    x = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)
    y1, y2 = onnx_backend.prepare(m, backend=backend).run([x])
    np.testing.assert_array_equal(y1, -x)
    np.testing.assert_array_equal(y2, -x)
