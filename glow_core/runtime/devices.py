"""The device list: ``cpu:2,xyz:1@512MiB`` -> one :class:`DeviceConfig` per device, in priority order.

Syntax (whitespace ignored)::

    LIST    := ENTRY ("," ENTRY)*
    ENTRY   := ["ray:"] BACKEND [":" COUNT] ["@" SIZE] ["/" CPUS]
    SIZE    := NUMBER [UNIT]          UNIT in B, KB, KiB, MB, MiB, GB, GiB (default B)

``ray:`` makes remote devices: each one a Ray actor holding the device's partitions, reserving
``CPUS`` CPUs of the cluster (default 1; ``/CPUS`` is only valid after ``ray:``); their ids are
``ray-cpu0``, ``ray-cpu1``, ... (:mod:`glow_core.runtime.cluster`). Without Ray installed such an
entry is a :class:`DeviceConfigError` saying what to install.

Each device's memory is its backend's ``DeviceInfo.memory_bytes`` (``Backend.create_device()``)
unless ``@SIZE`` overrides it; without ``:COUNT``, the count is ``DeviceInfo.count`` (usually 1). The order of the entries is the priority order of the partitioner:
a node goes to the first backend in the list that runs it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from glow_core.plugin_host import registry
from glow_core.runtime.errors import DeviceConfigError
from glow_sdk.backend import Backend

#: unit -> bytes per unit
UNITS: dict[str, int] = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "k": 2**10, "m": 2**20, "g": 2**30,
}
#: the largest count of one entry (a typo such as cpu:20000 must not start 20000 threads)
MAX_COUNT = 256

_ENTRY = re.compile(r"^(?P<remote>ray:)?(?P<backend>[A-Za-z0-9_.\-]+?)(?::(?P<count>[^@/]*))?(?:@(?P<size>[^/]*))?"
                    r"(?:/(?P<cpus>.*))?$")
#: the largest number of CPUs one remote device may reserve
MAX_CPUS = 1024
#: what to install for ``ray:`` devices
RAY_INSTALL = "pip install 'glow-compiler[ray]'"
_SIZE = re.compile(r"^(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-z]*)$")


@dataclass(frozen=True)
class DeviceConfig:
    """One device: its id (``cpu0``), its backend's name, its memory capacity in bytes.

    ``remote`` is ``"ray"`` for a device that lives in a Ray actor reserving ``cpus`` CPUs, else ``""``.
    """

    id: str
    backend: str
    memory_bytes: int
    index: int  # position in the list (priority order)
    remote: str = ""
    cpus: int = 1


def parse_size(text: str, where: str = "") -> int:
    """``512MiB`` -> 536870912. Raises DeviceConfigError naming ``where`` on bad input."""
    m = _SIZE.match(text.strip())
    unit = m.group("unit").lower() if m else ""
    if m is None or unit not in UNITS:
        raise DeviceConfigError(f"{where}bad memory size {text!r}",
                                hint="write a number with an optional unit: B, KB, MB, GB, KiB, MiB, GiB")
    value = int(float(m.group("num")) * UNITS[unit])
    if value <= 0:
        raise DeviceConfigError(f"{where}memory size {text!r} must be positive")
    return value


def format_bytes(n: int) -> str:
    """``1536`` -> ``1.50 KiB`` (bytes below 1 KiB as is)."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def _check_backend(name: str, entry: str) -> Backend:
    reg = registry()
    if reg.record(name) is None:
        choices = ", ".join(reg.names()) or "(none installed)"
        raise DeviceConfigError(f"device list entry {entry!r}: unknown backend '{name}'; choose one of: {choices}",
                                hint="'glow backends' lists what is installed")
    return reg.get(name)


def ray_available() -> bool:
    """Whether the ``ray`` package can be imported (without importing it)."""
    import importlib.util

    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


def _remote_options(raw: str, remote: str | None, cpus_text: str | None) -> tuple[str, int]:
    """(remote kind, CPUs per device) of one entry; checks that Ray is installed for ``ray:``."""
    if remote is None:
        if cpus_text is not None:
            raise DeviceConfigError(f"device list entry {raw!r}: '/CPUS' is only valid for remote devices",
                                    hint=f"write ray:{raw.split('/')[0]} for Ray devices")
        return "", 1
    if not ray_available():
        raise DeviceConfigError(f"device list entry {raw!r} needs Ray, which is not installed",
                                hint=f"install it with: {RAY_INSTALL}")
    if cpus_text is None:
        return "ray", 1
    if not cpus_text.isdigit() or not 1 <= int(cpus_text) <= MAX_CPUS:
        raise DeviceConfigError(f"device list entry {raw!r}: CPUs {cpus_text!r} is not an integer from 1 to {MAX_CPUS}")
    return "ray", int(cpus_text)


def parse_devices(spec: str) -> list[DeviceConfig]:
    """Parse a device list (see the module docstring). Every problem names the entry at fault."""
    if not isinstance(spec, str) or not spec.strip():
        raise DeviceConfigError("empty device list", hint="write BACKEND[:COUNT][@SIZE],..., e.g. cpu:2,interpreter:1")
    out: list[DeviceConfig] = []
    seen: set[str] = set()
    for raw in spec.replace(" ", "").split(","):
        if not raw:
            raise DeviceConfigError(f"device list {spec!r} has an empty entry",
                                    hint="write BACKEND[:COUNT][@SIZE],..., e.g. cpu:2,interpreter:1")
        m = _ENTRY.match(raw)
        if m is None:
            raise DeviceConfigError(f"device list entry {raw!r} does not parse",
                                    hint="write BACKEND[:COUNT][@SIZE], e.g. cpu:2@512MiB")
        name, count_text, size_text = m.group("backend"), m.group("count"), m.group("size")
        remote, cpus = _remote_options(raw, m.group("remote"), m.group("cpus"))
        prefix = f"{remote}:" if remote else ""
        if prefix + name in seen:
            raise DeviceConfigError(f"device list names backend '{prefix}{name}' twice",
                                    hint=f"write one entry {prefix}{name}:COUNT")
        seen.add(prefix + name)
        backend = _check_backend(name, raw)
        info = backend.create_device()
        count = info.count  # without ":COUNT", as many as the backend says it drives
        if count_text is not None:
            if not count_text.isdigit() or not 1 <= int(count_text) <= MAX_COUNT:
                raise DeviceConfigError(f"device list entry {raw!r}: count {count_text!r} is not an integer "
                                        f"from 1 to {MAX_COUNT}")
            count = int(count_text)
        if size_text is not None:
            memory = parse_size(size_text, f"device list entry {raw!r}: ")
        else:
            memory = int(info.memory_bytes)
        for i in range(count):
            out.append(DeviceConfig(f"{remote}-{name}{i}" if remote else f"{name}{i}", name, memory, len(out),
                                    remote, cpus))
    return out


def as_device_list(devices: str | list[DeviceConfig]) -> list[DeviceConfig]:
    """Accept a device list string or an already parsed list."""
    if isinstance(devices, str):
        return parse_devices(devices)
    if isinstance(devices, list) and devices and all(isinstance(d, DeviceConfig) for d in devices):
        return devices
    raise DeviceConfigError(f"devices must be a string such as 'cpu:2' or a list of DeviceConfig, got {devices!r}")


def backend_order(devices: list[DeviceConfig]) -> list[str]:
    """The backend names in priority order, each once."""
    order: list[str] = []
    for d in devices:
        if d.backend not in order:
            order.append(d.backend)
    return order
