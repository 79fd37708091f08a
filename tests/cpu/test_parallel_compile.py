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


def _run(net: glow_core.api.CompiledNetwork) -> np.ndarray:
    return net.run({"x": X})["y"]


def test_parts_compute_what_the_whole_module_computes(always_split: Path) -> None:
    whole = glow_core.compile(_model(), "cpu", options={"cache": False, "compile_jobs": 1})
    assert "parts" not in whole.stats.backend_s
    ref = glow_core.compile(_model(), "interpreter").run({"x": X})["y"]
    for jobs in (2, 3):
        net = glow_core.compile(_model(), "cpu", options={"cache": False, "compile_jobs": jobs})
        assert net.stats.backend_s["parts"] == jobs
        assert len(net.executable.library.objects) == jobs
        np.testing.assert_array_equal(_run(net), _run(whole))
    np.testing.assert_allclose(_run(whole), ref, rtol=1e-4, atol=1e-5)


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
        cmd = [sys.executable, "-c", "import sys; sys.stdin.buffer.read(); sys.exit(3)"]
        return [objworker.Worker(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE))
                for _ in range(n)]

    monkeypatch.setattr(objworker, "start", broken)
    net = glow_core.compile(_model(), "cpu", options={"cache": False, "compile_jobs": 2})
    assert net.stats.backend_s["parts"] == 2
    whole = glow_core.compile(_model(), "cpu", options={"cache": False, "compile_jobs": 1})
    np.testing.assert_array_equal(_run(net), _run(whole))


def test_the_worker_program_makes_object_code() -> None:
    from glow_backend_cpu.target import host_codegen

    cg = host_codegen()
    text = f'target triple = "{cg.triple}"\ndefine i32 @"f"(i32 %"a") {{\n  %"b" = add i32 %"a", 1\n  ret i32 %"b"\n}}'
    workers = objworker.start(1)
    tgt = objworker.Target(cg.triple, cg.cpu_name, cg.features, cg.opt_level, cg.reloc, cg.codemodel)
    objworker.submit(workers[0], tgt, text)
    [obj] = objworker.finish(workers, [text], lambda t: b"")
    assert obj[:4] == b"\x7fELF" if "linux" in cg.triple else len(obj) > 0
    idle = objworker.start(1)
    objworker.release(idle)  # a worker given nothing exits cleanly
    assert idle[0].proc.wait(timeout=120) == 0


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
    assert len(meta["objects"]) == 2 and meta["format"] == cache.FORMAT
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
