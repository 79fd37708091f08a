"""The ONNX node-test ratchet: every case of the node-test folder, per backend.

A case fails this test when it is not listed in ``tests/expectations/<backend>.txt``
and does not pass, when it is listed and passes (remove it: the count ratchets
up), or when it is listed and ends in anything but a clear "unsupported" error.
Wrong answers and errors can never be listed. Regenerate a file with
``python -m glow_core.nodetests --backend NAME --write-expectations tests/expectations/NAME.txt``.

Backends: ``--node-test-backends`` / ``GLOW_NODE_TEST_BACKENDS`` (default
``interpreter``); a backend runs only when it is installed and has an
expectations file. The folder is ``$GLOW_ONNX_NODE_TESTS`` or
``../shared/onnx-node-tests``; when it is absent the whole set is one skip.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from glow_core.nodetests import (
    ENV_ROOT,
    ExpectationsError,
    Summary,
    default_root,
    list_cases,
    load_expectations,
    ratchet_failure,
    regenerate_command,
    run_case,
)

pytestmark = pytest.mark.nodetests

EXPECTATIONS_DIR = Path(__file__).resolve().parent / "expectations"

#: backend -> listed case -> reason (filled at collection)
_EXPECTED: dict[str, dict[str, str]] = {}


def _expectations_path(backend: str) -> Path:
    return EXPECTATIONS_DIR / f"{backend}.txt"


def _installed_backends() -> set[str]:
    from glow_core.plugin_host import registry

    return set(registry().names())


def _usable_backends(requested: list[str]) -> tuple[list[str], list[Any]]:
    """(backends to run, skip params for the others)."""
    installed = _installed_backends()
    usable: list[str] = []
    skips: list[Any] = []
    for b in requested:
        path = _expectations_path(b)
        reason = ""
        if b not in installed:
            reason = f"backend '{b}' is not installed (installed: {', '.join(sorted(installed)) or 'none'})"
        elif not path.is_file():
            reason = f"backend '{b}' has no expectations file {path}; create it with: {regenerate_command(b, path)}"
        if reason:
            skips.append(pytest.param(None, id=f"{b}-unavailable", marks=pytest.mark.skip(reason=reason)))
            continue
        try:
            _EXPECTED[b] = load_expectations(path)
        except ExpectationsError as e:
            skips.append(pytest.param(("invalid", b, str(e)), id=f"{b}-invalid-expectations"))
            continue
        usable.append(b)
    return usable, skips


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "node_case" not in metafunc.fixturenames and "node_backend" not in metafunc.fixturenames:
        return
    requested = [b.strip() for b in str(metafunc.config.getoption("--node-test-backends")).split(",") if b.strip()]
    root = default_root()
    if root is None or not root.is_dir():
        where = f"{root}" if root is not None else "../shared/onnx-node-tests beside the checkout"
        skip = pytest.param(None, id="no-node-tests", marks=pytest.mark.skip(
            reason=f"ONNX node-test folder not found ({where}); set {ENV_ROOT}=DIR to run the ratchet"))
        metafunc.parametrize("node_case" if "node_case" in metafunc.fixturenames else "node_backend", [skip])
        return
    backends, skips = _usable_backends(requested)
    if "node_backend" in metafunc.fixturenames:
        metafunc.parametrize("node_backend", [pytest.param((b, root), id=b) for b in backends] + skips)
        return
    cases = list_cases(root)
    # case-major order: a case's backends run back to back and share its parsed protobufs
    params = [pytest.param((b, c), id=f"{b}-{c.name}") for c in cases for b in backends]
    metafunc.parametrize("node_case", params + skips)


def test_node(node_case: Any, node_test_summary: Summary, node_test_timeout: float) -> None:
    if node_case[0] == "invalid":
        pytest.fail(f"{node_case[2]}", pytrace=False)
    backend, case = node_case
    source = f"tests/expectations/{backend}.txt"
    result = run_case(case, backend, timeout=node_test_timeout)
    failure = ratchet_failure(result, _EXPECTED[backend].get(case.name), source)
    node_test_summary.add(result, failure)
    if failure:
        pytest.fail(failure, pytrace=False)


def test_expectations_name_real_cases(node_backend: Any) -> None:
    """Every listed name is a case of the folder (a renamed or removed case leaves a stale line)."""
    if node_backend[0] == "invalid":
        pytest.fail(node_backend[2], pytrace=False)
    backend, root = node_backend
    names = {c.name for c in list_cases(root)}
    unknown = sorted(set(_EXPECTED[backend]) - names)
    assert not unknown, (
        f"{_expectations_path(backend)} lists {len(unknown)} case(s) that do not exist in {root}: "
        + ", ".join(unknown[:10]) + f"; regenerate with: {regenerate_command(backend, _expectations_path(backend))}"
    )
