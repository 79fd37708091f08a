"""Running compiled code: aligned regions, input checks, a persistent pool of worker threads.

Every region native code touches starts at a 64-byte boundary (numpy does not
promise that, so buffers are over-allocated and offset: :func:`aligned_empty`)
before LLVM is told so. :meth:`CpuExecutable.execute` checks every feed
(names, dtypes, shapes, contiguity) *before* native code runs, so no input,
however wrong, can crash the process; a feed that is already aligned and
contiguous is used in place, others are copied into an aligned staging buffer.
Outputs are written by the kernels straight into fresh aligned arrays, which
are returned.

The entry point runs SPMD: thread 0 is the caller, threads 1..N-1 are
persistent Python threads of a :class:`WorkerPool` that call the same entry
point through ctypes (which releases the GIL) with their own thread id; the
native barrier inside keeps them in step, and its last barrier ends the run.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from glow_backend_cpu.codegen import ENTRY, REGION_IO, Layout
from glow_backend_cpu.target import Library
from glow_core.errors import ExecutionError, InputError
from glow_core.ir.graph import Function
from glow_core.ir.types import ElemKind, TensorType
from glow_sdk.backend import CompiledFunction

ALIGN = 64
EntryFn = Any  # a ctypes function (regions, tid, nthreads)
_ENTRY_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
_GET_ERROR_TYPE = ctypes.CFUNCTYPE(ctypes.c_int32)
_CLEAR_ERROR_TYPE = ctypes.CFUNCTYPE(None)


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype | type, align: int = ALIGN) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts at a multiple of ``align`` bytes."""
    dt = np.dtype(dtype)
    nbytes = max(math.prod(shape) * dt.itemsize, 1)
    raw = np.empty(nbytes + align, dtype=np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + math.prod(shape) * dt.itemsize].view(dt).reshape(shape)


def is_aligned(a: np.ndarray, align: int = ALIGN) -> bool:
    return a.ctypes.data % align == 0


def default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover
        return max(1, os.cpu_count() or 1)


class WorkerPool:
    """``n`` persistent threads; :meth:`run` calls ``fn(k)`` on worker k (k = 1..n) and returns at once.

    :meth:`wait` blocks until every call of the last :meth:`run` returned.
    """

    def __init__(self, n: int, name: str = "glow-cpu") -> None:
        self.n = n
        self._go = [threading.Semaphore(0) for _ in range(n)]
        self._done = threading.Semaphore(0)
        self._task: Any = None
        self._stop = False
        self._threads = [threading.Thread(target=self._loop, args=(k,), name=f"{name}-{k + 1}", daemon=True)
                         for k in range(n)]
        for t in self._threads:
            t.start()

    def _loop(self, k: int) -> None:
        while True:
            self._go[k].acquire()
            if self._stop:
                return
            try:
                self._task(k + 1)
            finally:
                self._done.release()

    def run(self, task: Any) -> None:
        self._task = task
        for s in self._go:
            s.release()

    def wait(self) -> None:
        for _ in range(self.n):
            self._done.acquire()

    def close(self) -> None:
        self._stop = True
        for s in self._go:
            s.release()


def _close_pool(pool: WorkerPool | None) -> None:
    if pool is not None:
        pool.close()


class CpuExecutable(CompiledFunction):
    """A compiled function of the cpu backend: object code, region layout, worker threads."""

    def __init__(self, function: Function, library: Library, layout: Layout, constants: Mapping[str, np.ndarray],
                 *, threads: int, parallel: bool = True) -> None:
        super().__init__(function)
        self.library = library
        self.layout = layout
        self.threads = max(1, int(threads))
        self.parallel = parallel
        self._entry: EntryFn = _ENTRY_TYPE(library.address(ENTRY))
        self._get_error = _GET_ERROR_TYPE(library.address("glow_get_error"))
        self._clear_error = _CLEAR_ERROR_TYPE(library.address("glow_clear_error"))
        self._lock = threading.Lock()
        # constant region: graph payloads and the constants emitters packed at compile time
        self._consts = aligned_empty((max(layout.const_bytes, 1),), np.uint8)
        for name, off in layout.const_offsets.items():
            payload = constants.get(name)
            if payload is None:
                raise ExecutionError(f"cpu backend: constant {name} of the compiled code is missing")
            raw = np.ascontiguousarray(payload).reshape(-1).view(np.uint8)
            self._consts[off:off + raw.size] = raw
        for off, data in layout.packed:
            self._consts[off:off + len(data)] = np.frombuffer(data, dtype=np.uint8)
        self._arena = aligned_empty((max(layout.arena_bytes, 1),), np.uint8)
        self._scratch = aligned_empty((max(layout.scratch_stride, 1) * self.threads,), np.uint8)
        self._io_types: list[TensorType] = []
        self._inputs: list[tuple[int, str, TensorType]] = []
        self._outputs: list[tuple[int, str, TensorType]] = []
        for k, (role, name, _dtype, shape) in enumerate(layout.io):
            t = (self.input_types if role == "input" else self.output_types)[name]
            if tuple(t.shape) != tuple(shape):
                raise ExecutionError(f"cpu backend: io {name} has shape {list(t.shape)}, the code expects {list(shape)}")
            (self._inputs if role == "input" else self._outputs).append((REGION_IO + k, name, t))
        self._staging: dict[str, np.ndarray] = {}
        n_regions = REGION_IO + len(layout.io)
        self._regions = (ctypes.c_void_p * n_regions)()
        self._regions[0] = self._consts.ctypes.data
        self._regions[1] = self._arena.ctypes.data
        self._regions[2] = self._scratch.ctypes.data
        self._pool: WorkerPool | None = None
        self._pending: WorkerPool | None = None
        self._finalizer = weakref.finalize(self, _close_pool, None)

    # -- threads -------------------------------------------------------------------------------------
    def _workers(self, n: int) -> WorkerPool | None:
        if n <= 1:
            return None
        if self._pool is None or self._pool.n != n - 1:
            if self._pool is not None:
                if self._pending is not None:
                    self._pending.wait()
                    self._pending = None
                self._pool.close()
            self._pool = WorkerPool(n - 1)
            self._finalizer.detach()
            self._finalizer = weakref.finalize(self, _close_pool, self._pool)
        return self._pool

    def set_threads(self, n: int) -> None:
        """Use ``n`` threads from the next run on (at most the count the scratch region was sized for)."""
        if not 1 <= n <= self.threads:
            raise InputError(f"threads must be between 1 and {self.threads} (the compiled count), got {n}")
        self.threads_in_use = n

    threads_in_use: int = 0

    # -- running -------------------------------------------------------------------------------------
    def _check(self, feeds: Mapping[str, np.ndarray]) -> None:
        for _, name, t in self._inputs:
            if name not in feeds:
                raise InputError(f"missing input '{name}' ({t})")
            a = feeds[name]
            if isinstance(a, np.generic):
                a = np.asarray(a)
            if not isinstance(a, np.ndarray):
                raise InputError(f"input '{name}' must be a numpy array, got {type(a).__name__}")
            if a.dtype != t.dtype or tuple(a.shape) != tuple(t.shape):
                raise InputError(f"input '{name}' is {a.dtype}{list(a.shape)}, expected {t}")

    def execute(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self._check(feeds)
        with self._lock:
            keep: list[np.ndarray] = []
            for region, name, t in self._inputs:
                a = np.asarray(feeds[name])
                if not (a.flags.c_contiguous and is_aligned(a)):
                    buf = self._staging.get(name)
                    if buf is None:
                        buf = self._staging[name] = aligned_empty(tuple(t.shape), t.dtype)
                    np.copyto(buf, a, casting="no")
                    a = buf
                keep.append(a)
                self._regions[region] = a.ctypes.data
            outs: dict[str, np.ndarray] = {}
            for region, name, t in self._outputs:
                o = aligned_empty(tuple(t.shape), t.dtype)
                outs[name] = o
                self._regions[region] = o.ctypes.data
            self._run()
            del keep
        return outs

    def _run(self) -> None:
        n = self.threads_in_use or self.threads
        if not self.parallel:
            n = 1
        regions = ctypes.cast(self._regions, ctypes.c_void_p).value
        if self._pending is not None:
            # the workers of the previous run passed its last barrier; wait until they are back in the pool
            self._pending.wait()
            self._pending = None
        pool = self._workers(n)
        entry = self._entry
        if pool is not None:
            lib = self.library  # the task keeps the code mapped until every worker has returned from it
            pool.run(lambda k, _lib=lib: entry(regions, k, n))
        try:
            entry(regions, 0, n)
        finally:
            # the entry point ends with a barrier: when thread 0 returns, every thread finished its work
            self._pending = pool
        if self._get_error():
            self._clear_error()
            raise ExecutionError("an index is out of range for its axis (Gather / Scatter / ... indices); "
                                 "the result was not computed", hint="check the index inputs")


__all__ = ["CpuExecutable", "WorkerPool", "aligned_empty", "default_threads", "ElemKind"]
