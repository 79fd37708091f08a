"""The provisioner: compile each partition of a plan for its backend and load it onto its device.

Each partition becomes a sub-Function (:func:`glow_core.runtime.graphcut.extract`) with its own
inputs and outputs, named after the tensors of the whole function, compiled with
``Backend.compile`` and loaded on its device manager with the memory its compiled form needs.
On any failure everything loaded so far is unloaded again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from glow_core.api import compile_options
from glow_core.errors import BackendError, GlowError
from glow_core.plugin_host import get_backend
from glow_core.runtime.device_manager import DeviceManager, compiled_memory
from glow_core.runtime.graphcut import MemoryEstimate, extract
from glow_core.runtime.partitioner import Partition, PartitionPlan
from glow_sdk.backend import CompiledFunction


@dataclass
class ProvisionedPartition:
    """A compiled partition on its device: what the executor needs to run it."""

    partition: Partition
    key: str  # the device manager's key: NETWORK/pN
    device: DeviceManager
    executable: CompiledFunction
    input_names: list[str]
    output_names: list[str]
    memory: MemoryEstimate


def provision(network: str, plan: PartitionPlan, managers: Mapping[str, DeviceManager],
              threads: int | None = None, options: Mapping[str, Any] | None = None) -> list[ProvisionedPartition]:
    """Compile and load every partition of ``plan``; see the module docstring."""
    done: list[ProvisionedPartition] = []
    try:
        for p in plan.partitions:
            sub = extract(plan.function, p.nodes, f"{network}.{p.name}")
            backend = get_backend(p.backend)
            try:
                exe = backend.compile(sub, compile_options(threads=threads, extra=options))
            except GlowError:
                raise
            except Exception as e:  # noqa: BLE001  (a backend bug must surface as a clear error)
                raise BackendError(f"backend '{p.backend}' failed to compile partition {p.name} of {network}: "
                                   f"{type(e).__name__}: {e}") from e
            memory = compiled_memory(exe, p.memory)
            manager = managers[p.device]
            key = f"{network}/{p.name}"
            manager.load(key, exe, memory)
            done.append(ProvisionedPartition(p, key, manager, exe, [v.name for v in sub.inputs],
                                             [n for n, _ in sub.outputs], memory))
    except BaseException:
        for item in done:
            item.device.unload(item.key)
        raise
    return done
