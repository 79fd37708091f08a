"""The progress line (glow_core/progress.py): drawn on a terminal for work over 2 s, silent otherwise."""

from __future__ import annotations

import io
import time

import pytest

import glow_core
from glow_core import progress
from tests.cliutil import glow


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The labels of every stage reported while the test runs."""
    labels: list[str] = []
    reporter = progress.Reporter(stream=io.StringIO(), enabled=False)
    real_push = reporter.push

    def push(label: str) -> progress._Entry:
        labels.append(label)
        return real_push(label)

    monkeypatch.setattr(reporter, "push", push)
    monkeypatch.setattr(progress, "_reporter", reporter)
    return labels


def test_the_line_appears_after_the_delay_and_is_cleared(monkeypatch: pytest.MonkeyPatch) -> None:
    term = Terminal()
    monkeypatch.setattr(progress, "_reporter", progress.Reporter(stream=term, delay=0.3))
    monkeypatch.setattr(progress, "TICK", 0.05)
    with progress.stage("compiling model.onnx"):
        with progress.stage("optimize") as entry:
            entry.detail = "pass 3"
            time.sleep(0.6)
    text = term.getvalue()
    assert "\rglow: compiling model.onnx: optimize (pass 3) ... " in text and " s\x1b[K" in text
    assert text.endswith("\r\x1b[K")  # cleared: what the command prints next starts on a clean line


@pytest.mark.parametrize("stream, enabled", [(io.StringIO(), None), (Terminal(), False)])
def test_silent_when_not_a_terminal_or_turned_off(monkeypatch: pytest.MonkeyPatch, stream: io.StringIO,
                                                  enabled: bool | None) -> None:
    monkeypatch.setattr(progress, "_reporter", progress.Reporter(stream=stream, enabled=enabled, delay=0.0))
    monkeypatch.setattr(progress, "TICK", 0.05)
    with progress.stage("work"):
        time.sleep(0.3)
    assert stream.getvalue() == ""


def test_a_short_stage_draws_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    term = Terminal()
    monkeypatch.setattr(progress, "_reporter", progress.Reporter(stream=term))
    with progress.stage("quick"):
        pass
    assert term.getvalue() == ""


def test_the_pipeline_reports_its_stages(recording: list[str]) -> None:
    glow_core.compile("zoo:digits", "interpreter")
    assert recording[0] == "compiling zoo:digits"
    for stage in ("import", "optimize", "lower", "fuse", "interpreter codegen"):
        assert stage in recording, recording


def test_configure_and_the_quiet_option() -> None:
    progress.configure(False)
    try:
        assert not progress._reporter.active()
    finally:
        progress.configure(None)
    r = glow(["run", "zoo:digits", "--backend", "interpreter", "--quiet"])
    assert r.returncode == 0 and r.stderr == "", r.stderr
