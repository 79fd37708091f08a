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
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from glow_core.errors import GlowError
from glow_core.runtime.devices import DeviceConfig, format_bytes
from glow_core.runtime.errors import DeviceExecutionError, DeviceMemoryError
from glow_core.runtime.graphcut import MemoryEstimate
from glow_sdk.backend import CompiledFunction
from glow_sdk.device import DeviceBuffer, DeviceMemory, HostMemory

Done = Callable[[dict[str, Any] | None, BaseException | None], None]


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
    #: outputs copied to the host after a run on a resident device (None: every output)
    host_outputs: frozenset[str] | None = None


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
    """Loads, unloads and runs compiled partitions on one device.

    A device whose memory is resident (``DeviceMemory.resident``, SDK API 2.2) runs on device buffers:
    a run's inputs are brought onto the device (kept there when they already are, copied device to
    device from another device of the backend, else from the host), the executable runs through
    ``execute_async``, and its outputs stay on the device, only those the host needs
    (``Loaded.host_outputs``) copied out. With ``overlap`` these transfers run on a copy thread of
    their own, so that they overlap the device's compute of other requests; without it they run on
    the device's thread, one after the other with the runs (the synchronous executor).
    """

    def __init__(self, config: DeviceConfig, memory: DeviceMemory | None = None, overlap: bool = True) -> None:
        super().__init__(config)
        self.memory = memory if memory is not None else HostMemory(config.backend)
        self._queue: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._copies: queue.SimpleQueue[tuple[Any, ...] | None] | None = None
        self._thread = threading.Thread(target=self._work, name=f"glow-device-{config.id}", daemon=True)
        self._thread.start()
        if self.memory.resident and overlap:
            self._copies = queue.SimpleQueue()
            threading.Thread(target=self._copy_work, name=f"glow-copy-{config.id}", daemon=True).start()

    def load(self, key: str, executable: CompiledFunction, memory: MemoryEstimate,
             host_outputs: frozenset[str] | None = None) -> None:
        """Account ``memory`` for the partition ``key``; refuse it when it does not fit. ``host_outputs``: the
        outputs copied to the host after each run on a resident device (None: every output)."""
        with self._lock:
            self._refuse_if_loaded(key)
            self._refuse_unless_fits(key, memory)
            self._account(key, Loaded(key, executable, memory, host_outputs), memory)

    def unload(self, key: str) -> None:
        """Free the partition ``key`` (no error if it is not loaded)."""
        with self._lock:
            self._release(key)

    def submit(self, key: str, feeds: Mapping[str, Any], done: Done) -> None:
        """Queue one run of partition ``key``; ``done(outputs, error)`` is called from a thread of the device."""
        if self._copies is not None:
            self._copies.put(("in", key, feeds, done))
        else:
            self._queue.put(("run", key, feeds, done))

    def stop(self) -> None:
        """Stop the workers after the queued work (a hung run keeps its daemon thread)."""
        self._queue.put(None)
        if self._copies is not None:
            self._copies.put(None)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if item[0] == "launch":  # brought onto the device by the copy thread: start the run
                self._launch(*item[1:])
                continue
            _, key, feeds, done = item
            outputs: dict[str, Any] | None = None
            error: BaseException | None = None
            try:
                outputs = self._run_resident(key, feeds) if self.memory.resident else self._run(key, feeds)
            except BaseException as e:  # noqa: BLE001  (one failed run must not stop the device)
                error = e
            _call(done, outputs, error)

    def _copy_work(self) -> None:
        """The copy thread: brings a run's inputs onto the device, then copies out what the host needs."""
        assert self._copies is not None
        while True:
            item = self._copies.get()
            if item is None:
                return
            if item[0] == "in":
                _, key, feeds, done = item
                try:
                    buffers, owned = self._bring(feeds)
                except BaseException as e:  # noqa: BLE001
                    _call(done, None, self._failure(key, e))
                    continue
                self._queue.put(("launch", key, buffers, owned, done))
            else:
                _, key, handle, owned, done = item
                try:
                    outputs = self._settle(key, handle, owned)
                except BaseException as e:  # noqa: BLE001
                    _call(done, None, e)
                    continue
                _call(done, outputs, None)

    def _launch(self, key: str, buffers: dict[str, DeviceBuffer], owned: list[DeviceBuffer], done: Done) -> None:
        """Start one run on buffers; its completion goes to the copy thread."""
        copies = self._copies
        assert copies is not None
        try:
            handle = self._loaded(key).executable.execute_async(buffers, self.memory)
        except BaseException as e:  # noqa: BLE001
            handle = Future()
            handle.set_exception(e)
        self.runs += 1
        handle.add_done_callback(lambda h: copies.put(("out", key, h, owned, done)))

    def _loaded(self, key: str) -> Loaded:
        with self._lock:
            item = self.loaded.get(key)
        if item is None:
            raise DeviceExecutionError(f"device {self.id}: partition {key} is not loaded (network removed?)")
        return item

    def _failure(self, key: str, e: BaseException) -> BaseException:
        if isinstance(e, DeviceExecutionError):
            return e
        what = e.one_line() if isinstance(e, GlowError) else f"{type(e).__name__}: {e}"
        return DeviceExecutionError(f"device {self.id}: backend '{self.config.backend}' failed running partition "
                                    f"{key}: {what}")

    def _bring(self, feeds: Mapping[str, Any]) -> tuple[dict[str, DeviceBuffer], list[DeviceBuffer]]:
        """The feeds as buffers on this device, and those made here (freed after the run)."""
        out: dict[str, DeviceBuffer] = {}
        owned: list[DeviceBuffer] = []
        for name, v in feeds.items():
            if isinstance(v, DeviceBuffer) and v.memory is self.memory:
                out[name] = v
                continue
            same_backend = isinstance(v, DeviceBuffer) and v.memory.resident and v.memory.backend == self.memory.backend
            buf = self.memory.copy_from_device(v) if same_backend else self.memory.copy_from_host(materialize(v))
            out[name] = buf
            owned.append(buf)
        return out, owned

    def _settle(self, key: str, handle: Future, owned: list[DeviceBuffer]) -> dict[str, DeviceBuffer]:
        """A finished run's outputs, those the host needs copied out; the inputs made for it freed."""
        for b in owned:
            b.release()
        outputs: dict[str, DeviceBuffer] = {}
        try:
            outputs = handle.result()
            wanted = self._loaded(key).host_outputs
            for name, buf in outputs.items():
                if wanted is None or name in wanted:
                    buf.materialize()
        except BaseException as e:  # noqa: BLE001
            for buf in outputs.values():  # a failed copy-out: the request fails, nothing reads them
                buf.release()
            raise self._failure(key, e) from e
        return outputs

    def _run_resident(self, key: str, feeds: Mapping[str, Any]) -> dict[str, DeviceBuffer]:
        """One run on a resident device without the copy thread: bring, run, copy out, in turn."""
        try:
            buffers, owned = self._bring(feeds)
            handle = self._loaded(key).executable.execute_async(buffers, self.memory)
        except BaseException as e:  # noqa: BLE001
            raise self._failure(key, e) from e
        self.runs += 1
        return self._settle(key, handle, owned)

    def _run(self, key: str, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        item = self._loaded(key)
        self.runs += 1
        try:
            return item.executable.execute({n: materialize(v) for n, v in feeds.items()})
        except Exception as e:  # noqa: BLE001
            raise self._failure(key, e) from e


def _call(done: Done, outputs: dict[str, Any] | None, error: BaseException | None) -> None:
    try:
        done(outputs, error)
    except Exception:  # noqa: BLE001  # pragma: no cover  (a callback bug must not stop the device)
        pass
