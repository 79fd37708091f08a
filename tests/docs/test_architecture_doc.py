"""docs/architecture.md draws the layers as they are: its "Dependency rules" block is the `layers`
contract of pyproject.toml, line for line."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _contract_layers() -> list[str]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return [" ".join(c.split()) for c in next(c for c in contracts if c["id"] == "layers")["layers"]]


def doc_layers(text: str) -> list[str]:
    """The layer column of the first code block after '## Dependency rules' (continuation lines skipped)."""
    section = text[text.index("## Dependency rules"):]
    block = re.search(r"```\n(.*?)```", section, re.S)
    assert block, "no code block under '## Dependency rules'"
    layers = []
    for line in block.group(1).splitlines():
        if not line.strip() or line.startswith(" "):
            continue
        layers.append(" ".join(re.split(r"\s{2,}", line.strip())[0].split()))
    return layers


def test_the_doc_draws_the_contract_layers() -> None:
    assert doc_layers((ROOT / "docs" / "architecture.md").read_text()) == _contract_layers()


def test_the_comparison_can_fail() -> None:
    text = "## Dependency rules\n\n```\nglow_core.api : glow_core.runtime   merged\nglow_core.ir\n```\n"
    assert doc_layers(text) == ["glow_core.api : glow_core.runtime", "glow_core.ir"] != _contract_layers()
