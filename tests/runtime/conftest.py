"""Registers the runtime's test backends (narrow, flaky, hang, simdev, sleepy) in the process-wide plugin registry."""

from __future__ import annotations

import pytest

from glow_core.plugin_host import registry
from tests.runtime import device_plugin, narrow_plugin


@pytest.fixture(scope="session", autouse=True)
def runtime_test_backends() -> None:
    reg = registry()
    if reg.record("narrow") is None:
        reg.register_plugin(narrow_plugin.plugin, "runtime-test", "glow-backend-runtime-test", "0.1")
    if reg.record("simdev") is None:
        reg.register_plugin(device_plugin.plugin, "runtime-device", "glow-backend-runtime-test", "0.1")
