"""One device manager per device: loaded partitions, memory accounting, one worker thread with a queue.

A partition is loaded with the bytes it needs (:func:`compiled_memory`: the compiled function's
memory plan -- constants, activation arena, inputs and outputs -- when it exposes one, else the
graph estimate); a load beyond the capacity is refused with an error naming the device, the need
and what is free. Work items run one at a time, in submission order, on the device's own thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from glow_core.errors import GlowError
from glow_core.runtime.devices import DeviceConfig, format_bytes
from glow_core.runtime.errors import DeviceExecutionError, DeviceMemoryError
from glow_core.runtime.graphcut import MemoryEstimate
from glow_sdk.backend import CompiledFunction

Done = Callable[[dict[str, np.ndarray] | None, BaseException | None], None]


def compiled_memory(executable: CompiledFunction, estimate: MemoryEstimate) -> MemoryEstimate:
    """The memory a compiled partition needs: its memory plan's figures when it has one, else ``estimate``."""
    report = executable.memory_plan()
    if report is not None:
        return MemoryEstimate(report.constant_bytes or estimate.constant_bytes, report.arena_bytes,
                              report.io_bytes or estimate.io_bytes)
    return estimate


def materialize(value: Any) -> np.ndarray:
    """An array: ``value`` itself, or the array a remote device's output stands for (fetched here)."""
    fetch = getattr(value, "materialize", None)
    return fetch() if callable(fetch) else value


@dataclass
class Loaded:
    """A partition on a device."""

    key: str
    executable: CompiledFunction
    memory: MemoryEstimate


class DeviceAccount:
    """What every device manager keeps: its configuration, the loaded partitions and the bytes they use.

    Local (:class:`DeviceManager`) and remote (Ray) devices share the accounting and its errors:
    a partition is refused when it is already loaded or does not fit in what is free.
    """

    def __init__(self, config: DeviceConfig) -> None:
        self.config = config
        self.loaded: dict[str, Any] = {}
        self.used_bytes = 0
        self.runs = 0
        self._lock = threading.Lock()

    @property
    def id(self) -> str:
        return self.config.id

    @property
    def free_bytes(self) -> int:
        return self.config.memory_bytes - self.used_bytes

    def _refuse_if_loaded(self, key: str) -> None:
        """Raise when ``key`` is loaded already (call with the lock held)."""
        if key in self.loaded:
            raise DeviceMemoryError(f"device {self.id}: partition {key} is already loaded")

    def _refuse_unless_fits(self, key: str, memory: MemoryEstimate) -> None:
        """Raise when ``memory`` exceeds what is free, naming the need and its parts (call with the lock held)."""
        free = self.free_bytes
        if memory.total > free:
            raise DeviceMemoryError(
                f"device {self.id} cannot load partition {key}: it needs {format_bytes(memory.total)} "
                f"({format_bytes(memory.constant_bytes)} constants, {format_bytes(memory.activation_bytes)} "
                f"activations, {format_bytes(memory.io_bytes)} inputs/outputs), the device has "
                f"{format_bytes(free)} free of {format_bytes(self.config.memory_bytes)}",
                hint="give the devices more memory (@SIZE) or add devices")

    def _account(self, key: str, item: Any, memory: MemoryEstimate) -> None:
        """Record ``item`` under ``key`` and count its bytes (call with the lock held)."""
        self.loaded[key] = item
        self.used_bytes += memory.total

    def _release(self, key: str) -> Any:
        """Forget ``key`` and give its bytes back; the item, or None if it was not loaded (lock held)."""
        item = self.loaded.pop(key, None)
        if item is not None:
            self.used_bytes -= item.memory.total
        return item


class DeviceManager(DeviceAccount):
    """Loads, unloads and runs compiled partitions on one device."""

    def __init__(self, config: DeviceConfig) -> None:
        super().__init__(config)
        self._queue: queue.SimpleQueue[tuple[str, Mapping[str, np.ndarray], Done] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=f"glow-device-{config.id}", daemon=True)
        self._thread.start()

    def load(self, key: str, executable: CompiledFunction, memory: MemoryEstimate) -> None:
        """Account ``memory`` for the partition ``key``; refuse it when it does not fit."""
        with self._lock:
            self._refuse_if_loaded(key)
            self._refuse_unless_fits(key, memory)
            self._account(key, Loaded(key, executable, memory), memory)

    def unload(self, key: str) -> None:
        """Free the partition ``key`` (no error if it is not loaded)."""
        with self._lock:
            self._release(key)

    def submit(self, key: str, feeds: Mapping[str, np.ndarray], done: Done) -> None:
        """Queue one run of partition ``key``; ``done(outputs, error)`` is called from the device thread."""
        self._queue.put((key, feeds, done))

    def stop(self) -> None:
        """Stop the worker after the queued work (a hung run keeps its daemon thread)."""
        self._queue.put(None)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            key, feeds, done = item
            outputs: dict[str, np.ndarray] | None = None
            error: BaseException | None = None
            try:
                outputs = self._run(key, feeds)
            except BaseException as e:  # noqa: BLE001  (one failed run must not stop the device)
                error = e
            try:
                done(outputs, error)
            except Exception:  # noqa: BLE001  # pragma: no cover  (a callback bug must not stop the device)
                pass

    def _run(self, key: str, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self._lock:
            item = self.loaded.get(key)
        if item is None:
            raise DeviceExecutionError(f"device {self.id}: partition {key} is not loaded (network removed?)")
        self.runs += 1
        try:
            return item.executable.execute({n: materialize(v) for n, v in feeds.items()})
        except Exception as e:  # noqa: BLE001
            what = e.one_line() if isinstance(e, GlowError) else f"{type(e).__name__}: {e}"
            raise DeviceExecutionError(f"device {self.id}: backend '{self.config.backend}' failed running partition "
                                       f"{key}: {what}") from e
