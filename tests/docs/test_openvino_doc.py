"""docs/openvino-backend.md: its Python blocks run (in a scratch folder, in order), every ``glow`` command of
its ``sh`` blocks runs there and succeeds, and the partition it shows is the one ``glow partition`` prints."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from tests.cliutil import glow
from tests.docs.mdblocks import DOCS, matches

DOC = DOCS / "openvino-backend.md"
#: the command whose output the doc's one plain block shows
SHOWN = "glow partition det.onnx --devices openvino:1,cpu:1"


def _blocks(language: str) -> list[str]:
    """The text of every fenced block whose opening fence names ``language`` ("" for a plain block)."""
    found: list[str] = []
    opened: str | None = None
    lines: list[str] = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            if opened is None:
                opened, lines = line[3:].strip(), []
            else:
                if opened == language:
                    found.append("\n".join(lines) + "\n")
                opened = None
        elif opened is not None:
            lines.append(line)
    return found


def _commands() -> list[str]:
    return [ln.strip() for b in _blocks("sh") for ln in b.splitlines() if ln.strip().startswith("glow ")]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch folder where the doc's Python blocks ran (they write det.onnx)."""
    from glow_core.plugin_host import registry

    if "openvino" not in registry().names():
        pytest.skip("the openvino backend is not installed (pip install -e ./plugins/openvino)")
    d = tmp_path_factory.mktemp("openvino-doc")
    here = Path.cwd()
    os.chdir(d)
    try:
        namespace: dict[str, object] = {"__name__": "openvino_doc"}
        for block in _blocks("python"):
            exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102  (the doc's own code)
    finally:
        os.chdir(here)
    assert (d / "det.onnx").is_file()
    return d


def test_the_doc_shows_the_install_and_commands() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert "python3 -m pip install -c constraints.txt -e ./plugins/openvino" in text
    assert SHOWN in _commands() and len(_commands()) >= 6


@pytest.mark.parametrize("command", _commands())
def test_doc_command_runs(command: str, workdir: Path) -> None:
    r = glow(shlex.split(command)[1:], cwd=workdir, timeout=1200)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert r.stdout.strip()
    if command == SHOWN:
        (shown,) = _blocks("")
        assert matches(shown.splitlines(), r.stdout), r.stdout
