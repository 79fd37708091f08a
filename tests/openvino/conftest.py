"""The OpenVINO backend's tests need the plugin (plugins/openvino, which brings openvino) installed."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def openvino_backend() -> None:
    from glow_core.plugin_host import registry

    if "openvino" not in registry().names():
        pytest.skip("the openvino backend is not installed (pip install -e ./plugins/openvino)")
