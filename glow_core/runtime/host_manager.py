"""The host manager: the runtime's front door (networks, requests, the bounded queue, statistics).

::

    hm = HostManager(devices="cpu:2")
    hm.add_network("resnet", "zoo:resnet50")
    future = hm.run("resnet", {"data_0": x})        # concurrent.futures.Future
    outputs = hm.run_sync("resnet", {"data_0": x})
    hm.remove_network("resnet"); hm.close()

At most ``max_in_flight`` requests run at once and at most ``max_queued`` wait; a request beyond
both is rejected at once with :class:`QueueFullError`. A queued request can be cancelled
(``future.cancel()``). ``timeout`` (seconds, per request, counted from when it starts running) turns
a request that does not finish into :class:`RequestTimeoutError`, naming the devices still busy with it.

``add_network(..., replicas=N)`` loads N copies of the network, each on its own share of the devices
(device ``i`` serves replica ``i % N``), and sends each request to the replica with the fewest
requests in flight among those whose devices are all available. Devices of the list written
``ray:BACKEND...`` live in Ray actors (:mod:`glow_core.runtime.cluster`, ``cluster=``).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from glow_core.errors import InputError
from glow_core.ir.graph import Function
from glow_core.pipeline import CompiledNetwork, CompileStats, import_function, prepare_function
from glow_core.plugin_host import get_backend
from glow_core.runtime.assign import Claims, collect_claims, high_level_origins, lower_unclaimed
from glow_core.runtime.cluster import Cluster, RayDeviceManager
from glow_core.runtime.device_manager import DeviceManager
from glow_core.runtime.devices import DeviceConfig, as_device_list, backend_order
from glow_core.runtime.errors import NetworkError, QueueFullError, RequestTimeoutError
from glow_core.runtime.executor import Executor, Request
from glow_core.runtime.graphcut import UnionBackend
from glow_core.runtime.partitioner import PartitionPlan, partition, partition_user
from glow_core.runtime.provisioner import ProvisionedPartition, provision
from glow_core.runtime.refusal import PartitionCompiler, check_device_options, settle

#: latencies kept for the percentiles
LATENCY_WINDOW = 10000


@dataclass
class Replica:
    """One copy of a network: its partitions on its devices."""

    plan: PartitionPlan
    parts: list[ProvisionedPartition]
    executor: Executor
    in_flight: int = 0
    served: int = 0

    def available(self) -> bool:
        return all(getattr(p.device, "available", True) for p in self.parts)


@dataclass
class Network:
    """A network added to the host manager."""

    name: str
    replicas: list[Replica]
    checker: CompiledNetwork
    in_flight: int = 0
    removed: bool = False

    @property
    def plan(self) -> PartitionPlan:
        return self.replicas[0].plan

    @property
    def parts(self) -> list[ProvisionedPartition]:
        return [p for r in self.replicas for p in r.parts]


@dataclass
class Stats:
    """Counters of the host manager (a snapshot)."""

    queued: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0
    rejected: int = 0
    cancelled: int = 0
    timed_out: int = 0
    latency_ms: dict[str, float] = field(default_factory=dict)  # p50, p90, p99, max


def prepare_claimed(model: Any, devices: Sequence[DeviceConfig],
                    input_shapes: Mapping[str, Sequence[int]] | None = None,
                    bind: Mapping[str, np.ndarray] | None = None,
                    stats: CompileStats | None = None,
                    weights: Mapping[str, np.ndarray] | None = None) -> tuple[Function, Claims]:
    """Import, optimize and lower ``model`` for the devices' backends (the times go into ``stats``), and
    the backends' claims on the prepared function (high-level claims are made before lowering). ``weights``:
    the initializers of a model stripped of them, by name (glow_core/importer/weights.py)."""
    backends = [get_backend(n) for n in backend_order(list(devices))]
    t0 = time.perf_counter()
    fn = import_function(model, input_shapes, bind, weights)
    origins = high_level_origins(fn, backends)
    t1 = time.perf_counter()
    fn = prepare_function(fn, UnionBackend(backends))
    if stats is not None:
        stats.import_s, stats.optimize_s = t1 - t0, time.perf_counter() - t1
    claims = collect_claims(fn, backends, origins)
    lower_unclaimed(fn, backends, claims)
    return fn, claims


def plan_network(model: Any, devices: Sequence[DeviceConfig], input_shapes: Mapping[str, Sequence[int]] | None = None,
                 *, assignment: Mapping[str, str] | None = None, bind: Mapping[str, np.ndarray] | None = None,
                 stats: CompileStats | None = None, compiler: PartitionCompiler | None = None,
                 weights: Mapping[str, np.ndarray] | None = None) -> PartitionPlan:
    """Import, optimize and lower ``model`` for the devices' backends, and partition it (``weights``: those of a
    model stripped of them, :func:`prepare_claimed`).

    With ``compiler``, partitions are compiled as they are planned and those a backend refuses go to the
    next device (:func:`glow_core.runtime.refusal.settle`); the compiler keeps the executables.
    """
    fn, claims = prepare_claimed(model, devices, input_shapes, bind, stats, weights)
    backends = [get_backend(n) for n in backend_order(list(devices))]
    if assignment is not None:
        return partition_user(fn, devices, backends, assignment)
    if compiler is not None:
        check_device_options(backends, compiler.options)
        return settle(fn, devices, backends, claims, compiler)
    return partition(fn, devices, backends, claims)


def check_plan(model: Any, devices: Sequence[DeviceConfig], input_shapes: Mapping[str, Sequence[int]] | None = None,
               *, compile_last: bool = False) -> PartitionPlan:
    """The plan ``glow partition`` shows: partitions are compiled (and the executables dropped) so that
    refusals show, except on the last backend of the list (the final fallback) unless ``compile_last``."""
    order = backend_order(list(devices))
    compiler = PartitionCompiler("partition", skip=frozenset() if compile_last else frozenset(order[-1:]),
                                 prepared_for=order[0])
    try:
        return plan_network(model, devices, input_shapes, compiler=compiler)
    finally:
        compiler.release()


def check_replicas(replicas: Any, devices: int) -> None:
    """An InputError unless ``replicas`` is an integer from 1 to ``devices``."""
    if not isinstance(replicas, int) or isinstance(replicas, bool) or not 1 <= replicas <= devices:
        raise InputError(f"replicas must be an integer from 1 to the number of devices ({devices}), "
                         f"got {replicas!r}", hint="add devices or ask for fewer replicas")


def plan_replicas(model: Any, devices: Sequence[DeviceConfig], replicas: int,
                  input_shapes: Mapping[str, Sequence[int]] | None = None,
                  bind: Mapping[str, np.ndarray] | None = None, stats: CompileStats | None = None
                  ) -> list[PartitionPlan]:
    """One plan per replica: device ``i`` goes to replica ``i % replicas``; the model is prepared once."""
    check_replicas(replicas, len(devices))
    fn, claims = prepare_claimed(model, devices, input_shapes, bind, stats)
    plans = []
    for r in range(replicas):
        group = list(devices[r::replicas])
        plans.append(partition(fn, group, [get_backend(n) for n in backend_order(group)], claims))
    return plans


class HostManager:
    """Devices, networks and requests (module docstring)."""

    def __init__(self, devices: str | list[DeviceConfig], *, max_in_flight: int = 64, max_queued: int = 1024,
                 timeout: float | None = None, cluster: str | None = "auto", call_timeout: float = 60.0,
                 max_restarts: int = 3, start_timeout: float = 120.0, overlap_transfers: bool = True) -> None:
        for what, n in (("max_in_flight", max_in_flight), ("max_queued", max_queued)):
            if not isinstance(n, int) or n < (1 if what == "max_in_flight" else 0):
                raise InputError(f"{what} must be a non-negative integer (max_in_flight >= 1), got {n!r}")
        self.devices = as_device_list(devices)
        self.overlap_transfers = overlap_transfers
        self.cluster: Cluster | None = None
        self.managers = self._start_devices(cluster, call_timeout, max_restarts, start_timeout)
        self._rotation = itertools.count()
        self.max_in_flight, self.max_queued, self.timeout = max_in_flight, max_queued, timeout
        self.networks: dict[str, Network] = {}
        self._lock = threading.Lock()
        self._pending: deque[tuple[Network, Request]] = deque()
        self._in_flight = 0
        self._counts = dict.fromkeys(("done", "failed", "rejected", "cancelled", "timed_out"), 0)
        self._latencies: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self._deadlines: list[tuple[float, int, Request]] = []
        self._seq = itertools.count()
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._watchdog = threading.Thread(target=self._watch, name="glow-host-watchdog", daemon=True)
        self._watchdog.start()

    def _start_devices(self, cluster: str | None, call_timeout: float, max_restarts: int,
                       start_timeout: float) -> dict[str, Any]:
        """One manager per device; remote ones are started together and waited for."""
        if any(d.remote for d in self.devices):
            self.cluster = Cluster(cluster)
        managers: dict[str, Any] = {}
        ordinals: dict[str, int] = {}
        try:
            for d in self.devices:
                if d.remote and self.cluster is not None:
                    managers[d.id] = RayDeviceManager(d, self.cluster, call_timeout=call_timeout,
                                                      max_restarts=max_restarts, start_timeout=start_timeout)
                    continue
                ordinal = ordinals[d.backend] = ordinals.get(d.backend, -1) + 1
                memory = get_backend(d.backend).device_memory(ordinal)
                managers[d.id] = DeviceManager(d, memory, overlap=self.overlap_transfers)
            for m in managers.values():
                if isinstance(m, RayDeviceManager):
                    m.wait_ready()
        except BaseException:
            for m in managers.values():
                m.stop()
            if self.cluster is not None:
                self.cluster.close()
            raise
        return managers

    # -- networks ------------------------------------------------------------------------------
    def add_network(self, name: str, model: Any, input_shapes: Mapping[str, Sequence[int]] | None = None, *,
                    assignment: Mapping[str, str] | None = None, threads: int | None = None,
                    options: Mapping[str, Any] | None = None, bind: Mapping[str, np.ndarray] | None = None,
                    replicas: int = 1, stats: CompileStats | None = None,
                    weights: Mapping[str, np.ndarray] | None = None) -> PartitionPlan:
        """Partition, compile and load ``model`` under ``name`` (``replicas`` copies); return the first plan.
        ``stats`` receives the import, optimize (+ lower) and backend (partition compile and load) times;
        ``weights``: the initializers of a model stripped of them (one copy only)."""
        if weights and replicas != 1:
            raise InputError("replicas of a model stripped of its weights are not supported",
                             hint="pass the whole model with replicas=, or one copy with weights=")
        with self._lock:
            if name in self.networks:
                raise NetworkError(f"a network named '{name}' is already added", hint="remove it first")
        check_replicas(replicas, len(self.devices))
        if replicas != 1 and assignment is not None:
            raise InputError("an assignment places one copy of the network: it cannot be combined with replicas",
                             hint="drop replicas=, or the assignment")
        compiler = PartitionCompiler(name, threads, options,
                                     skip_devices=frozenset(d.id for d in self.devices if d.remote),
                                     prepared_for=backend_order(self.devices)[0])
        try:
            plans = ([plan_network(model, self.devices, input_shapes, assignment=assignment, bind=bind, stats=stats,
                                   compiler=compiler, weights=weights)] if replicas == 1
                     else plan_replicas(model, self.devices, replicas, input_shapes, bind, stats))
        except BaseException:
            compiler.release()
            raise
        t0 = time.perf_counter()
        copies: list[Replica] = []
        try:
            for plan in plans:
                parts = provision(name, plan, self.managers, threads, options, compiler)
                copies.append(Replica(plan, parts, Executor(plan.function, parts)))
        except BaseException:
            for r in copies:
                for p in r.parts:
                    p.device.unload(p.key)
            raise
        if stats is not None:
            stats.backend_compile_s = time.perf_counter() - t0
        plan = plans[0]
        first = get_backend(plan.partitions[0].backend if plan.partitions else self.devices[0].backend)
        checker = CompiledNetwork(plan.function, None, first, None)  # type: ignore[arg-type]  (feed checks only)
        net = Network(name, copies, checker)
        parts = net.parts
        with self._lock:
            if name in self.networks:
                for p in parts:
                    p.device.unload(p.key)
                raise NetworkError(f"a network named '{name}' is already added", hint="remove it first")
            self.networks[name] = net
        return plan

    def remove_network(self, name: str, wait: float | None = 60.0) -> None:
        """Remove ``name``: its queued requests fail, requests in flight finish (up to ``wait`` s), then unload."""
        with self._lock:
            net = self._network(name)
            net.removed = True
            del self.networks[name]
            dropped = [r for n, r in self._pending if n is net]
            self._pending = deque((n, r) for n, r in self._pending if n is not net)
        for r in dropped:
            if r.future.set_running_or_notify_cancel():
                r.finish(None, NetworkError(f"network '{name}' was removed while this request was queued"))
        end = time.monotonic() + (wait if wait is not None else 0)
        with self._lock:
            while net.in_flight and time.monotonic() < end:
                self._wake.wait(min(0.05, max(0.0, end - time.monotonic())))
        for p in net.parts:
            p.device.unload(p.key)

    def _network(self, name: str) -> Network:
        net = self.networks.get(name)
        if net is None:
            raise NetworkError(f"no network named '{name}'; choose one of: {', '.join(sorted(self.networks)) or '(none added)'}")
        return net

    # -- requests ------------------------------------------------------------------------------
    def run(self, name: str, feeds: Mapping[str, Any], timeout: float | None = None) -> Future:
        """Queue one request; the future gives the outputs by name or the error. Raises QueueFullError at once."""
        with self._lock:
            net = self._network(name)
        checked = net.checker.check_feeds(feeds)
        fut: Future = Future()
        req = Request(name, fut, checked, timeout if timeout is not None else self.timeout,
                      lambda r: self._finished(net, r))
        with self._lock:
            if self._closed:
                raise NetworkError("the host manager is closed")
            if self._in_flight < self.max_in_flight:
                self._admit(net, req)
            elif len(self._pending) < self.max_queued:
                self._pending.append((net, req))
                return fut
            else:
                self._counts["rejected"] += 1
                raise QueueFullError(
                    f"request to '{name}' rejected: {self._in_flight} requests in flight (limit max_in_flight="
                    f"{self.max_in_flight}) and {len(self._pending)} queued (limit max_queued={self.max_queued})",
                    hint="retry later, or raise max_in_flight / max_queued")
        self._launch(net, req)
        return fut

    def run_sync(self, name: str, feeds: Mapping[str, Any], timeout: float | None = None) -> dict[str, np.ndarray]:
        """Run one request and wait for its outputs (raises its error)."""
        return self.run(name, feeds, timeout).result()

    def _admit(self, net: Network, req: Request) -> None:
        """Count ``req`` as in flight (lock held)."""
        self._in_flight += 1
        net.in_flight += 1
        req.admitted = True
        req.started = time.monotonic()
        if req.timeout is not None:
            req.deadline = req.started + req.timeout
            heapq.heappush(self._deadlines, (req.deadline, next(self._seq), req))
            self._wake.notify_all()

    def _pick(self, net: Network) -> Replica:
        """The replica with the fewest requests in flight among the available ones (lock held)."""
        if len(net.replicas) == 1:
            return net.replicas[0]
        ready = [r for r in net.replicas if r.available()] or net.replicas
        turn = next(self._rotation)
        return min(ready, key=lambda r: (r.in_flight, (net.replicas.index(r) - turn) % len(net.replicas)))

    def _launch(self, net: Network, req: Request) -> None:
        if not req.future.set_running_or_notify_cancel():  # cancelled
            req.finish(None, None)
            return
        with self._lock:
            replica = self._pick(net)
            replica.in_flight += 1
            replica.served += 1
            req.replica = replica
        try:
            replica.executor.start(req)
        except BaseException as e:  # noqa: BLE001
            req.finish(None, e)

    def _finished(self, net: Network, req: Request) -> None:
        nxt: list[tuple[Network, Request]] = []
        with self._lock:
            if req.admitted:
                self._in_flight -= 1
                net.in_flight -= 1
            replica = req.replica
            if replica is not None:
                replica.in_flight -= 1
            exc = None if req.future.cancelled() else req.future.exception()
            if req.future.cancelled():
                self._counts["cancelled"] += 1
            elif exc is None:
                self._counts["done"] += 1
                self._latencies.append(time.monotonic() - req.created)
            else:
                self._counts["timed_out" if isinstance(exc, RequestTimeoutError) else "failed"] += 1
            while self._pending and self._in_flight < self.max_in_flight:
                n, r = self._pending.popleft()
                if r.future.cancelled():
                    self._counts["cancelled"] += 1
                    continue
                self._admit(n, r)
                nxt.append((n, r))
            self._wake.notify_all()
        for n, r in nxt:
            self._launch(n, r)

    def _watch(self) -> None:
        while True:
            expired: list[Request] = []
            with self._lock:
                if self._closed:
                    return
                now = time.monotonic()
                while self._deadlines and (self._deadlines[0][0] <= now or self._deadlines[0][2].finished):
                    _, _, r = heapq.heappop(self._deadlines)
                    if not r.finished:
                        expired.append(r)
                if not expired:
                    delay = self._deadlines[0][0] - now if self._deadlines else 1.0
                    self._wake.wait(min(1.0, max(0.001, delay)))
            for r in expired:
                busy = ", ".join(r.busy_devices()) or "none"
                r.finish(None, RequestTimeoutError(
                    f"request to '{r.network}' timed out after {r.timeout:g} s (devices still busy with it: {busy})",
                    hint="raise the timeout, or check the device named"))

    # -- state -------------------------------------------------------------------------------
    def stats(self) -> Stats:
        """A snapshot of the counters and latency percentiles (ms, over the last requests that succeeded)."""
        with self._lock:
            lat = sorted(self._latencies)
            s = Stats(len(self._pending), self._in_flight, **self._counts)
        if lat:
            pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000  # noqa: E731
            s.latency_ms = {"p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99), "max": lat[-1] * 1000}
        return s

    def device_status(self) -> dict[str, str]:
        """Device id -> ``ok``, or for a remote device ``restarting`` / ``dropped`` / ``stopped``."""
        return {i: getattr(m, "state", "ok") for i, m in self.managers.items()}

    def close(self) -> None:
        """Remove every network, stop the device threads (and Ray actors; a cluster started here)."""
        for name in list(self.networks):
            self.remove_network(name, wait=5.0)
        with self._lock:
            self._closed = True
            self._wake.notify_all()
        for m in self.managers.values():
            m.stop()
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None

    def __enter__(self) -> HostManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
