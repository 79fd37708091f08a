"""Fixtures of the cpu backend tests: skip when the backend is not installed; a private object cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


def _cpu_available() -> bool:
    try:
        from glow_core.plugin_host import registry

        return "cpu" in registry().names()
    except Exception:  # noqa: BLE001
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _cpu_available():
        return
    skip = pytest.mark.skip(reason="the cpu backend (glow-backend-cpu) is not installed")
    for item in items:
        if "tests/cpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Compiled objects go to a temporary cache, not the user's ~/.cache/glow."""
    mp = pytest.MonkeyPatch()
    d = tmp_path_factory.mktemp("glow-cache")
    mp.setenv("GLOW_CACHE_DIR", str(d))
    yield d
    mp.undo()
