"""Running compiled code: aligned regions, input checks, a persistent pool of worker threads.

Every region the runtime allocates starts at a 64-byte boundary (numpy does not
promise that, so buffers are over-allocated and offset: :func:`aligned_empty`).
:meth:`CpuExecutable.execute` checks every feed (names, dtypes, shapes,
contiguity) *before* native code runs, so no input, however wrong, can crash the
process; a contiguous feed aligned to its element size is used in place (the
kernels read run-time operands at their element's alignment), others are copied
into an aligned staging buffer. The core passes feeds of any strides
(``strided_feeds``): a view of an earlier result is not made contiguous first.
Large outputs are written by the kernels straight into pooled page-aligned
buffers, which are handed to the caller as views (``symio.py``: a buffer is
reused only once no view of it is left), so a run's results cost no page
faults and, with symbolic dims, no copy out of the bound-shaped buffers.

Small inputs and outputs (at most :data:`SMALL_IO_BYTES`) are pre-bound: each
has an aligned buffer made once, whose address is in the region table from the
start; a run copies the feed in and returns a copy of the output (a copy of a
few KiB costs less than reading an array's address and allocating an aligned
array), so the fixed cost of a run of a small network is a few microseconds.

The entry point runs SPMD: thread 0 is the caller, threads 1..N-1 are
persistent Python threads of a :class:`WorkerPool`, each inside one ctypes
call (which releases the GIL) of the native ``glow_worker`` loop: a run is
published through a control block (a generation counter, futex wake-up) and
every thread calls the entry point with its own id; the native barrier inside
keeps them in step, and its last barrier ends the run.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from glow_backend_cpu import profiling, regions
from glow_backend_cpu.codegen import ENTRY, REGION_IO, REGION_PACKED, Layout
from glow_backend_cpu.helpers import SPLIT_ENTRIES, SPLIT_GLOBAL, SPLIT_ONE
from glow_backend_cpu.symbolic import SET_SYMBOLS, actual_shape, bind_symbols, prefix, symbol_array
from glow_backend_cpu.symio import HANDED_BYTES, HandedBuffers, copy_feeds, handed_view, zero_pages
from glow_backend_cpu.sync import CTL_BYTES, MAX_SHARES
from glow_backend_cpu.target import Library
from glow_core import budget
from glow_core.errors import ExecutionError, IndexRangeError, InputError
from glow_core.ir.graph import Function
from glow_core.ir.types import ElemKind, TensorType
from glow_core.lir.memory import MemoryReport
from glow_sdk.backend import CompiledFunction

ALIGN = 64
#: inputs and outputs up to this size are copied through buffers bound once (no per-run allocation)
SMALL_IO_BYTES = 1 << 16
EntryFn = Any  # a ctypes function (regions, tid, nthreads, run number)
_ENTRY_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32)
_GET_ERROR_TYPE = ctypes.CFUNCTYPE(ctypes.c_int32)
_SET_SYMBOLS_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_CLEAR_ERROR_TYPE = ctypes.CFUNCTYPE(None)
_WORKER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)
_RUN_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
_STOP_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype | type, align: int = ALIGN) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts at a multiple of ``align`` bytes."""
    dt = np.dtype(dtype)
    nbytes = max(math.prod(shape) * dt.itemsize, 1)
    raw = np.empty(nbytes + align, dtype=np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + math.prod(shape) * dt.itemsize].view(dt).reshape(shape)


def default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover
        return max(1, os.cpu_count() or 1)


class WorkerPool:
    """Threads 1..n of a compiled function: Python threads that each call the native ``glow_worker`` once.

    ``glow_worker`` (``sync.emit_worker_functions``) waits on the generation
    counter of the control block (spinning briefly, then sleeping on a futex)
    and runs the entry point with its thread id when ``glow_run`` publishes a
    run, so a run involves no Python (and no GIL) between the threads. ctypes
    releases the GIL for the whole life of the worker call.
    """

    def __init__(self, library: Library, n: int, name: str = "glow-cpu") -> None:
        self.n = n
        self.library = library  # keeps the code mapped while the threads run it
        self.ctl = aligned_empty((CTL_BYTES,), np.uint8)
        self.ctl[:] = 0
        worker = _WORKER_TYPE(library.address("glow_worker"))
        self._stop = _STOP_TYPE(library.address("glow_stop"))
        ctl = self.ctl.ctypes.data
        self._threads = [threading.Thread(target=worker, args=(ctl, k + 1), name=f"{name}-{k + 1}", daemon=True)
                         for k in range(n)]
        for t in self._threads:
            t.start()

    def close(self) -> None:
        """Stop the workers and wait for them (the code must stay mapped until they returned)."""
        self._stop(self.ctl.ctypes.data)
        for t in self._threads:
            if t is not threading.current_thread():
                t.join()


class ThreadChooser:
    """Picks, run after run, between all the threads and the calling thread alone, by measured time.

    On an idle machine a parallel run is faster; when other processes keep the cores busy a worker
    may be descheduled and every barrier then waits for it, so one thread can be faster. The policy:

    - *start*: the very first run is a warm-up (it starts the worker threads and touches fresh pages)
      and is not measured; ``TRIAL`` measured runs with every thread make the first pick, and a trial
      of one thread follows at once;
    - *trial*: the other count runs up to ``TRIAL`` runs and replaces the pick only if its median beats
      the median of the pick's last ``TRIAL`` runs by more than ``MARGIN`` (near-equal counts do not
      flap). A one-thread trial whose first run is slower than ``REJECT`` times that median ends there:
      on an idle machine it costs one run (a parallel trial always runs ``TRIAL`` runs: its first run
      may wake sleeping workers). Each trial decides on its own fresh runs, so a
      trial taken during a burst of load does not weigh on the next one;
    - *when*: a trial starts when the median of the pick's last ``DRIFT_RUNS`` runs leaves
      ``[reference / DRIFT, reference * DRIFT]``, the reference being the pick's median when it was
      made (the load changed: a burst ending makes a one-thread run faster too), and otherwise after
      ``EXPLORE`` runs of a parallel pick. A one-thread pick is re-tried after ``EXPLORE_MIN`` runs, an
      interval that doubles (up to ``EXPLORE``) each time a trial confirms it, so a burst of load is
      left soon after it ends while a machine that stays busy pays few trials.

    Results do not depend on the thread count (kernels split their outputs, never a sum).
    """

    TRIAL = 4
    EXPLORE = 64
    EXPLORE_MIN = 8
    DRIFT = 1.5
    DRIFT_RUNS = 3
    MARGIN = 0.05
    REJECT = 1.25

    def __init__(self, many: int) -> None:
        self.counts = (many, 1)
        #: recent run times per count (the challenger's: of the current trial only)
        self.times: dict[int, list[float]] = {many: [], 1: []}
        self.best = many
        self.reference = math.inf
        self.switches = 0
        self._trying: int | None = None
        self._interval = self.EXPLORE_MIN
        self._until = 0
        self._since_pick = 0
        self._picked = False
        self._warm = False

    @staticmethod
    def _median(times: list[float]) -> float:
        t = sorted(times)
        return t[len(t) // 2] if t else math.inf

    def next(self) -> int:
        """The thread count of the next run."""
        if self._picked and self._trying is None and self._until <= 0:
            self._trying = self.counts[1] if self.best == self.counts[0] else self.counts[0]
            self.times[self._trying] = []
        return self._trying if self._trying is not None else self.best

    def record(self, n: int, seconds: float) -> None:
        if not self._warm:
            self._warm = True
            return
        times = self.times[n]
        times.append(seconds)
        if n == self._trying:
            kept = self._median(self.times[self.best][-self.TRIAL:])
            # only a one-thread trial ends early: the first parallel run after a while wakes sleeping workers
            if len(times) >= self.TRIAL or (n == 1 and times[0] > kept * self.REJECT):
                self._end_trial(kept)
            return
        if len(times) > 2 * self.TRIAL:
            del times[0]
        if not self._picked:
            if len(times) >= self.TRIAL:
                self._picked = True
                self._pick(n)  # every thread first; the trial of one thread starts with the next run
                self._until = 0
            return
        self._until -= 1
        self._since_pick += 1
        if self._since_pick >= self.DRIFT_RUNS:
            m = self._median(times[-self.DRIFT_RUNS:])
            if m > self.reference * self.DRIFT or m * self.DRIFT < self.reference:
                self._interval = self.EXPLORE_MIN
                self._until = 0

    def _end_trial(self, kept: float) -> None:
        challenger = self._trying
        assert challenger is not None
        self._trying = None
        runs = self.times[challenger]
        if len(runs) >= self.TRIAL and self._median(runs) < kept * (1 - self.MARGIN):
            self.switches += 1
            self._interval = self.EXPLORE_MIN
            self._pick(challenger)
            return
        if self.best == self.counts[1]:
            self._interval = min(self._interval * 2, self.EXPLORE)
        self._pick(self.best)

    def _pick(self, n: int) -> None:
        """Keep ``n`` until the next trial; its reference latency is the median of its last runs."""
        self.best = n
        self.reference = self._median(self.times[n][-self.TRIAL:])
        self._since_pick = 0
        self._until = self.EXPLORE if n == self.counts[0] else self._interval


def _close_pool(pool: WorkerPool | None) -> None:
    if pool is not None:
        pool.close()


class CpuExecutable(CompiledFunction):
    """A compiled function of the cpu backend: object code, region layout, worker threads."""

    profiles = True  # profile_run() works when compiled with options={"profile": True}
    strided_feeds = True  # execute() copies or stages a feed of any strides itself

    def __init__(self, function: Function, library: Library, layout: Layout, constants: Mapping[str, np.ndarray],
                 *, threads: int, parallel: bool = True, packed_image: str | None = None,
                 adaptive: bool = True) -> None:
        super().__init__(function)
        self.library = library
        self.layout = layout
        #: (a run uses at most ``sync.MAX_SHARES`` threads: the columns of the share tables)
        self.threads = max(1, min(int(threads), MAX_SHARES))
        self.parallel = parallel
        self._entry: EntryFn = _ENTRY_TYPE(library.address(ENTRY))
        self._get_error = _GET_ERROR_TYPE(library.address("glow_get_error"))
        self._clear_error = _CLEAR_ERROR_TYPE(library.address("glow_clear_error"))
        self._lock = threading.Lock()
        limits = budget.current()
        where = f"cpu backend, function '{function.name}'"
        limits.check_total(layout.arena_bytes, where, "the activation arena")
        limits.check_total(layout.const_bytes + layout.packed_bytes, where, "the constant regions")
        limits.check_total(layout.scratch_stride * self.threads, where, "the per-thread scratch regions")
        # constant regions (graph payloads; the constants emitters packed at compile time, mapped read-only
        # from the cache file when there is one): shared with every executable of the same weights (regions.py)
        missing = [n for n in layout.const_offsets if n not in constants]
        if missing:
            raise ExecutionError(f"cpu backend: constant {missing[0]} of the compiled code is missing")
        alloc: Callable[[int], np.ndarray] = lambda n: aligned_empty((n,), np.uint8)  # noqa: E731
        self._packed_region = regions.packed_region(layout, packed_image, alloc)  # (first: frees the packed bytes)
        self._const_region = regions.const_region(layout, constants, alloc)
        self._consts = self._const_region.array
        self._packed = self._packed_region.array
        self._packed_map = self._packed_region.mapping
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
        self._regions_addr = ctypes.cast(self._regions, ctypes.c_void_p).value
        self._regions[0] = self._consts.ctypes.data
        self._regions[1] = self._arena.ctypes.data
        self._regions[2] = self._scratch.ctypes.data
        self._regions[REGION_PACKED] = self._packed.ctypes.data
        #: a function compiled for symbolic dims: glow_set_symbols (its io is bound in padded bound-shaped buffers)
        self._set_symbols = _SET_SYMBOLS_TYPE(library.address(SET_SYMBOLS)) if layout.symbols else None
        #: per integer input of such a function: the shape fed last (its padding is zeroed when it changes)
        self._fed_shapes: dict[str, tuple[int, ...]] = {}
        #: the buffers large outputs are written into and handed over in (``symio.py``)
        self._handed = HandedBuffers()
        self._bind_small_io()
        self._pool: WorkerPool | None = None
        #: chooses between every thread and one by measured run time (``ThreadChooser``); None: fixed count
        self._chooser: ThreadChooser | None = ThreadChooser(self.threads) \
            if adaptive and parallel and self.threads > 1 and not layout.profile else None
        self._run_fn = _RUN_TYPE(library.address("glow_run"))
        self._finalizer = weakref.finalize(self, _close_pool, None)

    def _bind_small_io(self) -> None:
        """Aligned buffers for the small inputs and outputs, bound to their regions once; with symbolic dims,
        every input and output, at its bound shape, carved from one anonymous mapping (``zero_pages``): its
        pages read as zeros and become resident only where a run writes, so a buffer planned for the bound
        (a KV cache of 1,024 positions) costs the memory of the positions a run holds; but a large float
        output, which a run writes into a handed buffer (``symio.py``)."""
        #: (region, name, dtype, shape, bound buffer or None when the io is large)
        self._in_plan: list[tuple[int, str, np.dtype, tuple[int, ...], np.ndarray | None]] = []
        self._out_plan: list[tuple[int, str, np.dtype, tuple[int, ...], np.ndarray | None]] = []
        ios = [(plan, region, name, t) for plan, group in ((self._in_plan, self._inputs), (self._out_plan, self._outputs))
               for region, name, t in group]
        padded = self._set_symbols is not None
        # (handed: its padding may hold any earlier run's values, so floats only, never indices)
        handed = {id(t) for plan, _, _, t in ios if padded and plan is self._out_plan and t.nbytes >= HANDED_BYTES
                  and np.dtype(t.dtype).kind == "f"}
        offsets, total = [], 0
        for *_, t in ios:
            offsets.append(total)
            total += -(-t.nbytes // ALIGN) * ALIGN if padded and id(t) not in handed else 0
        area = zero_pages(total) if padded else None
        for (plan, region, name, t), off in zip(ios, offsets):
            shape, dtype = tuple(t.shape), np.dtype(t.dtype)
            buf = None
            if id(t) in handed:
                pass  # bound to a handed buffer at each run
            elif area is not None:
                buf = area[off:off + t.nbytes].view(dtype).reshape(shape)
            elif t.nbytes <= SMALL_IO_BYTES:
                buf = aligned_empty(shape, dtype)
                buf[...] = 0
            if buf is not None:
                self._regions[region] = buf.ctypes.data
            plan.append((region, name, dtype, shape, buf))

    # -- threads -------------------------------------------------------------------------------------
    def _workers(self, n: int) -> WorkerPool | None:
        """The pool of threads 1..n-1 (made on first use; remade when n grows)."""
        if n <= 1:
            return self._pool
        if self._pool is None or self._pool.n < n - 1:
            if self._pool is not None:
                self._pool.close()
            self._pool = WorkerPool(self.library, n - 1)
            self._finalizer.detach()
            self._finalizer = weakref.finalize(self, _close_pool, self._pool)
        return self._pool

    def set_threads(self, n: int) -> None:
        """Use ``n`` threads from the next run on (at most the count the scratch region was sized for)."""
        if not 1 <= n <= self.threads:
            raise InputError(f"threads must be between 1 and {self.threads} (the compiled count), got {n}")
        self.threads_in_use = n
        self._chooser = None  # the caller decides from now on

    threads_in_use: int = 0

    def set_split(self, weights: list[float] | None) -> None:
        """Split every kernel's range over the threads in proportion to ``weights`` (one per thread of the
        next runs), pinned: the runs no longer adapt it to the threads' speeds (``balance.py``). None: an
        even split again, adapted from the next run on. Results do not depend on the split."""
        assert self.library.engine is not None
        table = (ctypes.c_int32 * SPLIT_ENTRIES).from_address(
            self.library.engine.get_global_value_address(SPLIT_GLOBAL))
        table[SPLIT_ENTRIES - 1] = 0 if weights is None else 1
        if weights is None:
            table[0] = 0
            return
        if not 1 <= len(weights) <= MAX_SHARES or min(weights) <= 0:
            raise InputError(f"set_split: one positive weight per thread (at most {MAX_SHARES}), got {weights}")
        total, acc = float(sum(weights)), 0.0
        table[1] = 0
        for t, w in enumerate(weights):
            acc += w
            table[2 + t] = SPLIT_ONE if t == len(weights) - 1 else round(SPLIT_ONE * acc / total)
        table[0] = len(weights)

    @property
    def memory(self) -> MemoryReport | None:
        """The memory plan's figures (arena, naive, lower bound), for ``glow compile --stats``."""
        return MemoryReport(**self.layout.memory) if self.layout.memory else None

    # -- profiling -----------------------------------------------------------------------------------
    def profile_run(self) -> profiling.ProfileRun:
        """Per kernel and worker thread, start and end (seconds) in the last run; needs a network compiled
        with ``options={"profile": True}`` (``profiling.py``)."""
        if not self.layout.profile:
            raise InputError("this network was not compiled with options={'profile': True}")
        if self._last_run_seconds is None:
            raise InputError("profile_run(): run the network once first")
        assert self.library.engine is not None
        if self._clock is None:
            self._clock = ctypes.CFUNCTYPE(ctypes.c_int64)(self.library.address(profiling.CLOCK_FN))
        stamps = profiling.stamp_table(self.library.engine, len(self.layout.profile), self._last_run_threads)
        return profiling.read_profile(stamps, self.layout.profile, self._last_run_threads, self._last_run_seconds,
                                      profiling.cycles_per_second(self._clock))

    def profile(self) -> list[tuple[str, float]]:
        """(kernel kinds, seconds: mean over the threads) of every kernel in the last run."""
        return [(k.kind, k.seconds) for k in self.profile_run().kernels]

    _last_run_threads: int = 1
    _last_run_seconds: float | None = None
    _clock: Any = None

    # -- running -------------------------------------------------------------------------------------
    def _check(self, feeds: Mapping[str, np.ndarray]) -> None:
        for _, name, dtype, shape, _buf in self._in_plan:
            if name not in feeds:
                raise InputError(f"missing input '{name}' ({self.input_types[name]})")
            a = feeds[name]
            if type(a) is np.ndarray and a.dtype == dtype and a.shape == shape:
                continue  # the common case, checked without building anything
            if isinstance(a, np.generic):
                a = np.asarray(a)
            if not isinstance(a, np.ndarray):
                raise InputError(f"input '{name}' must be a numpy array, got {type(a).__name__}")
            if a.dtype != dtype or tuple(a.shape) != shape:
                raise InputError(f"input '{name}' is {a.dtype}{list(a.shape)}, expected {self.input_types[name]}")

    def _take_handed(self) -> list[np.ndarray | None]:
        """Per output: the pooled buffer its kernels write this run, bound into its region (``symio.py``);
        None for an output with a buffer of its own."""
        owners: list[np.ndarray | None] = []
        for region, _name, dtype, shape, buf in self._out_plan:
            owner = None
            if buf is None:
                owner = self._handed.take(region, math.prod(shape) * dtype.itemsize)
                self._regions[region] = owner.ctypes.data
            owners.append(owner)
        return owners

    def _execute_symbolic(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A run of a function compiled for symbolic dims: the symbols from the feeds' shapes, each feed
        copied into the leading corner of its padded buffer; each output the leading corner of a handed
        buffer (large floats), or copied out of its corner."""
        assert self._set_symbols is not None
        for _, name, dtype, _shape, _buf in self._in_plan:
            a = feeds.get(name)
            if not isinstance(a, np.ndarray) or a.dtype != dtype:
                raise InputError(f"input '{name}' must be a numpy array of {dtype}, got "
                                 f"{getattr(a, 'dtype', type(a).__name__)}")
        env = bind_symbols(self.input_types, feeds)
        values = symbol_array(self.layout.symbols, env)
        with self._lock:
            self._set_symbols(values.ctypes.data)
            pairs = []
            for _region, name, dtype, _shape, buf in self._in_plan:
                a = feeds[name]
                if dtype.kind in "iub" and self._fed_shapes.get(name) != a.shape:
                    buf[...] = 0  # index inputs: the padding holds no stale (possibly out-of-range) values
                    self._fed_shapes[name] = a.shape
                pairs.append((buf[prefix(a.shape) + (Ellipsis,)], a))  # (a view, also of a 0-d buffer)
            copy_feeds(pairs, (self.threads_in_use or self.threads) if self.parallel else 1)
            owners = self._take_handed()
            self._run()
            outs: dict[str, np.ndarray] = {}
            for (_region, name, dtype, shape, buf), owner in zip(self._out_plan, owners):
                got = actual_shape(self.output_types[name], env)
                outs[name] = buf[prefix(got)].copy() if owner is None else handed_view(owner, dtype, shape, got)
            return outs

    def execute(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._set_symbols is not None:
            return self._execute_symbolic(feeds)
        self._check(feeds)
        with self._lock:
            keep: list[np.ndarray] = []
            for region, name, _dtype, shape, buf in self._in_plan:
                if buf is not None:  # small: copied into the buffer bound at construction
                    np.copyto(buf, feeds[name], casting="no")
                    continue
                a = np.asarray(feeds[name])
                # the kernels load run-time operands at their element's alignment (only scratch and packed
                # constants are read as 64-byte aligned): a contiguous array numpy calls aligned is used in
                # place (a model's inputs from np.load are 16-byte aligned: staging cost ocr-cls 3% of a run)
                if not (a.flags.c_contiguous and a.flags.aligned):
                    staged = self._staging.get(name)
                    if staged is None:
                        staged = self._staging[name] = aligned_empty(shape, a.dtype)
                    np.copyto(staged, a, casting="no")
                    a = staged
                keep.append(a)
                self._regions[region] = a.ctypes.data
            # (a graph output listed twice has two regions, each its own buffer: every buffer outlives the run)
            large = [(name, handed_view(owner, dtype, shape)) for (_r, name, dtype, shape, _b), owner
                     in zip(self._out_plan, self._take_handed()) if owner is not None]
            self._run()
            del keep
            outs: dict[str, np.ndarray] = {}
            large_it = iter(large)
            for _region, name, _dtype, _shape, buf in self._out_plan:
                outs[name] = buf.copy() if buf is not None else next(large_it)[1]
        return outs

    def _run(self) -> None:
        n = self.threads_in_use or self.threads
        if not self.parallel:
            n = 1
        elif self._chooser is not None:
            n = self._chooser.next()
        regions = self._regions_addr
        pool = self._workers(n)
        self._last_run_threads = min(n, profiling.MAX_THREADS)
        t0 = time.perf_counter()
        try:
            if pool is None:
                self._entry(regions, 0, 1, 0)
            else:
                # publishes the run to the workers and runs as thread 0; the entry point returns once every
                # share of its last segment is done, so every kernel has finished
                self._run_fn(pool.ctl.ctypes.data, regions, n)
        finally:
            self._last_run_seconds = time.perf_counter() - t0
            if self._chooser is not None:
                self._chooser.record(n, self._last_run_seconds)
        code = self._get_error()
        if code:
            self._clear_error()
            node = self.layout.error_sites.get(str(code), "")
            raise IndexRangeError(f"an index is out of range for its axis in {node or 'a Gather / Scatter'}; "
                                  "the result was not computed", node, hint="check the index inputs")


__all__ = ["CpuExecutable", "ElemKind", "WorkerPool", "aligned_empty", "default_threads"]
