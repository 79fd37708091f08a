"""docs/control-flow.md: its Python example runs and prints what the page says; its commands run."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
from pathlib import Path

import pytest

from tests.cliutil import glow

DOC = Path(__file__).resolve().parents[2] / "docs" / "control-flow.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), flags=re.S)


def test_example_runs_and_prints_what_the_page_shows(tmp_path: Path) -> None:
    (code,) = _blocks("python")
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, str(DOC), "exec"), {})  # noqa: S102  (the documentation's own example)
    finally:
        os.chdir(cwd)
    shown = [c.split("# ", 1)[1] for c in code.splitlines() if c.startswith("print(")]
    assert out.getvalue().split("\n")[:2] == shown
    assert (tmp_path / "gate.onnx").is_file()


@pytest.mark.parametrize("command", [ln for b in _blocks("sh") for ln in b.splitlines() if ln.startswith("glow ")])
def test_doc_command_runs(command: str, tmp_path: Path) -> None:
    test_example_runs_and_prints_what_the_page_shows(tmp_path)
    r = glow(shlex.split(command)[1:], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "output y: float32[4]" in r.stdout
