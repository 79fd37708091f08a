"""The import rules of docs/architecture.md hold: `lint-imports` keeps every contract in pyproject.toml.

The contract ([tool.importlinter]) names eight root packages. The example backend
(examples/glow-backend-example) is put on the path for the check rather than
installed, so its backend does not join the plugin registry of the other tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    assert "Contracts: 4 kept, 0 broken." in out, out
    for contract in ("Layers:", "Backends are independent", "Backends import only",
                     "The OpenVINO backend imports only glow_sdk"):
        assert contract in out, f"contract {contract!r} was not checked:\n{out}"


SOURCES = {"glow_core": ROOT / "glow_core", "glow_sdk": ROOT / "glow_sdk", "glow_tools": ROOT / "glow_tools",
           "glow_cli": ROOT / "glow_cli", "glow_conformance": ROOT / "conformance" / "glow_conformance",
           "glow_backend_cpu": ROOT / "plugins" / "cpu" / "glow_backend_cpu",
           "glow_backend_interpreter": ROOT / "plugins" / "interpreter" / "glow_backend_interpreter",
           "glow_backend_example": EXAMPLE / "glow_backend_example",
           "glow_backend_openvino": ROOT / "plugins" / "openvino" / "glow_backend_openvino"}

#: (module file to plant in, the upward import, the words lint-imports must say)
UPWARD = {
    "ir-to-passes": ("glow_core/ir/types.py", "glow_core.passes import basic",
                     ["glow_core.ir is not allowed to import glow_core.passes",
                      "glow_core.ir.types -> glow_core.passes.basic"]),
    "pipeline-to-api": ("glow_core/pipeline/stages.py", "glow_core.api import compile",
                        ["glow_core.pipeline is not allowed to import glow_core.api",
                         "glow_core.pipeline.stages -> glow_core.api"]),
    "runtime-to-driver": ("glow_core/runtime/provisioner.py", "glow_core.driver import compile_model",
                          ["glow_core.runtime is not allowed to import glow_core.driver"]),
    "quantization-to-controlflow": ("glow_core/quantization/profile.py", "glow_core.controlflow import Program",
                                    ["glow_core.quantization is not allowed to import glow_core.controlflow"]),
    "driver-to-session": ("glow_core/driver.py", "glow_core.session import InferenceSession",
                          ["glow_core.driver is not allowed to import glow_core.session"]),
    "api-to-session": ("glow_core/api.py", "glow_core.session import InferenceSession",
                       ["glow_core.api is not allowed to import glow_core.session"]),
    "progress-to-errors": ("glow_core/progress.py", "glow_core.errors import GlowError",
                           ["glow_core.progress is not allowed to import glow_core.errors"]),
    # not upward, but outside the public SDK: the OpenVINO backend imports glow_sdk only
    "openvino-to-core": ("glow_backend_openvino/backend.py", "glow_core.errors import GlowError",
                         ["glow_backend_openvino is not allowed to import glow_core"]),
}


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import shutil

    root = tmp_path_factory.mktemp("contract")
    for name, src in SOURCES.items():
        shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


@pytest.mark.parametrize("case", sorted(UPWARD))
def test_a_function_local_import_that_goes_upward_is_caught(source_copy: Path, case: str) -> None:
    """The contract sees imports inside functions: a copy of the sources with one added is refused."""
    rel, imported, words = UPWARD[case]
    target = source_copy / rel
    original = target.read_text()
    module, name = imported.split(" import ")
    target.write_text(original + f"\n\ndef _late() -> None:\n    from {module} import {name}  # noqa\n")
    try:
        env = dict(os.environ, PYTHONPATH=str(source_copy))
        code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
        r = subprocess.run([sys.executable, "-c", code, "--no-cache"], cwd=source_copy, env=env,
                           capture_output=True, text=True, timeout=600)
    finally:
        target.write_text(original)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    for w in words:
        assert w in out, out


#: the stages of the compile stack: no layer of the contract may hold two of them as mutually importing parts
COMPILE_STACK = ("glow_core.api", "glow_core.pipeline", "glow_core.runtime", "glow_core.controlflow",
                 "glow_core.quantization")


def _layers() -> list[str]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: import-linter depends on tomli there
        import tomli as tomllib  # type: ignore[no-redef]

    contracts = {c["id"]: c for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
                 ["contracts"]}
    return list(contracts["layers"]["layers"])


def merged_stack_layers(layers: list[str]) -> list[str]:
    """The layers that list two or more of :data:`COMPILE_STACK` as parts that may import each other."""
    bad = []
    for layer in layers:
        if ":" not in layer:
            continue
        parts = {p.strip().strip("()") for p in layer.split(":")}
        if len(parts & set(COMPILE_STACK)) > 1:
            bad.append(layer)
    return bad


def test_no_layer_merges_the_stages_of_the_compile_stack() -> None:
    layers = _layers()
    assert merged_stack_layers(layers) == [], "these layers let compile-stack stages import each other"
    order = [next(i for i, layer in enumerate(layers) if m in layer.replace(":", "|").split(" | ")
                  or m == layer.strip()) for m in COMPILE_STACK]
    api, pipeline, *middle = order
    assert all(api < m < pipeline for m in middle), f"api above runtime/controlflow/quantization above pipeline: {order}"


def test_the_merged_layer_check_can_fail() -> None:
    assert merged_stack_layers(["glow_core.api : glow_core.runtime", "glow_core.zoo : glow_core.plugin_host"]) \
        == ["glow_core.api : glow_core.runtime"]


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
    allowed = {"glow_core.errors", "glow_core.budget", "glow_core.ir", "glow_core.lir", "glow_core.reference",
               "glow_core.version"}
    forbidden = set(contracts["plugins-contract-only"]["forbidden_modules"])
    assert core - allowed == forbidden - {"glow_tools", "glow_conformance", "glow_cli"}, (
        "backends may import only glow_sdk and " + ", ".join(sorted(allowed))
        + f": add {sorted(core - allowed - forbidden)} to the forbidden contract's forbidden_modules")
