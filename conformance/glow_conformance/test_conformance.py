"""One test per conformance case: ``pytest --glow-backend NAME --pyargs glow_conformance``.

Collected only when asked for (``--pyargs glow_conformance``); the cases come
from the pytest plugin (``glow_conformance.pytest_plugin``).
"""

from __future__ import annotations

from typing import Any

import pytest

from glow_conformance.model import Case, Result
from glow_conformance.suite import record, run_case


def test_case(glow_case: Case, glow_suite: Any) -> None:
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
