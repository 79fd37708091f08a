"""Fixtures shared by the control-flow tests."""

from __future__ import annotations

import pytest

from glow_core.controlflow import program


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one per backend compile the control-flow executor asks for."""
    calls: list[int] = []
    real = program.compile_function

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(program, "compile_function", counting)
    return calls
