"""The pytest plugin (entry point ``pytest11``): ``pytest --glow-backend NAME --pyargs glow_conformance``.

Every conformance case becomes one test of ``glow_conformance/test_conformance.py``:
a pass passes, a fail (or a mandatory case that is not supported) fails with
the case's message, an unsupported or waived case is skipped with its reason.
Options: ``--glow-backend``, ``--glow-level``, ``--glow-waivers``,
``--glow-onnx-node-tests``, ``--glow-report-dir`` (also writes the reports;
``report.partial.*`` when pytest deselected cases, e.g. with ``-k``).

pytest loads this module into every session of an environment where
glow-conformance is installed, so it only declares its options. The tests,
their parametrization and the ``glow_suite`` fixture live in the test module
(collected only with ``--pyargs glow_conformance``); the reporting hooks
below do nothing unless ``--glow-backend`` is given. Nothing else of the
suite (nor glow) is imported in a session without ``--glow-backend``.
"""

from __future__ import annotations

from typing import Any

import pytest

#: the session's conformance suite (made by the test module when --glow-backend is given)
SUITE_KEY = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("glow-conformance", "glow conformance suite")
    group.addoption("--glow-backend", default=None, metavar="NAME",
                    help="run the glow conformance cases on this backend (with --pyargs glow_conformance)")
    group.addoption("--glow-level", default="core", choices=("core", "full"), help="conformance level (default core)")
    group.addoption("--glow-waivers", default=None, metavar="FILE", help="conformance waiver file")
    group.addoption("--glow-onnx-node-tests", default=None, metavar="DIR", help="also the ONNX node tests in DIR")
    group.addoption("--glow-report-dir", default=None, metavar="DIR", help="write the conformance reports here")


def session_suite(config: pytest.Config) -> Any:
    """The conformance suite of this session, made on first use (only when ``--glow-backend`` is given)."""
    suite = config.stash.get(SUITE_KEY, None)
    if suite is None:
        from glow_conformance.model import Level
        from glow_conformance.suite import Suite, SuiteOptions

        opts = SuiteOptions(level=Level(config.getoption("--glow-level")),
                            waivers=config.getoption("--glow-waivers"),
                            onnx_node_tests=config.getoption("--glow-onnx-node-tests"))
        suite = Suite(config.getoption("--glow-backend"), opts)
        config.stash[SUITE_KEY] = suite
    return suite


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    suite = session.config.stash.get(SUITE_KEY, None)
    report_dir = session.config.getoption("--glow-report-dir", None)
    if suite is not None and report_dir and suite.report.records:
        suite.report.write(report_dir)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    suite = config.stash.get(SUITE_KEY, None)
    if suite is None or not suite.report.records:
        return
    terminalreporter.section("glow conformance")
    for line in suite.report.summary_lines():
        terminalreporter.write_line(line)
