"""Test backends with their own device memory (SDK API 2.2), recording every transfer and run.

- ``simdev``: runs Conv, MatMul, Gemm, Relu and Add (float32) on a simulated device: its memory
  (:class:`SimMemory`) keeps private copies of the tensors, every copy (host -> device, device ->
  host, device -> device) sleeps :data:`TIMING` ``.transfer_s`` and a run sleeps ``.run_s`` on the
  device's own engine thread (runs are asynchronous: ``execute_async`` returns at once). Outputs are
  computed with the interpreter's kernels, so results match cpu; a run whose first input starts with
  :data:`FAULT` raises.
- ``sleepy``: the cost model's fixture: ``simdev`` that declares its costs (``estimate_cost``: 10x
  below the default estimate of every node, the one cpu gets) and a link of
  :data:`SLEEPY_BANDWIDTH` bytes/s plus :data:`SLEEPY_LATENCY` s per transfer, scaled by
  :data:`TIMING` ``.scale``; each copy sleeps the declared transfer time and each run sleeps the
  declared cost of its nodes (its outputs are zeros: a timing model only, so that its sleeps, not
  kernels, make its time).

Every copy and run is appended to :data:`EVENTS` as (what, device, start, end, shape).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from glow_core.ir.graph import Function, Node
from glow_core.ir.types import ElemKind, TensorType
from glow_core.plugin_host import get_backend
from glow_core.runtime.cost import DEFAULT_SECONDS_PER_COST
from glow_core.runtime.graphcut import node_cost
from glow_sdk import Backend, BackendSpec, CompiledFunction, CompileOptions, DeviceInfo, hookimpl
from glow_sdk.device import DeviceBuffer, DeviceMemory

KINDS = ("Conv", "MatMul", "Gemm", "Relu", "Add")
F32 = frozenset({ElemKind.FLOAT32})
#: a run whose first input starts with this value raises (a device fault)
FAULT = -12345.0
#: ``sleepy``: its speed-up over the default estimate (cpu's), and its link (before TIMING.scale)
SLEEPY_SPEEDUP = 10.0
SLEEPY_BANDWIDTH = 2e9
SLEEPY_LATENCY = 20e-6


@dataclass
class Timing:
    """The simulated costs: ``simdev``'s per copy and per run; ``sleepy``'s declared costs times ``scale``."""

    transfer_s: float = 0.0
    run_s: float = 0.0
    scale: float = 1.0


TIMING = Timing()


@dataclass(frozen=True)
class Event:
    what: str  # h2d, d2h, d2d, run
    device: str
    start: float
    end: float
    shape: tuple[int, ...]


EVENTS: list[Event] = []
_EVENTS_LOCK = threading.Lock()


_DEBT = threading.local()


def simulate(seconds: float) -> None:
    """Sleep ``seconds``, less what earlier sleeps of this thread overshot (a sleep wakes late by a fraction
    of a millisecond; over the hundreds of copies of a request that would add up)."""
    debt = getattr(_DEBT, "s", 0.0)
    want = seconds - debt
    if want <= 0:
        _DEBT.s = debt - seconds
        return
    t0 = time.perf_counter()
    time.sleep(want)
    _DEBT.s = time.perf_counter() - t0 - want


def _record(what: str, device: str, start: float, shape: tuple[int, ...]) -> None:
    with _EVENTS_LOCK:
        EVENTS.append(Event(what, device, start, time.perf_counter(), shape))


def events(what: str | None = None) -> list[Event]:
    with _EVENTS_LOCK:
        return [e for e in EVENTS if what is None or e.what == what]


def clear_events() -> None:
    with _EVENTS_LOCK:
        EVENTS.clear()


class SimMemory(DeviceMemory):
    """A device's memory: private copies of the tensors; copies sleep what the device says they cost."""

    resident = True

    def __init__(self, backend: SimDeviceBackend, ordinal: int) -> None:
        super().__init__(backend.name, ordinal)
        self.owner = backend
        self.engine = ThreadPoolExecutor(1, thread_name_prefix=f"sim-{self.name}")
        self.live = 0
        self._lock = threading.Lock()

    def _new(self, array: np.ndarray) -> DeviceBuffer:
        with self._lock:
            self.live += 1
        return DeviceBuffer(self, TensorType.of(array), np.array(array, copy=True))

    def allocate(self, type: TensorType) -> DeviceBuffer:
        return self._new(np.zeros(type.shape, type.dtype))

    def copy_from_host(self, array: np.ndarray) -> DeviceBuffer:
        t0 = time.perf_counter()
        simulate(self.owner.transfer_seconds(array.nbytes))
        buf = self._new(array)
        _record("h2d", self.name, t0, array.shape)
        return buf

    def copy_to_host(self, buffer: DeviceBuffer) -> np.ndarray:
        t0 = time.perf_counter()
        simulate(self.owner.transfer_seconds(buffer.nbytes))
        out = np.array(buffer.handle, copy=True)
        _record("d2h", self.name, t0, out.shape)
        return out

    def copy_from_device(self, buffer: DeviceBuffer) -> DeviceBuffer:
        t0 = time.perf_counter()
        simulate(self.owner.transfer_seconds(buffer.nbytes))
        buf = self._new(buffer.handle)
        _record("d2d", self.name, t0, buf.type.shape)
        return buf

    def free(self, buffer: DeviceBuffer) -> None:
        with self._lock:
            self.live -= 1


class SimExecutable(CompiledFunction):
    """Runs on the device's engine thread: sleeps the run's cost, computes the outputs on device buffers."""

    def __init__(self, function: Function, backend: SimDeviceBackend, options: CompileOptions) -> None:
        super().__init__(function)
        self.backend = backend
        self.cost = backend.run_seconds(function)
        self.inner = get_backend("interpreter").compile(function, options) if backend.computes else None

    def execute(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        simulate(self.cost)
        first = next(iter(feeds.values()), None)
        if first is not None and first.size and float(first.flat[0]) == FAULT:
            raise RuntimeError("injected device fault")
        if self.inner is None:
            return {n: np.zeros(t.shape, t.dtype) for n, t in self.output_types.items()}
        return self.inner.execute(feeds)

    def execute_async(self, inputs: Mapping[str, DeviceBuffer], memory: DeviceMemory) -> Future:
        assert isinstance(memory, SimMemory)
        assert all(b.memory is memory for b in inputs.values()), "inputs must be on this device"
        return memory.engine.submit(self._on_device, inputs, memory)

    def _on_device(self, inputs: Mapping[str, DeviceBuffer], memory: SimMemory) -> dict[str, DeviceBuffer]:
        t0 = time.perf_counter()
        outs = self.execute({n: b.handle for n, b in inputs.items()})
        _record("run", memory.name, t0, ())
        buffers = {n: memory.allocate(TensorType.of(a)) for n, a in outs.items()}
        for n, a in outs.items():
            buffers[n].handle[...] = a
        return buffers


class SimDeviceBackend(Backend):
    name = "simdev"
    sdk_api_version = "2.2"  # type: ignore[assignment]
    #: whether runs compute their outputs (else zeros: a timing model)
    computes = True

    def supported_kinds(self) -> Mapping[str, frozenset[ElemKind]]:
        return dict.fromkeys(KINDS, F32)

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        return SimExecutable(function, self, options)

    def device_memory(self, ordinal: int) -> DeviceMemory:
        return SimMemory(self, ordinal)

    def transfer_seconds(self, nbytes: int) -> float:
        return TIMING.transfer_s

    def run_seconds(self, function: Function) -> float:
        return TIMING.run_s


class SleepyBackend(SimDeviceBackend):
    name = "sleepy"
    computes = False

    def estimate_cost(self, node: Node) -> float | None:
        return node_cost(node) * DEFAULT_SECONDS_PER_COST / SLEEPY_SPEEDUP * TIMING.scale

    def create_device(self) -> DeviceInfo:
        return DeviceInfo("sleepy", 8 << 30, bandwidth_bytes_per_s=SLEEPY_BANDWIDTH / TIMING.scale,
                          latency_s=SLEEPY_LATENCY * TIMING.scale)

    def transfer_seconds(self, nbytes: int) -> float:
        return self.create_device().transfer_seconds(nbytes)

    def run_seconds(self, function: Function) -> float:
        return sum(self.estimate_cost(n) or 0.0 for n in function.nodes)


class DevicePlugin:
    @hookimpl
    def glow_backends(self) -> list[BackendSpec]:
        return [BackendSpec(name=b.name, factory=b, sdk_api_version="2.2", version="0.1")  # type: ignore[arg-type]
                for b in (SimDeviceBackend, SleepyBackend)]


plugin = DevicePlugin()
