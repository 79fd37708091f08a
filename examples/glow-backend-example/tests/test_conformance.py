"""The conformance suite on this backend: `pytest` here, or `glow conformance --backend example`.

Needs the backend installed (pip install -e .) and glow-conformance (pip install -e ".[test]").
The same cases also run one test each with `pytest --glow-backend example --pyargs glow_conformance`.
"""

from __future__ import annotations

import pytest

glow_conformance = pytest.importorskip("glow_conformance")


def test_core_conformance() -> None:
    report = glow_conformance.run_suite("example", level="core")
    assert report.conformant, "\n".join(report.summary_lines())
