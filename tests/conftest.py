"""Shared options and fixtures of the test suite.

Options (also settable through the environment):

- ``--node-test-backends=interpreter,cpu`` (``GLOW_NODE_TEST_BACKENDS``): the
  backends the ONNX node-test ratchet runs on. A backend takes part only when it
  is installed and has ``tests/expectations/<backend>.txt``.
- ``--node-test-timeout=SECONDS`` (``GLOW_NODE_TEST_TIMEOUT``): per-case limit.

The node-test folder is ``$GLOW_ONNX_NODE_TESTS`` or ``../shared/onnx-node-tests``
beside the checkout (see ``glow_tools.nodetests.default_root``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from glow_tools.nodetests import DEFAULT_TIMEOUT, Summary

if TYPE_CHECKING:
    from tests.packaging.wheelhouse import Wheelhouse

TESTS_DIR = Path(__file__).resolve().parent
EXPECTATIONS_DIR = TESTS_DIR / "expectations"
NODE_SUMMARY = pytest.StashKey[Summary]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("glow")
    group.addoption(
        "--node-test-backends",
        default=os.environ.get("GLOW_NODE_TEST_BACKENDS", "interpreter,interpreter-primitives,cpu"),
        help="comma-separated backends for the ONNX node-test ratchet (env GLOW_NODE_TEST_BACKENDS; "
        "default: interpreter)",
    )
    group.addoption(
        "--node-test-timeout",
        type=float,
        default=float(os.environ.get("GLOW_NODE_TEST_TIMEOUT", DEFAULT_TIMEOUT)),
        help=f"seconds one node-test case may take (default {DEFAULT_TIMEOUT:g})",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[NODE_SUMMARY] = Summary()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    summary = config.stash.get(NODE_SUMMARY, None)
    if summary is None or not summary.results:
        return
    terminalreporter.section("ONNX node tests")
    for line in summary.lines():
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def node_test_summary(pytestconfig: pytest.Config) -> Summary:
    """Where node-test results are recorded for the closing summary."""
    return pytestconfig.stash[NODE_SUMMARY]


@pytest.fixture(scope="session")
def node_test_timeout(pytestconfig: pytest.Config) -> float:
    return float(pytestconfig.getoption("--node-test-timeout"))


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Wheelhouse:
    """The wheels of every distribution, built once per session (``tests/packaging/wheelhouse.py``): the
    packaging tests install them, the executed vendor guide offers them to pip. Their tests share the xdist
    group "wheels", so one worker builds them."""
    from tests.packaging.wheelhouse import Wheelhouse, build_artefacts, build_wheels

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PIP_"))}
    before = build_artefacts()
    return Wheelhouse(build_wheels(tmp_path_factory.mktemp("wheelhouse"), env), before)
