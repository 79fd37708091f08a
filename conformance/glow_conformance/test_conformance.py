"""One test per conformance case: ``pytest --glow-backend NAME --pyargs glow_conformance``.

Collected only when asked for (``--pyargs glow_conformance``). The cases are
parametrized here (not by the globally loaded ``glow_conformance.pytest_plugin``,
which only declares the options), so no other pytest session is touched.
"""

from __future__ import annotations

from typing import Any

import pytest

from glow_conformance.pytest_plugin import session_suite


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "glow_case" not in metafunc.fixturenames:
        return
    if not metafunc.config.getoption("--glow-backend", None):
        metafunc.parametrize("glow_case", [pytest.param(None, marks=pytest.mark.skip(
            reason="pass --glow-backend NAME to run the glow conformance cases"))], ids=["no-backend"])
        return
    suite = session_suite(metafunc.config)
    metafunc.parametrize("glow_case", suite.cases, ids=[c.id for c in suite.cases])


@pytest.fixture(scope="session")
def glow_suite(pytestconfig: pytest.Config) -> Any:
    """The conformance suite of this session (its cases, context, waivers and report)."""
    return session_suite(pytestconfig)


def test_case(glow_case: Any, glow_suite: Any) -> None:
    from glow_conformance.model import Result
    from glow_conformance.suite import record, run_case

    out, seconds = run_case(glow_case, glow_suite.ctx)
    rec = record(glow_case, out, seconds, glow_suite.waivers)
    glow_suite.report.records.append(rec)
    if rec.blocks_conformance:
        label = "mandatory case " if rec.mandatory else ""
        pytest.fail(f"{label}{rec.result.value}: {rec.message}", pytrace=False)
    if rec.result is Result.WAIVED:
        pytest.skip(f"waived ({rec.waiver}): {rec.message}")
    if rec.result is Result.UNSUPPORTED:
        pytest.skip(f"unsupported: {rec.message}")
