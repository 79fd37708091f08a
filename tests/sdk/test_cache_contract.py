"""The cache part of the backend contract: the core owns the root, each backend gets ROOT/NAME, and the default
cache_info()/clear_cache() measure and empty that folder (what ``glow cache`` calls)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from glow_core.ir.graph import Function
from glow_core.ir.types import ElemKind
from glow_sdk.backend import Backend, CacheInfo, CompiledFunction, CompileOptions, cache_root


class _Plain(Backend):
    name = "plain"

    def supported_kinds(self) -> Mapping[str, frozenset[ElemKind]]:
        return {}

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        raise NotImplementedError


def test_default_cache_folder_info_and_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOW_CACHE_DIR", str(tmp_path))
    be = _Plain()
    assert cache_root() == tmp_path and be.cache_dir() == tmp_path / "plain"
    assert be.cache_info() == CacheInfo(tmp_path / "plain", 0, 0, None)  # no folder yet
    (tmp_path / "plain" / "sub").mkdir(parents=True)
    (tmp_path / "plain" / "a").write_bytes(b"x" * 10)
    (tmp_path / "plain" / "sub" / "b").write_bytes(b"y" * 5)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "c").write_bytes(b"z")
    assert be.cache_info() == CacheInfo(tmp_path / "plain", 2, 15, None)
    assert be.clear_cache() == (2, 15)
    assert list((tmp_path / "plain").iterdir()) == [] and (tmp_path / "other" / "c").exists()


def test_backend_names_never_reach_outside_the_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOW_CACHE_DIR", str(tmp_path))
    be = _Plain()
    be.name = "../evil/x"
    assert be.cache_dir() == tmp_path / "_evil_x"
    monkeypatch.delenv("GLOW_CACHE_DIR")
    assert cache_root() == Path.home() / ".cache" / "glow"
