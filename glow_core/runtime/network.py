"""``glow_core.compile(model, devices="cpu:2")``: a CompiledNetwork whose executable is a host manager."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from glow_core.pipeline import CompiledNetwork, CompileStats
from glow_core.plugin_host import get_backend
from glow_core.runtime.host_manager import HostManager
from glow_core.runtime.partitioner import PartitionPlan
from glow_sdk.backend import CompiledFunction

NETWORK = "main"


class HostExecutable(CompiledFunction):
    """Runs the network through its host manager (one request at a time per caller; callers may be concurrent)."""

    def __init__(self, host: HostManager, plan: PartitionPlan) -> None:
        super().__init__(plan.function)
        self.host = host
        self.plan = plan

    def execute(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.host.run_sync(NETWORK, feeds)

    def close(self) -> None:
        self.host.close()


def compile_on_devices(model: Any, devices: str, input_shapes: Mapping[str, Sequence[int]] | None = None, *,
                       bind: Mapping[str, np.ndarray] | None = None, threads: int | None = None,
                       options: Mapping[str, Any] | None = None,
                       weights: Mapping[str, np.ndarray] | None = None, **host_options: Any) -> CompiledNetwork:
    """Partition ``model`` over ``devices``, compile and load the partitions; ``net.plan`` is the partition plan.
    ``weights``: the initializers of a model stripped of them (``importer.weights.split_weights``), by name."""
    host = HostManager(devices, **host_options)
    stats = CompileStats()
    try:
        plan = host.add_network(NETWORK, model, input_shapes, threads=threads, options=options, bind=bind,
                                stats=stats, weights=weights)
    except BaseException:
        host.close()
        raise
    stats.nodes_by_kind = plan.function.count_by_kind()
    first = plan.partitions[0].backend if plan.partitions else host.devices[0].backend
    net = CompiledNetwork(plan.function, HostExecutable(host, plan), get_backend(first), stats)
    net.plan = plan  # type: ignore[attr-defined]
    return net
