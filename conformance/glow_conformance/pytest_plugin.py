"""The pytest plugin (entry point ``pytest11``): ``pytest --glow-backend NAME --pyargs glow_conformance``.

Every conformance case becomes one test of ``glow_conformance/test_conformance.py``:
a pass passes, a fail (or a mandatory case that is not supported) fails with
the case's message, an unsupported or waived case is skipped with its reason.
Options: ``--glow-backend``, ``--glow-level``, ``--glow-waivers``,
``--glow-onnx-node-tests``, ``--glow-report-dir`` (also writes the reports).

Without ``--glow-backend`` the plugin does nothing (it is loaded into every
pytest session of an environment where glow-conformance is installed).
"""

from __future__ import annotations

from typing import Any

import pytest

_SUITE = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("glow-conformance", "glow conformance suite")
    group.addoption("--glow-backend", default=None, metavar="NAME",
                    help="run the glow conformance cases on this backend (with --pyargs glow_conformance)")
    group.addoption("--glow-level", default="core", choices=("core", "full"), help="conformance level (default core)")
    group.addoption("--glow-waivers", default=None, metavar="FILE", help="conformance waiver file")
    group.addoption("--glow-onnx-node-tests", default=None, metavar="DIR", help="also the ONNX node tests in DIR")
    group.addoption("--glow-report-dir", default=None, metavar="DIR", help="write the conformance reports here")


def _suite(config: pytest.Config) -> Any:
    suite = config.stash.get(_SUITE, None)
    if suite is None:
        from glow_conformance.model import Level
        from glow_conformance.suite import Suite, SuiteOptions

        opts = SuiteOptions(level=Level(config.getoption("--glow-level")),
                            waivers=config.getoption("--glow-waivers"),
                            onnx_node_tests=config.getoption("--glow-onnx-node-tests"))
        suite = Suite(config.getoption("--glow-backend"), opts)
        config.stash[_SUITE] = suite
    return suite


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "glow_case" not in metafunc.fixturenames:
        return
    if not metafunc.config.getoption("--glow-backend"):
        metafunc.parametrize("glow_case", [pytest.param(None, marks=pytest.mark.skip(
            reason="pass --glow-backend NAME to run the glow conformance cases"))], ids=["no-backend"])
        return
    suite = _suite(metafunc.config)
    metafunc.parametrize("glow_case", suite.cases, ids=[c.id for c in suite.cases])


@pytest.fixture(scope="session")
def glow_suite(pytestconfig: pytest.Config) -> Any:
    """The conformance suite of this session (its cases, context, waivers and report)."""
    return _suite(pytestconfig)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    suite = session.config.stash.get(_SUITE, None)
    report_dir = session.config.getoption("--glow-report-dir", None)
    if suite is not None and report_dir and suite.report.records:
        suite.report.write(report_dir)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    suite = config.stash.get(_SUITE, None)
    if suite is None or not suite.report.records:
        return
    terminalreporter.section("glow conformance")
    for line in suite.report.summary_lines():
        terminalreporter.write_line(line)
