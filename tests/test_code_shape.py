"""Code-shape checks: no function longer than :data:`MAX_FUNCTION_LINES`, no function referenced nowhere.

A function's length counts from its ``def`` line to its last line (decorators
excluded), methods and nested functions included. Dead code is what vulture
(``python -m vulture``) reports as an unused function, method or class at
:data:`MIN_CONFIDENCE`; names it cannot see used are listed, with the reason,
in ``tests/vulture_allowlist.py``. Each check has a test that plants an
offender in a small temporary tree and expects it reported.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 80
#: where no function may be longer (glow_cli: the CLI, glow_core/cli before it moved; checked where present)
LENGTH_CHECKED = ("glow_core", "glow_sdk", "glow_cli", "plugins/cpu/glow_backend_cpu",
                  "plugins/interpreter/glow_backend_interpreter", "plugins/openvino/glow_backend_openvino")
#: what vulture scans for dead code (glow_cli where present: what only the CLI uses is used)
SCANNED = ("glow_core", "glow_sdk", "glow_tools", "glow_cli", "plugins/cpu/glow_backend_cpu",
           "plugins/interpreter/glow_backend_interpreter", "plugins/openvino/glow_backend_openvino")
ALLOWLIST = REPO / "tests" / "vulture_allowlist.py"
#: vulture gives an unused function, method or class 60 % confidence (unreachable code 100 %, unused imports
#: 90 %): the lowest level that reports them is the meaningful one
MIN_CONFIDENCE = 60
#: decorators that register a function in a table (importer rules, lowerings, reference kernels, passes,
#: cpu emitters and element-wise operations, the scaffold's kernels, the ONNX exporters, exit handlers) or
#: mark a pluggy hook: the table or pluggy calls it, so it is used
REGISTRATION_DECORATORS = ("@import_rule", "@lowering", "@KERNELS.register", "@graph_pass", "@lir_pass",
                           "@QUANT_PASSES.register", "@register_emitter", "@op", "@kernel", "@hookimpl",
                           "@hookspec", "@exporter", "@atexit.register")
_DEAD = re.compile(r": unused (function|method|class) ")


def long_functions(roots: Iterable[Path], base: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``path:line name length`` of every function under ``roots`` longer than ``limit`` lines."""
    found: list[str] = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
            for node in sorted(functions, key=lambda n: n.lineno):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    found.append(f"{path.relative_to(base)}:{node.lineno} {node.name} {length}")
    return found


def dead_code(paths: Sequence[str], cwd: Path) -> list[str]:
    """vulture's unused functions, methods and classes under ``paths`` (relative to ``cwd``)."""
    cmd = [sys.executable, "-m", "vulture", *paths, str(ALLOWLIST), "--min-confidence", str(MIN_CONFIDENCE),
           "--ignore-decorators", ",".join(REGISTRATION_DECORATORS)]
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert r.returncode in (0, 3), f"vulture failed ({r.returncode}):\n{r.stdout}{r.stderr}"  # 3: it found some
    return [line for line in r.stdout.splitlines() if _DEAD.search(line)]


def _present(folders: Sequence[str]) -> list[str]:
    return [f for f in folders if (REPO / f).is_dir()]


def test_no_function_is_longer_than_the_limit() -> None:
    found = long_functions([REPO / f for f in _present(LENGTH_CHECKED)], REPO)
    assert not found, (f"functions over {MAX_FUNCTION_LINES} lines (split them along their seams):\n"
                       + "\n".join(found))


def _function(name: str, lines: int, indent: str = "") -> str:
    """The source of a function of exactly ``lines`` lines (its ``def`` line included)."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 2))
    return f"{indent}def {name}():\n{body}{indent}    return 0\n"


def test_the_length_check_reports_a_long_function(tmp_path: Path) -> None:
    limit = MAX_FUNCTION_LINES
    source = ("@staticmethod\n@staticmethod\n" + _function("at_limit", limit)  # decorators do not count
              + "\n\nclass C:\n" + _function("too_long", limit + 1, "    ")  # a method
              + "\n\ndef outer():\n" + _function("nested", limit + 1, "    ") + "    return nested\n"
              + "\n\n" + _function("short", 3))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(source)
    lines = source.splitlines()

    def line_of(text: str) -> int:
        return lines.index(text) + 1

    assert long_functions([tmp_path / "pkg"], tmp_path) == [
        f"pkg/mod.py:{line_of('    def too_long():')} too_long {limit + 1}",
        f"pkg/mod.py:{line_of('def outer():')} outer {limit + 3}",
        f"pkg/mod.py:{line_of('    def nested():')} nested {limit + 1}",
    ]


def test_no_function_is_referenced_nowhere() -> None:
    found = dead_code(_present(SCANNED), REPO)
    assert not found, ("functions referenced nowhere (delete them; if something outside the scanned packages "
                       f"uses one, list it with the reason in {ALLOWLIST.relative_to(REPO)}):\n" + "\n".join(found))


@pytest.mark.parametrize("planted", ["def dead_helper() -> int:\n    return 2\n",
                                     "class DeadClass:\n    pass\n",
                                     "class Used:\n    def dead_method(self) -> int:\n        return 3\n"])
def test_the_dead_code_check_reports_an_unused_function(tmp_path: Path, planted: str) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "lib.py").write_text(
        "import os\n\n"  # an unused import: vulture reports it, the check does not
        "TABLE = {}\n\n\n"
        "def import_rule(name):\n    return lambda fn: TABLE.setdefault(name, fn)\n\n\n"
        '@import_rule("Relu")\ndef _relu(ctx):\n    return ctx\n\n\n'  # registered: used through its table
        "def helper() -> int:\n    return 1\n\n\n" + planted)
    (pkg / "main.py").write_text("from pkg.lib import TABLE, helper\n\nprint(helper(), TABLE)\n"
                                 + ("print(Used())\n" if "class Used" in planted else ""))
    found = dead_code(["pkg"], tmp_path)
    name = re.search(r"(?:def|class) (dead_\w+|Dead\w+)", planted).group(1)  # type: ignore[union-attr]
    assert len(found) == 1 and f"'{name}'" in found[0] and found[0].startswith("pkg/lib.py:"), found
