"""The runtime: one network over several devices, possibly of several backends (docs/runtime.md).

Components, bottom up: the device list (:mod:`.devices`), one device manager per device
(:mod:`.device_manager`), the partitioner (:mod:`.partitioner`), the provisioner
(:mod:`.provisioner`), the executor (:mod:`.executor`) and the host manager (:mod:`.host_manager`).
The runtime sits above ``glow_core.pipeline`` (it compiles partitions through it) and reaches backends by name through ``glow_core.plugin_host``.
"""

from __future__ import annotations

from glow_core.runtime.devices import DeviceConfig, format_bytes, parse_devices
from glow_core.runtime.errors import (
    DeviceConfigError,
    DeviceExecutionError,
    DeviceMemoryError,
    NetworkError,
    PartitionError,
    QueueFullError,
    RequestTimeoutError,
)
from glow_core.runtime.host_manager import HostManager, Stats, plan_network, plan_replicas
from glow_core.runtime.partitioner import Partition, PartitionPlan
from glow_core.runtime.report import format_plan, plan_dot

__all__ = [
    "DeviceConfig", "DeviceConfigError", "DeviceExecutionError", "DeviceMemoryError", "HostManager", "NetworkError",
    "Partition", "PartitionError", "PartitionPlan", "QueueFullError", "RequestTimeoutError", "Stats",
    "format_bytes", "format_plan", "parse_devices", "plan_dot", "plan_network", "plan_replicas",
]
