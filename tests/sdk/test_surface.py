"""The IR and LIR types a backend consumes are covered by the SDK API version.

``glow_sdk/surface.json`` records the public surface of ``glow_core.ir``,
``glow_core.lir`` and ``glow_core.reference`` (and the node-kind table) for the
current ``SDK_API_VERSION``; any drift fails here until the version is bumped
and the record re-made.
"""

from __future__ import annotations

import json

from glow_sdk.version import SDK_API_VERSION, SUPPORTED_SDK_API_VERSIONS
from glow_tools import surface


def test_the_sdk_surface_matches_its_record() -> None:
    recorded = json.loads(surface.RECORD.read_text())
    live = surface.surface()
    diff = surface.differences(recorded, live)
    assert not diff, (f"the SDK surface changed: bump SDK_API_VERSION and re-record with {surface.RECORD_COMMAND}\n"
                      + "\n".join(diff[:40]))
    assert recorded["sdk_api_version"] == SDK_API_VERSION in SUPPORTED_SDK_API_VERSIONS


def test_the_record_covers_what_backends_read() -> None:
    live = surface.surface()
    mods = live["modules"]
    assert {"glow_core.ir.types", "glow_core.ir.graph", "glow_core.ir.kinds", "glow_core.lir.ir",
            "glow_core.lir.instructions", "glow_core.lir.memory", "glow_core.reference"} <= set(mods)
    assert "LIRFunction" in mods["glow_core.lir.ir"] and "Function" in mods["glow_core.ir.graph"]
    assert "run_kernel" in mods["glow_core.reference"]
    assert live["kinds"]["Conv"]["inputs"] == ["Input", "Filter", "Bias?"]
    assert "Add" in live["reference_kernels"]


def test_a_drift_is_named_with_its_path() -> None:
    live = surface.surface()
    changed = json.loads(json.dumps(live))
    changed["modules"]["glow_core.lir.ir"]["LIRFunction"]["members"]["extra"] = "method(self) -> 'None'"
    del changed["reference_kernels"][0]
    diff = surface.differences(changed, live)
    assert "modules.glow_core.lir.ir.LIRFunction.members.extra: removed" in diff
    assert any(d.startswith("reference_kernels:") for d in diff)


def test_the_documented_check_command_runs() -> None:
    """``python -m glow_tools.surface`` (docs/hooks-reference.md) compares without writing, and passes here."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "glow_tools.surface"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "the SDK surface matches its record" in r.stdout, r.stdout + r.stderr
