"""The cpu object cache's bound: LRU eviction by last use, the size limit, oversized entries, safety against
entries vanishing under a reader (another process evicting), and the backend's cache_info()/clear_cache()."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
from glow_backend_cpu import cache
from glow_backend_cpu.codegen import Layout
from onnx import TensorProto, helper

import glow_core
from glow_sdk.backend import DEFAULT_CACHE_MAX_BYTES, cache_max_bytes, parse_size

KIB = 1024


@pytest.fixture()
def cdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GLOW_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("GLOW_CACHE_MAX_BYTES", raising=False)
    monkeypatch.setattr(cache, "_stored_since_scan", -1)
    return tmp_path / "cpu"


def _layout(image_bytes: int = 0) -> Layout:
    return Layout(packed=[(0, b"\x01" * image_bytes)] if image_bytes else [], packed_bytes=image_bytes)


def _put(key: str, size: int, last_use: float | None = None) -> int:
    """Store an entry of about ``size`` bytes (object code) stamped as last used at ``last_use``; its total bytes."""
    assert cache.store(key, [b"\x90" * size], _layout(64))
    d = cache.cache_dir()
    if last_use is not None:
        os.utime(d / f"{key}.json", (last_use, last_use))
    return sum((d / f"{key}{s}").stat().st_size for s in cache.SUFFIXES)


def _keys(d: Path) -> set[str]:
    return {p.stem for p in d.glob("*.json")}


def _bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.iterdir())


def test_eviction_is_least_recently_used_by_access(cdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = time.time()
    sizes = {k: _put(k, 10 * KIB, now - 1000 + i) for i, k in enumerate(("a", "b", "c", "d"))}
    assert _keys(cdir) == {"a", "b", "c", "d"}
    hit = cache.load("a")  # oldest by store time, but used now
    assert hit is not None and hit[1].packed_bytes == 64
    assert os.stat(cdir / "a.json").st_mtime >= now - 1
    limit = sizes["a"] + sizes["d"] + 1
    removed, freed = cache.evict(limit)
    assert (removed, freed) == (2, sizes["b"] + sizes["c"])  # b and c: the least recently used
    assert _keys(cdir) == {"a", "d"} and _bytes(cdir) <= limit
    assert cache.load("b") is None  # an evicted entry is a miss


def test_store_keeps_the_folder_under_the_limit(cdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one = _put("probe", 8 * KIB)
    cache.clear()
    limit = 3 * one + one // 2
    monkeypatch.setenv("GLOW_CACHE_MAX_BYTES", str(limit))
    for i in range(10):
        _put(f"k{i}", 8 * KIB, time.time() - 100 + i)
        assert _bytes(cdir) <= limit, f"after store {i}: {_bytes(cdir)} > {limit}"
    assert _keys(cdir) == {"k7", "k8", "k9"}  # the newest three fit
    ci = cache.info()
    assert (ci.entries, ci.bytes, ci.limit, ci.path) == (3, _bytes(cdir), limit, cdir)


def test_an_entry_larger_than_the_limit_is_not_stored(cdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small = _put("small", 1 * KIB)
    monkeypatch.setenv("GLOW_CACHE_MAX_BYTES", "20K")
    assert not cache.store("huge", [b"\x90" * (21 * KIB)], _layout())
    assert not cache.store("huge2", [b"\x90" * KIB], _layout(20 * KIB))  # the packed image counts too
    assert _keys(cdir) == {"small"} and _bytes(cdir) == small  # nothing written, nothing evicted for it
    assert not list(cdir.glob("*.tmp"))


def test_an_image_written_ahead_completes_with_the_entry(cdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A parallel compile writes the packed image while it waits for its workers: the entry is a miss until
    the rest is stored, a hit with that image after; if the entry then turns out too large, the image goes."""
    lay = Layout(packed=[(0, b"\x05" * 100), (128, b"\x07" * 10)], packed_bytes=192)
    assert cache.store_image("early", lay)
    assert cache.image_path("early").read_bytes() == b"\x05" * 100 + b"\x00" * 28 + b"\x07" * 10 + b"\x00" * 54
    assert cache.load("early") is None  # no metadata yet: incomplete
    assert cache.store("early", [b"\x90" * 300], lay, image_written=True)
    hit = cache.load("early")
    assert hit is not None and hit[0] == [b"\x90" * 300] and hit[2].read_bytes()[:100] == b"\x05" * 100
    monkeypatch.setenv("GLOW_CACHE_MAX_BYTES", "4096")
    assert cache.store_image("big", lay)
    assert not cache.store("big", [b"\x90" * 8 * KIB], lay, image_written=True)
    assert not cache.image_path("big").exists() and cache.load("big") is None
    assert not cache.store_image("nothing", Layout())  # no packed constants: nothing to write


def test_eviction_tolerates_vanishing_files_and_spares_writes_in_progress(cdir: Path) -> None:
    _put("a", KIB, time.time() - 50)
    _put("b", KIB, time.time() - 40)
    (cdir / "b.o").unlink()  # another process removed part of an entry
    (cdir / "young.o").write_bytes(b"x" * 100)  # an entry being written elsewhere (no .json yet)
    (cdir / "young.o12ab.tmp").write_bytes(b"x" * 100)
    old = time.time() - cache.GRACE_SECONDS - 10
    for name in ("stale.o", "stale.bin", "stale.oxyz.tmp"):
        (cdir / name).write_bytes(b"x" * 100)
        os.utime(cdir / name, (old, old))
    assert cache.load("b") is None  # incomplete: a miss, no crash
    cache.evict(0)
    left = {p.name for p in cdir.iterdir()}
    assert left == {"young.o", "young.o12ab.tmp"}  # stale leftovers and every complete entry went


def test_a_reader_survives_eviction_between_load_and_mapping(cdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process evicts the entry after load() returned it: the compile falls back, no crash."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 8], np.linspace(-1, 1, 64).astype(np.float32))
    model = helper.make_model(helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    glow_core.compile(model, "cpu")
    real_load = cache.load

    def load_then_evict(k: str):  # type: ignore[no-untyped-def]
        hit = real_load(k)
        cache.evict(0)
        return hit

    monkeypatch.setattr(cache, "load", load_then_evict)
    net = glow_core.compile(model, "cpu")
    feed = np.ones((4, 8), np.float32)
    np.testing.assert_allclose(net.run({"x": feed})["y"], feed @ np.linspace(-1, 1, 64).astype(np.float32)
                               .reshape(8, 8), rtol=1e-5)
    assert not net.executable.compile_timings["cached"]


def test_backend_cache_info_and_clear_through_the_contract(cdir: Path) -> None:
    from glow_core.plugin_host import get_backend

    be = get_backend("cpu")
    total = _put("a", KIB) + _put("b", 2 * KIB)
    ci = be.cache_info()
    assert (ci.path, ci.entries, ci.bytes, ci.limit) == (cdir, 2, total, DEFAULT_CACHE_MAX_BYTES)
    assert be.cache_dir() == cdir  # the folder the core hands the backend
    assert be.clear_cache() == (2, total)
    assert list(cdir.iterdir()) == []


def test_size_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_size("1073741824") == 1 << 30 and parse_size("512M") == 512 << 20
    assert parse_size("1.5G") == 3 << 29 and parse_size("64KiB") == 64 << 10 and parse_size("0") == 0
    for bad in ("", "abc", "-5", "12Q", "G"):
        with pytest.raises(ValueError, match="is not a size"):
            parse_size(bad)
    monkeypatch.setenv("GLOW_CACHE_MAX_BYTES", "lots")
    assert cache_max_bytes() == DEFAULT_CACHE_MAX_BYTES  # a warning, and the default
    monkeypatch.setenv("GLOW_CACHE_MAX_BYTES", "2G")
    assert cache_max_bytes() == 2 << 30



_HALF_PROGRAM = """
import numpy as np
from onnx import TensorProto, helper
import glow_core
g = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)], "half",
                      [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [5])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [5])])
x = np.array([1e-8, 0.1, 65519.0, -3.3333333333, 1e6])
y = glow_core.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]), "cpu",
                      options={"cache": False}).run({"x": x})["y"]
assert y.tobytes() == x.astype(np.float16).tobytes(), (y, x.astype(np.float16))
"""


def test_the_support_object_is_cached_checked_and_cleared(cdir: Path) -> None:
    """The run-time support (double -> half and friends, support.py) is compiled once per host and kept in
    support/; a fresh process loads it, a damaged copy is compiled again, and clear_cache() removes it."""
    import hashlib
    import subprocess
    import sys

    def run() -> None:
        done = subprocess.run([sys.executable, "-c", _HALF_PROGRAM], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "GLOW_CACHE_DIR": str(cdir.parent)})
        assert done.returncode == 0, done.stderr[-3000:]

    def intact(p: Path) -> bool:
        data = p.read_bytes()
        return hashlib.sha256(data[32:]).digest() == data[:32]

    run()
    [obj] = list((cdir / "support").iterdir())
    assert intact(obj)
    os.utime(obj, (1.0, 1.0))
    run()
    assert obj.stat().st_mtime == 1.0  # read, not written again
    data = bytearray(obj.read_bytes())
    data[-1] ^= 0xFF
    obj.write_bytes(bytes(data))
    run()
    assert intact(obj)
    from glow_core.plugin_host import get_backend

    size = obj.stat().st_size
    assert get_backend("cpu").clear_cache() == (0, size)
    assert not (cdir / "support").exists()
