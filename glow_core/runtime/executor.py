"""The executor: runs one request over the DAG of provisioned partitions.

Each partition is submitted to its device's queue as soon as every tensor it reads is ready;
since every device has its own worker thread, concurrent requests pipeline across devices. On a
device with resident memory (SDK API 2.2) a partition's results stay on the device as buffers, so
the next partition there reads them without a round trip through the host; the request frees its
buffers when it ends.
A request ends exactly once: with the model's outputs, with the first partition error (naming the
device), or with a timeout / cancellation decided by the host manager (:meth:`Request.finish`).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any

import numpy as np

from glow_core.ir.graph import Constant, Function
from glow_core.runtime.device_manager import materialize
from glow_core.runtime.provisioner import ProvisionedPartition
from glow_sdk.device import DeviceBuffer


class Request:
    """One run of a network: its future, the tensors computed so far, the partitions left."""

    def __init__(self, network: str, future: Future, feeds: Mapping[str, np.ndarray], timeout: float | None,
                 on_finish: Callable[[Request], None]) -> None:
        self.network = network
        self.future = future
        self.feeds = feeds
        self.timeout = timeout
        self.created = time.monotonic()
        self.started = 0.0
        self.deadline = 0.0
        self.finished = False
        self.admitted = False  # counted as in flight by the host manager
        self.running: set[str] = set()  # device ids with a partition of this request queued or running
        self.replica: Any = None  # the host manager's replica that runs it
        self._lock = threading.Lock()
        self._on_finish = on_finish

    def busy(self, device: str, on: bool) -> None:
        """Note that a partition of this request was queued on (``on``) or came back from ``device``."""
        with self._lock:
            if on:
                self.running.add(device)
            else:
                self.running.discard(device)

    def busy_devices(self) -> list[str]:
        with self._lock:
            return sorted(self.running)

    def finish(self, result: dict[str, np.ndarray] | None, error: BaseException | None) -> bool:
        """End the request once (later calls are ignored); return whether this call ended it."""
        with self._lock:
            if self.finished:
                return False
            self.finished = True
        if self.future.cancelled():
            pass
        elif error is not None:
            self.future.set_exception(error)
        else:
            self.future.set_result(result)
        self._on_finish(self)
        return True


class Executor:
    """Runs requests over the partitions of one network."""

    def __init__(self, function: Function, parts: list[ProvisionedPartition]) -> None:
        self.parts = parts
        self.outputs = [(name, v) for name, v in function.outputs]
        self.users: dict[int, list[int]] = {i: [] for i in range(len(parts))}
        for i, pp in enumerate(parts):
            for d in pp.partition.deps:
                self.users[d].append(i)

    def start(self, req: Request) -> None:
        """Submit every partition without dependencies; the rest follow as their inputs arrive."""
        run = _Run(self, req)
        if not self.parts:
            run.complete()
            return
        for i, n in enumerate(run.waiting):
            if n == 0:
                run.submit(i)

    def result(self, values: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The model's outputs, copied out of the partitions' results (which may be device or remote memory)."""
        return {name: np.array(v.payload if isinstance(v, Constant) else materialize(values[v.name]), copy=True)
                for name, v in self.outputs}


class _Run:
    """One request's walk over the partitions: the tensors computed so far and what each partition waits for.

    Nothing here refers back to itself through a closure (the device callbacks hold the run, the run holds no
    callback), so a finished run and every tensor it held are freed at once by reference counting, not at
    the next cyclic garbage collection: under a steady stream of requests those would pile up and the
    allocator's arenas would keep the memory (the serving-memory test in tests/runtime/test_memory.py).
    """

    __slots__ = ("executor", "req", "values", "waiting", "left", "lock", "running")

    def __init__(self, executor: Executor, req: Request) -> None:
        self.executor = executor
        self.req = req
        self.values: dict[str, Any] = dict(req.feeds)
        self.waiting = [len(pp.partition.deps) for pp in executor.parts]
        self.left = len(executor.parts)
        self.lock = threading.Lock()
        self.running = 0  # partitions submitted and not yet back: the request's buffers are freed after them

    def submit(self, i: int) -> None:
        pp = self.executor.parts[i]
        with self.lock:
            feeds = {n: self.values[n] for n in pp.input_names}
            self.running += 1
        self.req.busy(pp.device.id, True)
        pp.device.submit(pp.key, feeds, functools.partial(self.done, i))

    def done(self, i: int, out: dict[str, np.ndarray] | None, err: BaseException | None) -> None:
        req = self.req
        req.busy(self.executor.parts[i].device.id, False)
        with self.lock:
            self.running -= 1
            idle = self.running == 0
        if req.finished or err is not None or out is None:
            _release_all((out or {}).values())  # (none when the run failed)
            if not req.finished:
                req.finish(None, err)
            if idle:  # no partition of the request still reads its tensors
                self.clear()
            return
        ready = []
        with self.lock:
            self.values.update(out)
            self.left -= 1
            for u in self.executor.users[i]:
                self.waiting[u] -= 1
                if self.waiting[u] == 0:
                    ready.append(u)
            finished = self.left == 0
        for u in ready:
            self.submit(u)
        if finished:
            self.complete()

    def complete(self) -> None:
        try:
            result = self.executor.result(self.values)
        except Exception as e:  # noqa: BLE001  (a remote output that cannot be fetched fails the request)
            self.clear()
            self.req.finish(None, e)
            return
        self.clear()
        self.req.finish(result, None)

    def clear(self) -> None:
        """Forget the request's tensors, giving device buffers back to their devices' memory."""
        with self.lock:
            values = list(self.values.values())
            self.values.clear()
        _release_all(values)


def _release_all(values: Iterable[Any]) -> None:
    """Free the device buffers among ``values`` (SDK API 2.2 device memory); host arrays need nothing."""
    for v in values:
        if isinstance(v, DeviceBuffer):
            v.release()
