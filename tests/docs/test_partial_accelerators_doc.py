"""docs/partial-accelerators.md: its Python blocks run in order (the worked example backend, registered and run
behind cpu, with its own assertions), and every command of its ``sh`` blocks runs and succeeds."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from glow_core.plugin_host import registry
from glow_sdk.version import HISTORY, ApiVersion
from tests.cliutil import glow
from tests.docs.mdblocks import DOCS

DOC = DOCS / "partial-accelerators.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_python_blocks_run() -> None:
    blocks = _blocks("python")
    assert len(blocks) >= 2
    namespace: dict[str, object] = {"__name__": "partial_accelerators_doc"}
    if registry().record("toy") is not None:  # registered by an earlier run in this process
        blocks[1] = blocks[1].replace('registry().register_plugin(ToyPlugin(), "toy", "glow-backend-toy", "0.1")', "")
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102  (the doc's own code)
    assert namespace["memory"].resident  # type: ignore[attr-defined]


def _commands() -> list[str]:
    return [ln.strip() for b in _blocks("sh") for ln in b.splitlines() if ln.strip().startswith("glow ")]


def test_the_doc_shows_commands() -> None:
    assert len(_commands()) >= 2


@pytest.mark.parametrize("command", _commands())
def test_doc_command_runs(command: str, tmp_path: Path) -> None:
    r = glow(shlex.split(command)[1:], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    if "--measure" in command:
        assert re.search(r"^measured latency per request: median [0-9.]+ ms", r.stdout, re.M), r.stdout


def test_every_hook_since_2_1_is_in_the_reference_and_the_device_api_in_the_guide() -> None:
    reference = (DOCS / "hooks-reference.md").read_text(encoding="utf-8")
    guide = (DOCS / "vendor-guide.md").read_text(encoding="utf-8")
    chapter = DOC.read_text(encoding="utf-8")
    for feature in HISTORY:
        if feature.since < ApiVersion(2, 1) or feature.name.startswith(("kind ", "glow_core.")):
            continue
        member = feature.name.split(".")[-1]
        assert (f"`{member}" if member.isidentifier() else member) in reference, f"docs/hooks-reference.md does not cover {feature.name} ({feature.since})"
        if feature.since >= ApiVersion(2, 2):
            assert member in guide, f"docs/vendor-guide.md does not cover {feature.name}"
            assert member in chapter, f"docs/partial-accelerators.md does not cover {feature.name}"
    assert "## Partitions as ONNX" in chapter and "(openvino-backend.md)" in chapter
