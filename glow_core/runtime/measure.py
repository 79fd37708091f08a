"""Measured latency beside the plan's estimate (``glow partition --measure N``).

The estimate (:func:`glow_core.runtime.cost.estimate_plan`) takes a backend's costs from its cost hook;
for a backend without one it uses :data:`glow_core.runtime.cost.DEFAULT_SECONDS_PER_COST` per unit of
``node_cost``, a rough figure. :func:`measure_plan` first calibrates that figure for each such backend on
this machine (the whole model compiled for it alone, the median of a few runs divided by the model's
cost units), then estimates the plan with it, then runs requests one after the other through a host
manager and takes their median latency.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from glow_core.errors import InputError, UnsupportedError
from glow_core.ir.graph import Function
from glow_core.pipeline import compile_options, guard_backend, prepare_function
from glow_core.plugin_host import get_backend
from glow_core.runtime.cost import CostModel, PlanEstimate, estimate_plan
from glow_core.runtime.devices import DeviceConfig, backend_order
from glow_core.runtime.graphcut import extract, node_cost
from glow_core.runtime.host_manager import HostManager
from glow_core.runtime.partitioner import PartitionPlan
from glow_core.zoo import index_ranges, random_feeds

#: runs before timing (compilation caches, first-touch memory)
WARMUP_RUNS = 2
#: runs of the whole model a backend's calibration takes the median of
CALIBRATION_RUNS = 5


@dataclass(frozen=True)
class Measurement:
    """A plan's measured latency and its estimate with the calibrated figures."""

    #: median seconds per request, run one at a time
    median_s: float
    runs: int
    #: the plan's estimate with the calibrated figures
    estimate: PlanEstimate
    #: the plan measured
    plan: PartitionPlan
    #: backend without a cost hook -> its calibrated seconds per unit of node_cost
    seconds_per_cost: Mapping[str, float] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """Measured over estimated."""
        return self.median_s / self.estimate.total_s if self.estimate.total_s > 0 else float("inf")


def _median_seconds(run: Any, feeds: Mapping[str, np.ndarray], runs: int) -> float:
    for _ in range(WARMUP_RUNS):
        run(feeds)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run(feeds)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def calibrate(function: Function, backend: str, feeds: Mapping[str, np.ndarray],
              runs: int = CALIBRATION_RUNS) -> float | None:
    """Seconds per unit of node_cost of ``backend`` running all of ``function`` (a prepared function), or None
    when it cannot run all of it."""
    be = get_backend(backend)
    units = sum(node_cost(n) for n in function.nodes)
    try:
        alone = prepare_function(extract(function, function.nodes, f"{function.name}.calibration"), be)
        with guard_backend(backend, "to calibrate its cost figure"):
            exe = be.compile(alone, compile_options())
    except UnsupportedError:
        return None
    try:
        seconds = _median_seconds(exe.execute, {p.name: feeds[p.name] for p in alone.inputs}, runs)
    finally:
        exe.close()
    return seconds / units if units else None


def measure_plan(model: Any, devices: Sequence[DeviceConfig], runs: int,
                 input_shapes: Mapping[str, Sequence[int]] | None = None) -> Measurement:
    """Calibrate the backends without a cost hook, estimate the plan with them and run ``runs`` requests."""
    if not isinstance(runs, int) or isinstance(runs, bool) or runs < 1:
        raise InputError(f"the number of requests to measure must be a positive integer, got {runs!r}")
    with HostManager(list(devices), max_in_flight=1) as hm:
        plan = hm.add_network("measure", model, input_shapes)
        types = {p.name: p.type for p in plan.function.inputs}
        feeds = random_feeds(types, ranges=index_ranges(model) if isinstance(model, onnx.ModelProto) else None)
        median = _median_seconds(lambda f: hm.run_sync("measure", f), feeds, runs)
    backends = [get_backend(n) for n in backend_order(list(devices))]
    model_costs = CostModel.of(backends)
    figures: dict[str, float] = {}
    for b in backends:
        if not model_costs.estimates(b.name):
            figure = calibrate(plan.function, b.name, feeds)
            if figure is not None:
                figures[b.name] = figure
    calibrated = CostModel(model_costs.backends, model_costs.devices, figures)
    estimate = estimate_plan(calibrated, plan.function, [(p.backend, p.nodes) for p in plan.partitions])
    return Measurement(median, runs, estimate, plan, figures)


def format_measurement(m: Measurement) -> str:
    """The lines ``glow partition --measure N`` prints after the plan."""
    figures = ", ".join(f"{b} {s * 1e12:.2f} ps per cost unit" for b, s in sorted(m.seconds_per_cost.items()))
    e = m.estimate
    return "\n".join([
        f"calibrated estimate per request: {e.total_s * 1e3:.3f} ms ({e.compute_s * 1e3:.3f} ms compute, "
        f"{e.transfer_s * 1e3:.3f} ms transfers)" + (f"; calibrated on this machine: {figures}" if figures else ""),
        f"measured latency per request: median {m.median_s * 1e3:.3f} ms over {m.runs} request(s) run one at a "
        f"time (measured / estimated: {m.ratio:.2f})",
    ])
