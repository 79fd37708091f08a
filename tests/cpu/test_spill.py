"""Packed constants written to the cache's image file as they are packed (glow_backend_cpu/spill.py): the file
becomes the entry's image, equal to the region a compile without the cache builds in memory; a failed write,
an entry over the bound, and the compile's peak memory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from glow_backend_cpu import cache, spill
from glow_backend_cpu.codegen import Layout
from onnx import TensorProto, helper

import glow_core
from glow_sdk.backend import CACHE_DIR_ENV

ROOT = Path(__file__).resolve().parents[2]


def _two_matmuls(k: int = 256, n: int = 1024, seed: int = 0) -> onnx.ModelProto:
    """x[4,k] @ w1[k,n] -> Relu -> @ w2[n,k]: two weights of k*n floats, packed as GEMM panels."""
    rng = np.random.default_rng(seed)
    inits = [onnx.numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "w1"),
             onnx.numpy_helper.from_array(rng.standard_normal((n, k)).astype(np.float32), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "spill", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, k])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _expected(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    w = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    return np.maximum(x @ w["w1"], 0) @ w["w2"]


@pytest.fixture()
def cdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.delenv("GLOW_CACHE_MAX_BYTES", raising=False)
    return tmp_path / "cpu"


def _compile(model: onnx.ModelProto, use_cache: bool) -> glow_core.CompiledNetwork:
    return glow_core.compile(model, "cpu", options={"cache": use_cache})


def _region(net: glow_core.CompiledNetwork) -> bytes:
    return net.executable._packed.tobytes()  # type: ignore[attr-defined]


def test_the_spilled_file_becomes_the_image_equal_to_the_region_built_in_memory(
        cdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[object]] = []
    finish = spill.PackedSpill.finish

    def watch(self: spill.PackedSpill, layout: object) -> None:
        seen.append([data for _, data in layout.packed])  # type: ignore[attr-defined]
        finish(self, layout)  # type: ignore[arg-type]

    monkeypatch.setattr(spill.PackedSpill, "finish", watch)
    written: list[object] = []
    write_atomic = cache.write_atomic

    def record(path: object, data: object) -> None:
        written.append(data)
        write_atomic(path, data)  # type: ignore[arg-type]

    monkeypatch.setattr(cache, "write_atomic", record)
    model = _two_matmuls()
    x = np.random.default_rng(1).standard_normal((4, 256)).astype(np.float32)
    spilled = _compile(model, True)
    # while the module was generated, every packed constant was in the file, none in memory
    assert len(seen) == 1 and len(seen[0]) >= 2
    assert all(isinstance(d, spill.Pending) for d in seen[0])
    assert sum(len(d) for d in seen[0]) >= 2 * 256 * 1024 * 4  # type: ignore[arg-type]
    images = list(cdir.glob("*.bin"))
    assert len(images) == 1 and not list(cdir.glob("*.tmp"))
    assert not any(isinstance(d, Layout) for d in written)  # the spill file was renamed, no image written again
    in_memory = _compile(model, False)
    assert images[0].read_bytes() == _region(in_memory) == _region(spilled)
    for net in (spilled, in_memory):
        np.testing.assert_allclose(net.run({"x": x})["y"], _expected(model, x), rtol=1e-4, atol=1e-3)
    assert spilled.executable.object_key is not None  # type: ignore[attr-defined]
    # a fresh compile maps the image the spill published
    again = _compile(model, True)
    assert again.executable.compile_timings["cached"]  # type: ignore[attr-defined]
    assert _region(again) == _region(in_memory)


def test_a_failed_write_keeps_the_later_constants_in_memory(cdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    pwrite = os.pwrite

    def full_disk(fd: int, data: object, offset: int) -> int:
        calls["n"] += 1
        if calls["n"] > 1:
            raise OSError(28, "No space left on device")
        return pwrite(fd, data, offset)  # type: ignore[arg-type]

    monkeypatch.setattr(spill.os, "pwrite", full_disk)
    model = _two_matmuls(seed=2)
    net = _compile(model, True)
    assert calls["n"] == 2  # the first constant went to the file; the second write failed and spilling stopped
    x = np.random.default_rng(3).standard_normal((4, 256)).astype(np.float32)
    np.testing.assert_allclose(net.run({"x": x})["y"], _expected(model, x), rtol=1e-4, atol=1e-3)
    images = list(cdir.glob("*.bin"))  # the image was then written whole, from the file's views and the bytes
    assert len(images) == 1 and not list(cdir.glob("*.tmp"))
    monkeypatch.setattr(spill.os, "pwrite", pwrite)
    assert images[0].read_bytes() == _region(_compile(model, False))


def test_an_entry_over_the_bound_leaves_no_file(cdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOW_CACHE_MAX_BYTES", "256K")  # below the 2 MB of panels: the entry is not stored
    monkeypatch.setattr(cache, "_stored_since_scan", -1)
    model = _two_matmuls(seed=4)
    net = _compile(model, True)
    assert net.executable.object_key is None  # type: ignore[attr-defined]
    assert not list(cdir.glob("*.bin")) and not list(cdir.glob("*.tmp"))
    x = np.random.default_rng(5).standard_normal((4, 256)).astype(np.float32)
    np.testing.assert_allclose(net.run({"x": x})["y"], _expected(model, x), rtol=1e-4, atol=1e-3)


PEAK_SCRIPT = """
import sys
sys.path.insert(0, {root!r})
import numpy as np
import onnx
import glow_core
from tests.dynamic.models import bert_like

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) >> 10 for line in f if line.startswith(key + ":"))

model = bert_like(layers=2, hidden=768, heads=12, ffn=3072, vocab=8000)
weights = sum(int(np.prod(t.dims)) * 4 for t in model.graph.initializer) >> 20
onnx.save(model, {path!r})  # compiled from the file, as users do: the weights are read from its mapping
del model
glow_core.compile(bert_like(layers=1, hidden=8, heads=2, ffn=8, vocab=10), "cpu")  # (LLVM and the glue loaded)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak is measured from here
before = status("VmRSS")
net = glow_core.compile({path!r}, "cpu", options={{"symbolic_dims": False}}, input_shapes={{"ids": (1, 16), "mask": (1, 16)}})
print(weights, status("VmHWM") - before)
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc/self/clear_refs")
def test_a_cold_compile_holds_no_copy_of_the_packed_weights(tmp_path: Path) -> None:
    """The peak of a compile with the cache on (a fresh folder), over what the process held before: the model
    file's pages as the weights are read (hashed for the cache key, then packed) and the module, but no copy
    of the packed panels. Before the spill it grew by 2.4 times the weights (the panels sat in memory beside
    the module), now by about 1.25 times."""
    env = {**os.environ, CACHE_DIR_ENV: str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", PEAK_SCRIPT.format(root=str(ROOT), path=str(tmp_path / "bert.onnx"))], capture_output=True,
                         text=True, timeout=600, check=True, env=env)
    weight_mb, grew = (int(v) for v in out.stdout.split())
    assert weight_mb > 60 and grew < weight_mb * 3 // 2, f"the compile's peak grew {grew} MB ({weight_mb} MB weights)"
