"""glow-conformance: the suite every glow backend must pass (``glow conformance --backend NAME``).

Cases (see docs/conformance.md):

- ``primitive/KIND/ELEM/FAMILY``: every primitive x every element kind the backend declares x shape
  families (scalars and size-1 dims, broadcasting, odd sizes, large tensors, special values), against the
  reference interpreter under the per-kind tolerances of ``glow_sdk.testing``;
- ``high-level/KIND/ELEM/VARIANT``: every other node kind, lowered onto the backend's primitives (or run
  natively where the backend declares it);
- ``model/NAME``: the light model zoo of the installed onnx package, with seeded random weights;
- ``runtime/...``: repeated and concurrent runs, bad inputs rejected cleanly, buffers, the device;
- ``onnx-node/TEST``: the ONNX backend node tests, when ``--onnx-node-tests DIR`` is given.

Levels: ``core`` (mandatory: the primitives at their mandatory element kinds, models, runtime) and
``full`` (everything). Results: pass, fail, unsupported, waived.

From Python::

    from glow_conformance import run_suite
    report = run_suite("xyz", level="core", report_dir="reports/xyz")
    assert report.conformant, "\\n".join(report.summary_lines())

As a pytest plugin: ``pytest --glow-backend xyz --pyargs glow_conformance`` (one test per case).

The names below are imported on first use (PEP 562): ``glow`` loads
``glow_conformance.cli`` and pytest loads ``glow_conformance.pytest_plugin`` in
every session, and neither should pay for the suite unless it runs.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"SUITE_VERSION": "model", "Case": "model", "CaseRecord": "model", "Level": "model", "Outcome": "model",
         "Result": "model", "Report": "report", "Suite": "suite", "SuiteOptions": "suite", "run_suite": "suite"}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        name = "SUITE_VERSION"
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'glow_conformance' has no attribute {name!r}")
    return getattr(importlib.import_module(f"glow_conformance.{module}"), name)


__all__ = ["SUITE_VERSION", "Case", "CaseRecord", "Level", "Outcome", "Report", "Result", "Suite", "SuiteOptions",
           "run_suite"]
