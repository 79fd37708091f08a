"""The program cache (glow_core/compilecache.py, glow_backend_cpu/programs.py): a compile served before import,
invalidated by every part of its key, and a clean miss on damaged or foreign entries."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from glow_backend_cpu import cache, programs
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core import compilecache


def _model(seed: int = 3, batch: int | str = 1) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((6, 3, 3, 3)) * 0.3).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("ReduceMean", ["r"], ["y"], axes=[2, 3])]
    g = helper.make_graph(nodes, "prog", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 6, 1, 1])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GLOW_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(compilecache.ENV, raising=False)
    monkeypatch.setattr(cache, "_stored_since_scan", -1)
    path = tmp_path / "m.onnx"
    onnx.save(_model(), str(path))
    return path


def _x(batch: int = 1) -> np.ndarray:
    return np.random.default_rng(4).standard_normal((batch, 3, 6, 6)).astype(np.float32)


def _served(net: glow_core.pipeline.CompiledNetwork) -> bool:
    return bool(net.stats.backend_s.get("program"))


def _program_files(path: Path) -> list[Path]:
    return sorted((path.parent / "cache" / "cpu").glob(f"{programs.PREFIX}*"))


def test_a_second_compile_is_served_before_import(env: Path) -> None:
    cold = glow_core.compile(str(env), "cpu")
    assert not _served(cold) and len(_program_files(env)) == 2
    meta = [p for p in _program_files(env) if p.suffix == ".json"][0]
    os.utime(meta, (1.0, 1.0))
    warm = glow_core.compile(str(env), "cpu", threads=1)
    assert meta.stat().st_mtime > 1.0  # a hit is a use, for LRU eviction
    assert _served(warm) and warm.stats.backend_s["cached"] is True
    assert warm.stats.nodes_by_kind == cold.stats.nodes_by_kind and warm.function.nodes == []
    assert warm.input_types == cold.input_types and warm.output_names == cold.output_names
    assert warm.executable.threads == 1  # threads are the caller's, not the stored compile's
    np.testing.assert_array_equal(warm.run({"x": _x()})["y"], cold.run({"x": _x()})["y"])
    ref = glow_core.compile(str(env), "interpreter").run({"x": _x()})["y"]
    np.testing.assert_allclose(warm.run({"x": _x()})["y"], ref, rtol=1e-4, atol=1e-5)
    info = glow_core.plugin_host.get_backend("cpu").cache_info()
    assert info.entries == 2  # the object entry and the program entry
    assert glow_core.plugin_host.get_backend("cpu").clear_cache()[0] == 2 and not _program_files(env)


def _other_weights(path: Path, mp: pytest.MonkeyPatch) -> dict:
    onnx.save(_model(seed=9), str(path))
    return {}


def _other_options(path: Path, mp: pytest.MonkeyPatch) -> dict:
    return {"options": {"solo_ns": 1.0}}


def _debug(path: Path, mp: pytest.MonkeyPatch) -> dict:
    return {"debug": True}


def _glow_version(path: Path, mp: pytest.MonkeyPatch) -> dict:
    mp.setattr(glow_core.version, "__version__", "99.0")
    compilecache.core_digest.cache_clear()
    return {}


def _backend_sources(path: Path, mp: pytest.MonkeyPatch) -> dict:
    mp.setattr(cache, "sources_digest", lambda: "edited")
    return {}


def _cpu_features(path: Path, mp: pytest.MonkeyPatch) -> dict:
    from glow_backend_cpu.target import Codegen

    mp.setattr(Codegen, "identity", property(lambda self: "another-cpu|+avx512f"))
    return {}


def _thread_env(path: Path, mp: pytest.MonkeyPatch) -> dict:
    mp.setenv("GLOW_CPU_PARALLEL_THRESHOLD", "0")
    return {}


def _adaptive_env(path: Path, mp: pytest.MonkeyPatch) -> dict:
    mp.setenv("GLOW_CPU_ADAPTIVE", "1")  # (the stored executable would run without the thread chooser)
    return {}


@pytest.mark.parametrize("change", [_other_weights, _other_options, _debug, _glow_version, _backend_sources,
                                    _cpu_features, _thread_env, _adaptive_env])
def test_every_part_of_the_key_invalidates(env: Path, monkeypatch: pytest.MonkeyPatch,
                                           change: Callable[[Path, pytest.MonkeyPatch], dict]) -> None:
    glow_core.compile(str(env), "cpu")
    assert _served(glow_core.compile(str(env), "cpu"))
    kwargs = change(env, monkeypatch)
    net = glow_core.compile(str(env), "cpu", **kwargs)
    assert not _served(net)
    ref = glow_core.compile(str(env), "interpreter").run({"x": _x()})["y"]
    np.testing.assert_allclose(net.run({"x": _x()})["y"], ref, rtol=1e-4, atol=1e-5)
    compilecache.core_digest.cache_clear()


def test_input_shapes_are_part_of_the_key(env: Path) -> None:
    onnx.save(_model(batch="N"), str(env))
    one = glow_core.compile(str(env), "cpu", input_shapes={"x": (1, 3, 6, 6)})
    two = glow_core.compile(str(env), "cpu", input_shapes={"x": (2, 3, 6, 6)})
    assert not _served(one) and not _served(two)
    again = glow_core.compile(str(env), "cpu", input_shapes={"x": (2, 3, 6, 6)})
    assert _served(again) and again.input_types["x"].shape == (2, 3, 6, 6)
    np.testing.assert_array_equal(again.run({"x": _x(2)})["y"], two.run({"x": _x(2)})["y"])


def test_switches_turn_it_off(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    glow_core.compile(str(env), "cpu")
    assert not _served(glow_core.compile(str(env), "cpu", options={"cache": False}))
    monkeypatch.setenv(compilecache.ENV, "0")
    assert not _served(glow_core.compile(str(env), "cpu"))
    monkeypatch.delenv(compilecache.ENV)
    model = onnx.load(str(env))
    assert not _served(glow_core.compile(model, "cpu"))  # only models given by path are served


def _rewrite_meta(path: Path, edit: Callable[[dict], None]) -> None:
    meta_path = [p for p in _program_files(path) if p.suffix == ".json"][0]
    meta = json.loads(meta_path.read_text())
    edit(meta)
    meta["check"] = cache.meta_check(meta)  # a consistent but hostile entry: the bounds checks must catch it
    meta_path.write_text(json.dumps(meta))


def _truncate_image(path: Path) -> None:
    p = [p for p in _program_files(path) if p.suffix == ".bin"][0]
    p.write_bytes(p.read_bytes()[:10])


def _garbage_meta(path: Path) -> None:
    [p for p in _program_files(path) if p.suffix == ".json"][0].write_bytes(b"\x00garbage")


def _flip_meta(path: Path) -> None:
    p = [p for p in _program_files(path) if p.suffix == ".json"][0]
    p.write_text(p.read_text().replace('"parallel": ', '"parallel":  '))  # content unchanged, digest checked
    p.write_text(p.read_text().replace('"const_bytes": ', '"const_bytes": 1'))


def _offset_out_of_range(path: Path) -> None:
    _rewrite_meta(path, lambda m: m["consts"].update({k: [v[0], v[1] + 10**9] for k, v in m["consts"].items()}))


def _bad_interface(path: Path) -> None:
    _rewrite_meta(path, lambda m: m["info"].update(inputs=[["x", ["float32", [-1], None, None]]]))


def _foreign_interface(path: Path) -> None:
    _rewrite_meta(path, lambda m: m["info"].update(inputs=[["zz", ["float32", [1, 3, 6, 6], None, None]]]))


def _object_evicted(path: Path) -> None:
    for p in (path.parent / "cache" / "cpu").glob("*.json"):
        if not p.name.startswith(programs.PREFIX):
            p.unlink()


@pytest.mark.parametrize("damage", [_truncate_image, _garbage_meta, _flip_meta, _offset_out_of_range,
                                    _bad_interface, _foreign_interface, _object_evicted])
def test_damaged_entries_are_clean_misses(env: Path, damage: Callable[[Path], None]) -> None:
    cold = glow_core.compile(str(env), "cpu")
    damage(env)
    net = glow_core.compile(str(env), "cpu")
    assert not _served(net)
    np.testing.assert_array_equal(net.run({"x": _x()})["y"], cold.run({"x": _x()})["y"])
    assert _served(glow_core.compile(str(env), "cpu"))  # stored again by the miss


def test_glow_compile_lir_is_the_real_lir_on_a_warm_cache(env: Path) -> None:
    from tests.cliutil import glow

    cache_env = {"GLOW_CACHE_DIR": str(env.parent / "cache")}
    assert glow(["compile", str(env), "-b", "cpu"], env=cache_env).returncode == 0  # stores the program
    assert _served(glow_core.compile(str(env), "cpu"))
    warm = glow(["compile", str(env), "-b", "cpu", "--lir"], env=cache_env)
    off = glow(["compile", str(env), "-b", "cpu", "--lir"], env={**cache_env, compilecache.ENV: "0"})
    assert warm.returncode == 0 and off.returncode == 0, warm.stderr
    lir = lambda out: out[out.index("lir main"):]  # noqa: E731  (after the timing line)
    assert "code:" in lir(warm.stdout) and "Conv" in lir(warm.stdout) and lir(warm.stdout) == lir(off.stdout)


def test_a_miss_reads_the_model_file_once(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key hashes the file's bytes; the import parses those bytes, not the file again."""
    reads: list[str] = []
    real_read, real_load = Path.read_bytes, onnx.load

    def read_bytes(self: Path) -> bytes:
        if self == env:
            reads.append("read_bytes")
        return real_read(self)

    def load(f: object, *args: object, **kwargs: object) -> onnx.ModelProto:
        if str(f) == str(env):
            reads.append("onnx.load")
        return real_load(f, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    monkeypatch.setattr(onnx, "load", load)
    net = glow_core.compile(str(env), "cpu")
    assert not _served(net) and reads == ["read_bytes"]
    want = glow_core.compile(_model(), "interpreter").run({"x": _x()})["y"]
    np.testing.assert_allclose(net.run({"x": _x()})["y"], want, rtol=1e-5, atol=1e-6)


def test_the_model_digest_is_remembered_by_the_files_stat_and_an_edit_is_seen(
        env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A settled file's SHA-256 is read back from its memo (no read of the model); rewriting the file with the
    same size and modification time still changes its change time, so the edit is hashed, never missed."""
    import hashlib
    import time

    monkeypatch.setattr(compilecache, "SETTLE_NS", 0)
    first, data = compilecache.file_digest(env)
    assert first == hashlib.sha256(env.read_bytes()).hexdigest() and data is not None
    again, data = compilecache.file_digest(env)
    assert (again, data) == (first, None)  # from the memo: the file was not read
    st = env.stat()
    time.sleep(0.05)  # (past a tick of the file system's clock)
    onnx.save(_model(seed=5), str(env))
    assert env.stat().st_size == st.st_size
    os.utime(env, ns=(st.st_atime_ns, st.st_mtime_ns))
    edited, data = compilecache.file_digest(env)
    assert edited == hashlib.sha256(env.read_bytes()).hexdigest() != first and data is not None
    assert glow_core.compile(str(env), "cpu").run({"x": _x()})["y"].tolist() == \
        glow_core.compile(_model(seed=5), "cpu", options={"cache": False}).run({"x": _x()})["y"].tolist()
    for memo in (env.parent / "cache" / compilecache.DIGESTS_DIR).iterdir():
        memo.write_text("not a digest")  # a damaged memo is hashed again
    assert compilecache.file_digest(env) == (edited, env.read_bytes())


def test_a_file_changed_just_now_is_hashed_every_time(env: Path) -> None:
    """(the default settling time: the file was written by the fixture a moment ago)"""
    assert compilecache.file_digest(env)[1] is not None and compilecache.file_digest(env)[1] is not None
    assert not (env.parent / "cache" / compilecache.DIGESTS_DIR).exists()


def test_glow_cache_lists_and_clears_the_model_digests(env: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from glow_cli import cmd_cache

    monkeypatch.setattr(compilecache, "SETTLE_NS", 0)
    compilecache.file_digest(env)
    memo_dir = env.parent / "cache" / compilecache.DIGESTS_DIR
    assert len(list(memo_dir.iterdir())) == 1
    cmd_cache.info(None)
    out = capsys.readouterr().out
    assert f"model digests (the program cache's): {memo_dir}  1 files, 64 bytes" in out
    assert "other folders" not in out  # (not listed as a folder no backend owns)
    cmd_cache.clear("cpu")
    assert memo_dir.exists()  # a backend's clear leaves the core's folder alone
    cmd_cache.clear(None)
    assert "model digests: removed 1 files, 64 bytes" in capsys.readouterr().out and not memo_dir.exists()
