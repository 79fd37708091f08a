"""The import rules of docs/architecture.md hold: `lint-imports` keeps every contract in pyproject.toml.

The contract ([tool.importlinter]) names seven root packages. The example backend
(examples/glow-backend-example) is put on the path for the check rather than
installed, so its backend does not join the plugin registry of the other tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "glow-backend-example"

def lint_imports(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(EXAMPLE), env.get("PYTHONPATH", "")) if p)
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, "--no-cache", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_import_contracts_are_kept() -> None:
    r = lint_imports()
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"lint-imports found imports that break the layer rules (docs/architecture.md):\n{out}"
    assert "Contracts: 3 kept, 0 broken." in out, out
    for contract in ("Layers:", "Backends are independent", "Backends import only"):
        assert contract in out, f"contract {contract!r} was not checked:\n{out}"
