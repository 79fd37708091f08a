"""Every command in a ``sh`` block of docs/runtime.md runs and succeeds."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.cliutil import glow

DOC = Path(__file__).resolve().parents[2] / "docs" / "runtime.md"


def commands() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", DOC.read_text(), flags=re.S)
    return [ln.strip() for b in blocks for ln in b.splitlines() if ln.strip().startswith("glow ")]


def test_the_doc_shows_commands() -> None:
    assert len(commands()) >= 2


@pytest.mark.parametrize("command", [
    # a command that starts a local Ray cluster runs on the worker that runs tests/runtime/test_ray.py
    pytest.param(c, marks=pytest.mark.xdist_group("ray")) if "ray:" in c else c for c in commands()])
def test_doc_command_runs(command: str, tmp_path: Path) -> None:
    # a `ray:` command starts its own local Ray cluster; its memory monitor (which kills workers when the
    # machine's memory is 95% used, here by other jobs) is off, as in tests/runtime/test_ray.py
    env = {"RAY_memory_monitor_refresh_ms": "0"} if "ray:" in command else None
    r = glow(shlex.split(command)[1:], cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
