"""Compile once, run any conforming shape: a model with symbolic dims specialized lazily per input signature.

This phase compiles a static network per concrete input signature, through the one pipeline (the caller
passes ``build``: the driver's compile of the model at those shapes), and keeps the specializations in a
bounded LRU (:class:`Specializations`): by count and by bytes, evicted ones closed. The weights are
shared: every specialization's constants are views of one copy (:mod:`.weights`), so a specialization
costs its code, its arena and the few constants that depend on the shape.

The same LRU serves ``glow_core.onnx_backend`` and ``glow_core.InferenceSession``: a miss calls
``build(bound)``; a :class:`~glow_core.errors.DynamicValueError` names inputs whose values decide shapes,
which are bound (compile-time constants from the values passed) and the build is tried again. The bound
set only grows; the key is (signature, values of the bound inputs).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from glow_core.errors import DynamicValueError, ImportShapeError, InputError
from glow_core.importer.symbols import ModelSymbols
from glow_core.pipeline.batching import BatchSplitter, Importer, Separability, run_by_sample
from glow_core.pipeline.network import CompiledNetwork, CompileStats
from glow_core.pipeline.symbolic import SymbolicCompiles, SymbolicRefused, feed_env

T = TypeVar("T")

#: specializations kept by default
DEFAULT_COUNT = 8

#: how a batch of a model whose samples never meet runs (glow_core/pipeline/batching.py): ``split`` one sample at
#: a time on the batch-1 network (no compile per batch size; each sample's answer independent of its batch);
#: ``compile`` a network per batch size (one batched product per layer: faster when weights dominate, each
#: new size a compile); ``background`` split until that batch size compiles on a background thread, then
#: batched (no wait, the speed of batching; a sample's last bits may differ before and after)
BATCH_MODES = ("split", "compile", "background")


def check_batches(mode: object) -> str:
    if mode not in BATCH_MODES:
        raise InputError(f"batches must be one of {', '.join(BATCH_MODES)}, got {mode!r}")
    return str(mode)


@dataclass(frozen=True)
class CacheLimits:
    """How many specializations stay compiled: at most ``count``, and (when set) at most ``bytes`` of memory
    they hold of their own (arenas, constant regions, code buffers; a buffer several share counts once).
    The most recent one always stays, whatever its size."""

    count: int = DEFAULT_COUNT
    bytes: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.count, int) or isinstance(self.count, bool) or self.count < 1:
            raise InputError(f"the specialization cache must keep at least 1 network, got count={self.count!r}")
        if self.bytes is not None and (not isinstance(self.bytes, int) or self.bytes < 0):
            raise InputError(f"the specialization cache's byte limit must be an integer >= 0, got {self.bytes!r}")


def digest(a: np.ndarray) -> str:
    """A key for the value of a bound input (its bytes, dtype and shape)."""
    return hashlib.sha1(np.ascontiguousarray(a).tobytes()).hexdigest() + str(a.dtype) + str(a.shape)


def signature_key(feeds: Mapping[str, np.ndarray], signatures: Mapping[str, object]) -> Hashable:
    """The cache key of a compile for ``feeds``: each array's shape and dtype, and each input's signature (a
    shape, or a sequence / optional input's structure)."""
    return (tuple((n, tuple(a.shape), str(a.dtype)) for n, a in sorted(feeds.items())),
            tuple(sorted((n, repr(s)) for n, s in signatures.items())))


def _root(a: np.ndarray) -> Any:
    """The object that owns an array's memory (an ndarray, bytes, an mmap, ...)."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a


def buffers_of(net: CompiledNetwork) -> dict[int, int]:
    """The memory a compiled network holds, as {id of the owning buffer: bytes}: the arrays of its executable
    and its function's constants (a buffer shared with another network has the same id)."""
    out: dict[int, int] = {}
    arrays = [v for v in vars(net.executable).values() if isinstance(v, np.ndarray)]
    arrays += [c.payload for c in net.function.constants]
    for a in arrays:
        root = _root(a)
        size = root.nbytes if isinstance(root, np.ndarray) else a.nbytes
        out[id(root)] = max(out.get(id(root), 0), int(size))
    return out


def close_network(net: CompiledNetwork) -> None:
    """Release what a network holds beyond its memory (worker threads, devices): ``CompiledFunction.close``."""
    net.executable.close()


class Specializations(Generic[T]):
    """An LRU of compiled specializations, bounded by count and bytes; binds shape-deciding inputs (thread-safe).

    ``compiled`` counts the builds, ``evicted`` the networks dropped (and closed) to stay in bounds.
    """

    def __init__(self, limits: CacheLimits | None = None,
                 size_of: Callable[[T], dict[int, int]] = buffers_of,
                 close: Callable[[T], None] = close_network) -> None:
        self.limits = limits or CacheLimits()
        self.compiled = 0
        self.evicted = 0
        self._size_of = size_of
        self._close = close
        self._bound: set[str] = set()
        self._entries: OrderedDict[Hashable, tuple[T, dict[int, int]]] = OrderedDict()
        self._lock = threading.Lock()
        self._inflight: set[Hashable] = set()
        self._pool: ThreadPoolExecutor | None = None

    def bound(self) -> set[str]:
        """The inputs found to decide shapes so far."""
        with self._lock:
            return set(self._bound)

    def bind(self, names: set[str] | list[str]) -> None:
        """Treat ``names`` as inputs that decide shapes from now on."""
        with self._lock:
            self._bound.update(names)

    def entries(self) -> list[T]:
        """The specializations kept, oldest first."""
        with self._lock:
            return [e for e, _ in self._entries.values()]

    def nbytes(self) -> int:
        """Bytes the kept specializations hold (each shared buffer once)."""
        with self._lock:
            return self._total()

    def _total(self) -> int:
        merged: dict[int, int] = {}
        for _, sizes in self._entries.values():
            merged.update(sizes)
        return sum(merged.values())

    def set_limits(self, limits: CacheLimits) -> None:
        """New bounds; specializations beyond them are evicted now."""
        with self._lock:
            self.limits = limits
            dropped = self._shrink()
        for net in dropped:
            self._close(net)

    def _shrink(self) -> list[T]:
        """Drop the least recently used entries beyond the bounds (never the last one); returns them."""
        dropped: list[T] = []
        limit = self.limits.bytes
        while len(self._entries) > 1 and (len(self._entries) > self.limits.count or
                                          (limit is not None and self._total() > limit)):
            dropped.append(self._entries.popitem(last=False)[1][0])
        self.evicted += len(dropped)
        return dropped

    def _key(self, signature: Hashable, values: Mapping[str, np.ndarray]) -> tuple[Hashable, list[str]]:
        with self._lock:
            bound = sorted(n for n in self._bound if n in values)
        return (signature, tuple((n, digest(values[n])) for n in bound)), bound

    def peek(self, signature: Hashable, values: Mapping[str, np.ndarray]) -> T | None:
        """The specialization for ``signature`` when it is compiled (marked recently used), else None."""
        key, _ = self._key(signature, values)
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                return None
            self._entries.move_to_end(key)
            return hit[0]

    def build_later(self, signature: Hashable, values: Mapping[str, np.ndarray],
                    build: Callable[[list[str]], T]) -> None:
        """Compile the specialization for ``signature`` on a background thread (one at a time; a signature
        already compiled or in flight is skipped); a failure there is dropped (the caller runs without it)."""
        key, _ = self._key(signature, values)
        with self._lock:
            if key in self._entries or key in self._inflight:
                return
            self._inflight.add(key)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="glow-specialize")
            pool = self._pool
        kept = dict(values)

        def work() -> None:
            try:
                self.get(signature, kept, build)
            except Exception:  # noqa: BLE001  (an optimization: the foreground path serves the shape anyway)
                pass
            finally:
                with self._lock:
                    self._inflight.discard(key)
        pool.submit(work)

    def wait(self) -> None:
        """Wait for the background compiles submitted so far."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def get(self, signature: Hashable, values: Mapping[str, np.ndarray], build: Callable[[list[str]], T]) -> T:
        """The specialization for ``signature`` and the values of the bound inputs among ``values``; on a miss
        ``build(bound input names)`` compiles it."""
        while True:
            key, bound = self._key(signature, values)  # (other threads add to _bound while this one compiles)
            with self._lock:
                hit = self._entries.get(key)
                if hit is not None:
                    self._entries.move_to_end(key)
                    return hit[0]
            try:
                result = build(bound)
            except DynamicValueError as e:
                # new relative to what this attempt bound (another thread may have bound them meanwhile);
                # each retry binds strictly more, so the loop ends
                new = [p for p in e.placeholders if p in values and p not in bound]
                if not new:
                    raise
                self.bind(new)
                continue
            return self._add(key, result)

    def _add(self, key: Hashable, result: T) -> T:
        sizes = self._size_of(result)
        with self._lock:
            self.compiled += 1
            self._entries[key] = (result, sizes)
            dropped = self._shrink()
        for net in dropped:
            self._close(net)
        return result

    def clear(self) -> None:
        """Drop (and close) every specialization (after the background compiles in flight)."""
        self.wait()
        with self._lock:
            dropped = [e for e, _ in self._entries.values()]
            self._entries.clear()
        for net in dropped:
            self._close(net)


#: what a CompiledNetwork has that belongs to one static shape (asked of a DynamicNetwork: ImportShapeError;
#: ``plan``: the partition plan of a network compiled on devices)
STATIC_ONLY = frozenset({"input_types", "function", "executable", "backend", "check_feeds", "plan"})

#: what a dynamic network calls to compile one specialization: (input shapes, bound input values) -> network
Build = Callable[[dict[str, tuple[int, ...]], dict[str, np.ndarray]], CompiledNetwork]


def _first_sample(arrays: dict[str, np.ndarray], batched: Collection[str]) -> dict[str, np.ndarray]:
    """The feeds of a batch's first sample (the batched inputs cut to their first row)."""
    return {n: (a[:1] if n in batched else a) for n, a in arrays.items()}


class DynamicNetwork:
    """A model with symbolic dims, compiled once: ``run`` (or calling it) accepts every conforming shape.

    A batch (inputs whose leading axis is a symbol) of a model that treats its samples independently runs one
    sample at a time on the batch-1 network (:mod:`.batching`; ``batches``: :data:`BATCH_MODES`), so no batch
    size compiles anything new. Each other new input signature compiles a specialization (lazily, through the one pipeline)
    kept in a bounded LRU; ``specializations_compiled`` counts them. ``input_dims`` shows each input's declared dims with its
    symbols (``float32[batch,3,?,?]``); feeds are checked against them (fixed sizes, sizes fixed by
    ``dims=``, bounds) before anything compiles.
    """

    def __init__(self, symbols: ModelSymbols, output_names: list[str], build: Build,
                 limits: CacheLimits | None = None, importer: Importer | None = None,
                 symbolic: SymbolicCompiles | None = None) -> None:
        self.symbols = symbols
        #: the compiles for symbolic dims (None: the backend takes none; every shape specializes)
        self.symbolic = symbolic
        self.output_names = list(output_names)
        self.input_dims: dict[str, str] = {n: i.describe() for n, i in symbols.inputs.items()}
        self._build = build
        #: imports the model at given input shapes (None: none given; batches are never split)
        self.importer = importer
        self.cache: Specializations[CompiledNetwork] = Specializations(limits)
        self._last_stats = CompileStats()  # (not the network: an evicted one must be freed)
        #: decides which batches run one sample at a time (None without an importer: each batch size compiles)
        self._splitter = BatchSplitter(symbols, importer) if importer is not None else None
        #: how a batch of a separable model runs (:data:`BATCH_MODES`)
        self.batches = "split"

    @property
    def specializations_compiled(self) -> int:
        """How many specializations were compiled so far (evicted ones included)."""
        return self.cache.compiled

    @property
    def specializations(self) -> list[CompiledNetwork]:
        """The specializations kept, least recently used first."""
        return self.cache.entries()

    @property
    def stats(self) -> CompileStats:
        """The compile statistics of the specialization run last (empty before the first run)."""
        return self._last_stats

    def set_cache_limits(self, count: int = DEFAULT_COUNT, bytes: int | None = None) -> None:
        """Keep at most ``count`` specializations and ``bytes`` of their own memory; the rest are freed now."""
        self.cache.set_limits(CacheLimits(count, bytes))

    def describe_inputs(self) -> str:
        return ", ".join(f"{n}: {t}" for n, t in self.input_dims.items()) or "(no inputs)"

    def _arrays(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        if not isinstance(feeds, Mapping):
            raise InputError(f"run() takes a dict of input name -> numpy array, got {type(feeds).__name__}",
                             hint=f"the network takes {self.describe_inputs()}")
        missing = [n for n in self.input_dims if n not in feeds]
        unknown = [str(n) for n in feeds if n not in self.input_dims]
        if missing or unknown:
            what = (["missing input(s) " + ", ".join(f"'{n}'" for n in missing)] if missing else []) + \
                (["unknown input(s) " + ", ".join(f"'{n}'" for n in unknown)] if unknown else [])
            raise InputError("; ".join(what) + f"; the network takes {self.describe_inputs()}")
        out: dict[str, np.ndarray] = {}
        for name in self.input_dims:
            value = feeds[name]
            try:
                out[name] = value if isinstance(value, np.ndarray) else np.asarray(value)
            except (TypeError, ValueError) as e:
                raise InputError(f"input '{name}' cannot be converted to an array: {e}") from None
            self.symbols.check(name, tuple(out[name].shape), InputError)
        return out

    def symbolic_network(self, shapes: Mapping[str, tuple[int, ...]], *, eager: bool = False) -> CompiledNetwork | None:
        """The network compiled for symbolic dims that runs ``shapes`` (compiled now when none does yet); None
        when the model or the backend cannot have one (``symbolic.py``: the reasons are in
        ``self.symbolic.refused``). ``eager``: ``shapes`` are made up, not fed (``SymbolicCompiles.candidates``)."""
        sym = self.symbolic
        if sym is None or self.cache.bound():
            return None
        for plan in sym.candidates(feed_env(self.symbols, shapes), eager=eager):
            if sym.free_set(plan) in sym.disabled and plan not in sym.plans:
                continue
            key = ("symbolic", plan)
            net = self.cache.peek(key, {})
            if net is None:
                try:
                    net = self.cache.get(key, {}, lambda _bound, p=plan: sym.compile(p))
                except SymbolicRefused as e:
                    sym.refuse(plan, e)
                    continue
            sym.compiled(plan)
            return net
        return None

    def specialization(self, feeds: Mapping[str, Any]) -> CompiledNetwork:
        """The network that runs ``feeds``: the symbolic one when there is one (``symbolic_network``), else the
        specialization for their shapes (compiled now when it is new)."""
        return self._specialization(self._arrays(feeds))

    def _specialization(self, arrays: dict[str, np.ndarray]) -> CompiledNetwork:
        """``specialization`` of feeds already checked (``_arrays``)."""
        shapes = {n: tuple(a.shape) for n, a in arrays.items()}
        net = self.symbolic_network(shapes)
        if net is not None:
            self._last_stats = net.stats
            return net
        net = self.cache.get(signature_key(arrays, {}), arrays,
                             lambda bound: self._build({n: s for n, s in shapes.items() if n not in bound},
                                                       {n: arrays[n] for n in bound}))
        self._last_stats = net.stats
        return net

    def precompile(self, shapes: Mapping[str, Any]) -> CompiledNetwork:
        """Compile now the network that feeds of these shapes (input name -> shape) will run on, so that no
        run pays for it later (nothing happens when it is compiled already): the prefill and the decode step
        of a generation loop, say, before the loop. A batch of a separable model precompiles its one-sample
        network, as ``run`` would use it. Returns that network. (An input whose values decide shapes is
        compiled for zeros; feeds with other values compile again when run.)"""
        if not isinstance(shapes, Mapping):
            raise InputError(f"precompile() takes a dict of input name -> shape, got {type(shapes).__name__}",
                             hint=f"the network takes {self.describe_inputs()}")
        feeds: dict[str, Any] = {}
        for name, shape in shapes.items():
            inp = self.symbols.inputs.get(name)
            try:
                dims = tuple(int(d) for d in shape)
                dtype = np.dtype(inp.elem) if inp is not None else np.float32
            except (TypeError, ValueError) as e:
                raise InputError(f"precompile(): input '{name}': {e}",
                                 hint="give each input's shape as a tuple of ints, e.g. {'ids': (1, 32)}") from None
            if any(d < 0 for d in dims):
                raise InputError(f"precompile(): input '{name}' has a negative size in {list(dims)}")
            feeds[name] = np.zeros(dims, dtype)  # (calloc: no page is touched)
        arrays = self._arrays(feeds)
        split = self._by_sample(arrays)
        return self._specialization(arrays if split is None else _first_sample(arrays, split[1]))

    def _by_sample(self, arrays: dict[str, np.ndarray]) -> tuple[int, set[str]] | None:
        """(samples, the batched inputs) when ``arrays`` (checked feeds) run one sample at a time, else None."""
        count = self._splitter.count(arrays) if self._splitter is not None else 1
        if count > 1 and check_batches(self.batches) != "compile" and self._separability(arrays).separable:
            assert self._splitter is not None
            return count, self._splitter.batched
        return None

    def separability(self, feeds: Mapping[str, Any]) -> Separability:
        """Can ``feeds`` (a batch on the leading axis) run one sample at a time on the batch-1 network?
        Decided once per shape of a sample (glow_core/pipeline/batching.py)."""
        return self._separability(self._arrays(feeds))

    def _separability(self, arrays: dict[str, np.ndarray]) -> Separability:
        """``separability`` of feeds already checked (``_arrays``)."""
        if self._splitter is None or self.cache.bound():
            return Separability("inputs decide shapes, or the network has no importer: every batch size compiles")
        return self._splitter.separability(arrays)

    def run(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Check ``feeds`` against the inputs' dims, run them (a batch of a separable model: one sample at a time
        on the batch-1 network; otherwise the network compiled for their shapes, compiled now when new)."""
        arrays = self._arrays(feeds)
        split = self._by_sample(arrays)
        if split is not None:
            count, batched = split
            shapes = {n: tuple(a.shape) for n, a in arrays.items()}
            net = self.cache.peek(signature_key(arrays, {}), arrays)
            if net is None:  # not compiled for this batch size: one sample at a time, meanwhile compile it
                if self.batches == "background":
                    self.cache.build_later(signature_key(arrays, {}), arrays, lambda bound: self._build(shapes, {}))
                first = self._specialization(_first_sample(arrays, batched))
                return run_by_sample(lambda f: first.run({n: v for n, v in f.items() if n in first.input_types}),
                                     arrays, batched, count)
            return net.run({n: v for n, v in arrays.items() if n in net.input_types})
        net = self._specialization(arrays)
        return net.run({n: v for n, v in arrays.items() if n in net.input_types})

    __call__ = run

    def close(self) -> None:
        """Free every specialization."""
        self.cache.clear()

    def __getattr__(self, name: str) -> Any:
        """A clear error for what only one compiled shape has (``input_types``, ``function``, ...)."""
        if name in STATIC_ONLY:
            raise ImportShapeError(
                f"the network has symbolic dims ({self.describe_inputs()}): '{name}' belongs to one compiled shape",
                hint="fix them with dims={SYMBOL: N} (--dim SYMBOL=N) or input_shapes (--input-shape), or take "
                     "one shape's network with net.specialization(feeds)")
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
