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


def test_a_function_local_import_that_breaks_a_layer_is_caught(tmp_path: Path) -> None:
    """The contract sees imports inside functions: a copy of the sources with one added is refused."""
    import shutil

    sources = {"glow_core": ROOT / "glow_core", "glow_sdk": ROOT / "glow_sdk", "glow_tools": ROOT / "glow_tools",
               "glow_conformance": ROOT / "conformance" / "glow_conformance",
               "glow_backend_cpu": ROOT / "plugins" / "cpu" / "glow_backend_cpu",
               "glow_backend_interpreter": ROOT / "plugins" / "interpreter" / "glow_backend_interpreter",
               "glow_backend_example": EXAMPLE / "glow_backend_example"}
    for name, src in sources.items():
        shutil.copytree(src, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    types_py = tmp_path / "glow_core" / "ir" / "types.py"
    types_py.write_text(types_py.read_text() + "\n\ndef _late() -> None:\n    from glow_core.passes import basic  # noqa\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    r = subprocess.run([sys.executable, "-c", code, "--no-cache"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "glow_core.ir is not allowed to import glow_core.passes" in out, out
    assert "glow_core.ir.types -> glow_core.passes.basic" in out, out


def test_every_core_module_is_placed_in_the_contract() -> None:
    """A new top-level module of glow_core must join a layer, and backends are kept from it unless allowed."""
    import pkgutil

    import glow_core

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: import-linter depends on tomli there
        import tomli as tomllib  # type: ignore[no-redef]

    contracts = {c["id"]: c for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
                 ["contracts"]}
    core = {f"glow_core.{m.name}" for m in pkgutil.iter_modules(glow_core.__path__)} - {"glow_core.__main__"}
    layered = {part.strip().strip("()") for layer in contracts["layers"]["layers"]
               for part in layer.replace(":", "|").split("|")}
    assert core <= layered, f"place these modules in the layers contract (pyproject.toml): {sorted(core - layered)}"
    allowed = {"glow_core.errors", "glow_core.budget", "glow_core.ir", "glow_core.lir", "glow_core.reference"}
    forbidden = set(contracts["plugins-contract-only"]["forbidden_modules"])
    assert core - allowed == forbidden - {"glow_tools", "glow_conformance"}, (
        "backends may import only glow_sdk and " + ", ".join(sorted(allowed))
        + f": add {sorted(core - allowed - forbidden)} to the forbidden contract's forbidden_modules")
