"""The provisioner: compile each partition of a plan for its backend and load it onto its device.

Each partition becomes a sub-Function (:func:`glow_core.runtime.graphcut.extract`) with its own
inputs and outputs, named after the tensors of the whole function, compiled with
``Backend.compile`` and loaded on its device manager with the memory its compiled form needs.
A remote device (:mod:`glow_core.runtime.cluster`) compiles its partitions itself, where they run:
they are all sent first, so remote compilations proceed in parallel with each other and with the
local ones. On any failure everything loaded so far is unloaded again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from glow_core.plugin_host import get_backend
from glow_core.runtime.device_manager import DeviceManager, compiled_memory
from glow_core.runtime.graphcut import MemoryEstimate
from glow_core.runtime.partitioner import Partition, PartitionPlan
from glow_core.runtime.refusal import PartitionCompiler, options_for
from glow_sdk.backend import CompiledFunction


@dataclass
class ProvisionedPartition:
    """A compiled partition on its device: what the executor needs to run it."""

    partition: Partition
    key: str  # the device manager's key: NETWORK/pN
    device: DeviceManager  # or a remote device's manager (same interface)
    executable: CompiledFunction | None  # None on a remote device (the executable lives in its actor)
    input_names: list[str]
    output_names: list[str]
    memory: MemoryEstimate


def keeps_outputs_remote(plan: PartitionPlan, p: Partition, managers: Mapping[str, Any]) -> bool:
    """Whether every consumer of ``p``'s outputs is a partition on a remote device (none is a model output)."""
    model_outputs = {id(v) for _, v in plan.function.outputs}
    if any(id(v) in model_outputs for v in p.outputs):
        return False
    users = [q for q in plan.partitions if p.id in q.deps]
    return bool(users) and all(hasattr(managers[q.device], "start_load") for q in users)


def host_outputs(plan: PartitionPlan, p: Partition, managers: Mapping[str, Any]) -> frozenset[str]:
    """The outputs of ``p`` that go through the host: model outputs and those read by a partition of another
    backend or on a remote device (a local partition of the same backend reads them on the device, or copies
    them device to device)."""
    model_outputs = {id(v) for _, v in plan.function.outputs}
    others = {id(v) for q in plan.partitions if q.backend != p.backend or hasattr(managers[q.device], "start_load")
              for v in q.inputs}
    return frozenset(v.name for v in p.outputs if id(v) in model_outputs or id(v) in others)


def provision(network: str, plan: PartitionPlan, managers: Mapping[str, Any],
              threads: int | None = None, options: Mapping[str, Any] | None = None,
              compiler: PartitionCompiler | None = None) -> list[ProvisionedPartition]:
    """Compile and load every partition of ``plan``; see the module docstring. ``compiler`` holds the
    partitions compiled while the plan was settled (:func:`glow_core.runtime.refusal.settle`)."""
    compiler = compiler or PartitionCompiler(network, threads, options)
    slots: list[ProvisionedPartition | None] = [None] * len(plan.partitions)
    remote: list[tuple[int, Callable[[], MemoryEstimate], Any]] = []
    try:
        for i, p in enumerate(plan.partitions):
            _, sub = compiler.extract(plan, p)
            manager = managers[p.device]
            key = f"{network}/{p.name}"
            names = ([v.name for v in sub.inputs], [n for n, _ in sub.outputs])
            start = getattr(manager, "start_load", None)
            if start is not None:  # a remote device: compiled in its actor
                keep = keeps_outputs_remote(plan, p, managers)
                remote.append((i, start(key, sub, p.memory, threads, options_for(get_backend(p.backend), options), keep),
                               names))
                slots[i] = ProvisionedPartition(p, key, manager, None, *names, p.memory)
                continue
            sub, exe = compiler.compile(plan, p)
            memory = compiled_memory(exe, p.memory)
            manager.load(key, exe, memory, host_outputs(plan, p, managers))
            slots[i] = ProvisionedPartition(p, key, manager, exe, *names, memory)
        while remote:
            i, finish, _ = remote.pop(0)
            slot = slots[i]
            assert slot is not None
            slot.memory = finish()
    except BaseException:
        for _, finish, _ in remote:  # let the loads already sent end, so that they can be unloaded
            try:
                finish()
            except Exception:  # noqa: BLE001
                pass
        for item in slots:
            if item is not None:
                item.device.unload(item.key)
        compiler.release()
        raise
    compiler.release([s.executable for s in slots if s is not None and s.executable is not None])
    return [s for s in slots if s is not None]
