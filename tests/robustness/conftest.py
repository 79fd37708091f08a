"""Shared fixtures of the robustness tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fuzz_env_stays_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fuzzer's runners turn the cpu object cache off in their process (``GLOW_CPU_CACHE=0``, see
    glow_tools/fuzz/runners.py); when a test calls them in the pytest process, the setting must not leak
    into later tests (tests/test_cli.py's cache test saw an empty cache). monkeypatch restores it."""
    monkeypatch.setenv("GLOW_CPU_CACHE", "0")
