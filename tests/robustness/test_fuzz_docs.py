"""Every ``python scripts/fuzz_campaign.py`` command in a ``sh`` block of docs/robustness.md runs,
in order, from an empty folder, and succeeds."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "robustness.md"
SCRIPT = "scripts/fuzz_campaign.py"

pytestmark = pytest.mark.robustness


def commands() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    return [ln.strip() for b in blocks for ln in b.splitlines() if ln.strip().startswith(f"python {SCRIPT}")]


def test_the_doc_runs_a_campaign_then_summarizes_writes_and_replays(tmp_path: Path) -> None:
    shown = commands()
    assert [next(a for a in shlex.split(c)[2:] if a.startswith("--")) for c in shown] == [
        "--out", "--summary", "--out", "--replay"]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    for command in shown:
        argv = shlex.split(command)
        r = subprocess.run([sys.executable, str(ROOT / SCRIPT), *argv[2:]], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{command}\n{r.stdout}\n{r.stderr}"
        assert r.stdout.strip(), command
    assert (tmp_path / "fuzz-out" / "summary.md").is_file()
    table = (tmp_path / "fuzz-out" / "summary.md").read_text()
    assert "| interpreter | 10 |" in table and "| cpu | 10 |" in table
    assert (tmp_path / "fuzz-out" / "cases" / "000007" / "model" / "model.onnx").is_file()
