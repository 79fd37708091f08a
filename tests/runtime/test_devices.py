"""The device list syntax, its errors, and the device manager's memory accounting."""

from __future__ import annotations

import numpy as np
import pytest

from glow_core.plugin_host import get_backend
from glow_core.runtime import DeviceConfigError, DeviceMemoryError, parse_devices
from glow_core.runtime.device_manager import DeviceManager
from glow_core.runtime.devices import DeviceConfig, parse_size
from glow_core.runtime.graphcut import MemoryEstimate


def test_counts_order_and_memory_from_device_info() -> None:
    devs = parse_devices("cpu:2, interpreter")
    assert [(d.id, d.backend, d.index) for d in devs] == [("cpu0", "cpu", 0), ("cpu1", "cpu", 1),
                                                          ("interpreter0", "interpreter", 2)]
    assert devs[0].memory_bytes == get_backend("cpu").create_device().memory_bytes
    assert devs[2].memory_bytes == get_backend("interpreter").create_device().memory_bytes


def test_memory_override_units() -> None:
    devs = parse_devices("cpu:2@512MiB,interpreter:1@1.5GB")
    assert [d.memory_bytes for d in devs] == [512 << 20, 512 << 20, 1_500_000_000]
    assert parse_size("4096") == 4096 and parse_size("2KiB") == 2048 and parse_size("1G") == 1 << 30


@pytest.mark.parametrize(("spec", "fragment"), [
    ("", "empty device list"),
    ("cpu,,interpreter", "empty entry"),
    ("cpu:0", "count '0'"),
    ("cpu:two", "count 'two'"),
    ("cpu:1000", "from 1 to 256"),
    ("cpu@12XB", "bad memory size '12XB'"),
    ("cpu@0", "must be positive"),
    ("cpu:1,cpu:2", "names backend 'cpu' twice"),
    ("tpu:2", "unknown backend 'tpu'; choose one of: "),
])
def test_bad_lists_are_clear_errors(spec: str, fragment: str) -> None:
    with pytest.raises(DeviceConfigError) as e:
        parse_devices(spec)
    assert fragment in str(e.value)
    if "unknown backend" in fragment:
        assert "cpu" in str(e.value) and "interpreter" in str(e.value)


class _Exe:
    def execute(self, feeds: dict) -> dict:
        return {"y": feeds["x"] * 2}


def test_device_manager_accounts_and_refuses_what_does_not_fit() -> None:
    dm = DeviceManager(DeviceConfig("cpu0", "cpu", 1000, 0))
    try:
        dm.load("a/p0", _Exe(), MemoryEstimate(300, 200, 100))  # type: ignore[arg-type]
        assert dm.used_bytes == 600 and dm.free_bytes == 400
        with pytest.raises(DeviceMemoryError) as e:
            dm.load("b/p0", _Exe(), MemoryEstimate(300, 100, 50))  # type: ignore[arg-type]
        msg = str(e.value)
        assert "device cpu0" in msg and "b/p0" in msg and "450 B" in msg and "400 B free of 1000 B" in msg
        dm.unload("a/p0")
        assert dm.used_bytes == 0
        dm.load("b/p0", _Exe(), MemoryEstimate(300, 100, 50))  # type: ignore[arg-type]
        got: list = []
        import threading
        ev = threading.Event()
        dm.submit("b/p0", {"x": np.ones(2)}, lambda out, err: (got.append((out, err)), ev.set()))
        assert ev.wait(10)
        assert got[0][1] is None and np.array_equal(got[0][0]["y"], [2.0, 2.0])
    finally:
        dm.stop()
