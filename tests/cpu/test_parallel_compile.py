"""The parallel compile of the cpu backend (split.py, objworker.py) and the multi-object cache entries: the parts
link into one engine and compute what the whole module computes, a failing worker falls back to this process,
and damaged cache entries are clean misses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from glow_backend_cpu import backend as cpu_backend
from glow_backend_cpu import cache, objworker, split
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.errors import BackendError


def _model() -> onnx.ModelProto:
    """Convolutions of different shapes (kernels that are not shared), each followed by an activation."""
    rng = np.random.default_rng(11)
    nodes, inits, cur, ch = [], [], "x", 3
    for k, (out_ch, act) in enumerate([(8, "Relu"), (12, "Sigmoid"), (8, "Tanh"), (16, "Relu"), (4, "Sigmoid")]):
        w = (rng.standard_normal((out_ch, ch, 3, 3)) * 0.2).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{k}"))
        nodes.append(helper.make_node("Conv", [cur, f"w{k}"], [f"c{k}"], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node(act, [f"c{k}"], [f"a{k}"]))
        cur, ch = f"a{k}", out_ch
    nodes.append(helper.make_node("Identity", [cur], ["y"]))
    g = helper.make_graph(nodes, "par", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 10, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 10, 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


X = np.random.default_rng(12).standard_normal((1, 3, 10, 10)).astype(np.float32)


@pytest.fixture()
def always_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Split even this small function; a private cache folder."""
    monkeypatch.setattr(split, "MIN_SPLIT_BYTES", 0)
    monkeypatch.setattr(cpu_backend, "SPLIT_MIN_NODES", 0)
    monkeypatch.setenv("GLOW_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cache, "_stored_since_scan", -1)
    return tmp_path / "cpu"


def _run(net: glow_core.pipeline.CompiledNetwork) -> np.ndarray:
    return net.run({"x": X})["y"]


def test_parts_compute_what_the_whole_module_computes(always_split: Path) -> None:
    whole = glow_core.compile(_model(), "cpu", options={"cache": False, "compile_jobs": 1})
    assert "parts" not in whole.stats.backend_s
    ref = glow_core.compile(_model(), "interpreter").run({"x": X})["y"]
    for jobs in (2, 3):
        net = glow_core.compile(_model(), "cpu", options={"cache": False, "compile_jobs": jobs})
        assert net.stats.backend_s["parts"] == jobs
        assert len(net.executable.library.objects) == jobs + 1  # and the glue (glue.py)
        np.testing.assert_array_equal(_run(net), _run(whole))
    np.testing.assert_allclose(_run(whole), ref, rtol=1e-4, atol=1e-5)


def test_parts_cut_while_generating_compute_what_the_whole_module_computes(always_split: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The pipelined compile: a part is cut off after every kernel (PART_BYTES 0) and compiled by the worker
    while the next kernels are generated; the last part holds the entry point and declares them."""
    from glow_backend_cpu.codegen import generate
    from glow_backend_cpu.target import host_codegen
    from glow_core.lircompiler import build_lir

    monkeypatch.setattr(split, "PART_BYTES", 0)
    whole = glow_core.compile(_model(), "cpu", options={"cache": False, "compile_jobs": 1})
    net = glow_core.compile(_model(), "cpu", options={"cache": False, "compile_jobs": 2})
    kernels = net.executable.layout.kernels_emitted
    assert net.stats.backend_s["parts"] == kernels + 1 == len(net.executable.library.objects) - 1  # - the glue
    np.testing.assert_array_equal(_run(net), _run(whole))
    # the parts' texts: each kernel defined once (external where cut off), the entry point in the last part
    parts: list[str] = []
    cutter: list[split.PartCutter] = []

    def on_kernel(module, name):  # type: ignore[no-untyped-def]
        if not cutter:
            cutter.append(split.PartCutter(module, {}))
        part = cutter[0].add_kernel(name)
        if part is not None:
            parts.append(part)

    module, _ = generate(host_codegen(), build_lir(net.function), on_kernel=on_kernel)
    parts.append(cutter[0].rest())
    assert len(parts) == kernels + 1
    for k in cutter[0].sent:
        assert sum(f'define void @"{k}"' in p for p in parts) == 1 and f'declare void @"{k}"' in parts[-1]
    assert all('define void @"glow_main"' not in p for p in parts[:-1]) and 'define void @"glow_main"' in parts[-1]


def test_split_parts_are_valid_modules_that_link_by_name(always_split: Path) -> None:
    from glow_backend_cpu.codegen import generate, module_text, printed_texts
    from glow_backend_cpu.target import host_codegen
    from glow_core.lircompiler import build_lir

    net = glow_core.compile(_model(), "cpu", options={"cache": False, "compile_jobs": 1})
    module, _ = generate(host_codegen(), build_lir(net.function))
    assert module_text(module) == str(module)
    parts = split.split_module(module, printed_texts(module), 2)
    assert parts is not None and len(parts) == 2
    assert "glow_main" in parts[0] and 'define void @"glow_main"' not in parts[1]
    # every kernel is defined exactly once over the parts, with external linkage
    kernels = {g.name for g in module.globals.values() if split._KERNEL.fullmatch(g.name)}
    for k in kernels:
        defined = [p for p in parts if f'@"{k}"(' in p and f'define void @"{k}"' in p]
        assert len(defined) == 1, k
    assert split.split_module(module, printed_texts(module), 1) is None


def test_a_failing_worker_is_replaced_by_this_process(always_split: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(n: int) -> list[objworker.Worker]:
        cmd = [sys.executable, "-c", "import sys; sys.stdin.buffer.read(100); sys.exit(3)"]
        return [objworker.Worker(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE))
                for _ in range(n)]

    monkeypatch.setattr(objworker, "start", broken)
    net = glow_core.compile(_model(), "cpu", options={"cache": False, "compile_jobs": 2})
    assert net.stats.backend_s["parts"] >= 2
    whole = glow_core.compile(_model(), "cpu", options={"cache": False, "compile_jobs": 1})
    np.testing.assert_array_equal(_run(net), _run(whole))


def test_the_worker_program_makes_object_code() -> None:
    from glow_backend_cpu.target import host_codegen

    cg = host_codegen()
    text = f'target triple = "{cg.triple}"\ndefine i32 @"f"(i32 %"a") {{\n  %"b" = add i32 %"a", 1\n  ret i32 %"b"\n}}'
    workers = objworker.start(1)
    objs = [objworker.request(workers[0], cg.worker_target(), text) for _ in range(2)]  # one worker, two requests
    for obj in objs:
        assert obj is not None and (obj[:4] == b"\x7fELF" if "linux" in cg.triple else len(obj) > 0)
    assert workers[0].alive
    objworker.release(workers)  # its input closed: it exits cleanly
    assert workers[0].proc.wait(timeout=120) == 0


def test_the_part_queue_compiles_every_part_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts queued before and after this process joins in are each compiled once, by a worker or here; a part
    whose worker fails is compiled by another process."""
    from glow_backend_cpu.target import host_codegen

    cg = host_codegen()
    texts = [f'target triple = "{cg.triple}"\ndefine i32 @"f{i}"(i32 %"a") {{\n  %"b" = add i32 %"a", {i}\n'
             f'  ret i32 %"b"\n}}' for i in range(6)]
    here: list[str] = []

    def local(t: str) -> bytes:
        here.append(t)
        return cg._compile_text("t", t).object_code

    for broken in (False, True):
        here.clear()
        workers = objworker.start(1)
        if broken:
            workers[0].proc.kill()
        queue = objworker.PartQueue(workers, cg.worker_target())
        for t in texts[:3]:
            queue.add(t)
        for t in texts[3:]:
            queue.add(t)
        timings: dict[str, float] = {}
        objs = queue.finish(local, timings)
        assert len(objs) == 6 and all(len(o) > 0 for o in objs) and "wait" in timings
        assert len(here) == len(set(here)) and (len(here) == 6 if broken else len(here) <= 6)
        for i, o in enumerate(objs):  # each object is its own part's
            assert f"f{i}".encode() in o


def test_compile_jobs_option_is_checked() -> None:
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(BackendError, match="compile_jobs"):
            glow_core.compile(_model(), "cpu", options={"cache": False, "compile_jobs": bad})


def _entry(d: Path) -> str:
    [meta] = list(d.glob("*.json"))
    return meta.stem


def _damage_object(d: Path, k: str) -> None:
    p = d / f"{k}.o"
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    p.write_bytes(bytes(data))


def _truncate_object(d: Path, k: str) -> None:
    p = d / f"{k}.o"
    p.write_bytes(p.read_bytes()[:100])


def _edit_meta(d: Path, k: str) -> None:
    p = d / f"{k}.json"
    meta = json.loads(p.read_text())
    meta["layout"]["arena_bytes"] += 64  # valid JSON, wrong content: the metadata digest no longer matches
    p.write_text(json.dumps(meta))


def _old_format(d: Path, k: str) -> None:
    p = d / f"{k}.json"
    meta = json.loads(p.read_text())
    meta["format"] = 2
    meta["check"] = cache.meta_check(meta)
    p.write_text(json.dumps(meta))


def _garbage_meta(d: Path, k: str) -> None:
    (d / f"{k}.json").write_bytes(b"\x00\xff{[")


@pytest.mark.parametrize("damage", [_damage_object, _truncate_object, _edit_meta, _old_format, _garbage_meta])
def test_multi_object_entries_and_damaged_entries_are_misses(always_split: Path, damage) -> None:  # type: ignore[no-untyped-def]
    cold = glow_core.compile(_model(), "cpu", options={"compile_jobs": 2})
    k = _entry(always_split)
    meta = json.loads((always_split / f"{k}.json").read_text())
    assert len(meta["objects"]) == 2 + 1 and meta["format"] == cache.FORMAT  # the parts and the glue
    hit = cache.load(k)
    assert hit is not None and [len(o) for o in hit[0]] == meta["objects"]
    warm = glow_core.compile(_model(), "cpu", options={"compile_jobs": 2})
    assert warm.stats.backend_s["cached"] is True
    np.testing.assert_array_equal(_run(warm), _run(cold))
    damage(always_split, k)
    assert cache.load(k) is None
    again = glow_core.compile(_model(), "cpu", options={"compile_jobs": 2})
    assert again.stats.backend_s["cached"] is False  # a clean miss: compiled afresh (and stored again)
    np.testing.assert_array_equal(_run(again), _run(cold))
    assert cache.load(k) is not None
