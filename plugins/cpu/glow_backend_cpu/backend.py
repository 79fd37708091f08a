"""The cpu backend: capabilities from the emitter tables, compile = LIR -> LLVM -> object code -> JIT.

What it runs natively is literally the set of kinds with an emitter
(``emit.context.EMITTERS``), each narrowed by the element kinds and the
predicate its emitter declares; every other node is lowered to those by the
core, and what still cannot run is reported at compile time, every node at once.

``compile`` options (``glow_core.compile(..., threads=N, options={...})``):

- ``threads``: worker threads (default: every core this process may run on);
- ``cache`` (bool, default true): the on-disk object cache (``cache.py``);
- ``profile`` (bool, default false): time every kernel (thread 0's cycle counter
  before each); ``executable.profile()`` gives seconds per kernel of the last run;
- ``parallel_threshold`` (elements, default 32768): a function that moves
  fewer elements than this in total runs on one thread (handing work to other
  threads costs more than it saves); ``GLOW_CPU_PARALLEL_THRESHOLD`` changes the default;
- ``solo_ns`` (nanoseconds, default 20000): a kernel estimated to take less than
  this on one thread runs on the calling thread alone (``workload.py``); a function
  whose kernels all do never wakes a worker. ``GLOW_CPU_SOLO_NS`` changes the
  default; ``parallel_threshold=0`` (every function on every thread) also makes it 0
  unless ``solo_ns`` is given;
- ``compile_jobs`` (default: the cores this process may run on, at most 4;
  ``GLOW_CPU_COMPILE_JOBS``): a function of at least ``SPLIT_MIN_NODES`` nodes
  whose IR is big is compiled in parts by that many processes (``jobs - 1`` workers
  and this one), the first parts while the IR is still being generated
  (``split.py``, ``objworker.py``); 1 compiles in one process;
- ``adaptive_threads`` (bool; default false, ``GLOW_CPU_ADAPTIVE=1`` makes it true unless
  ``parallel_threshold=0``): runs alternate between every thread and the calling thread
  alone until the faster is known, then keep it, trying the other again when the latency
  drifts and now and then (``runtime.ThreadChooser``). Off by default: the threads share
  each segment's work (``sync.py``), so a worker the OS deschedules leaves its shares to
  the running threads instead of stalling them, and every thread is rarely slower than one;
- ``precision`` ("fp32" or "bf16", default "fp32"): "bf16" runs the float32 GEMMs (MatMul / FusedMatMul
  with a constant weight, the GEMM path of Conv) on bf16 operands with float32 sums (``emit/bf16.py``;
  ``glow_core.compile(..., precision="bf16")``).
"""

from __future__ import annotations

import dataclasses

import os
import time
from pathlib import Path
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from glow_backend_cpu import __version__
from glow_backend_cpu import cache as object_cache
from glow_backend_cpu import objworker
from glow_backend_cpu.emit import load_all
from glow_backend_cpu.emit.amx import amx_permitted
from glow_backend_cpu.emit.bf16 import PRECISIONS
from glow_backend_cpu.emit.context import EMITTER_ELEMS, EMITTER_PREDICATES, EMITTERS, SYMBOLIC_EMITTERS
from glow_backend_cpu.glue import network_glue
from glow_backend_cpu.runtime import CpuExecutable, default_threads
from glow_backend_cpu.spill import PackedSpill
from glow_backend_cpu.target import Codegen, Library, ParallelStream, host_codegen
from glow_backend_cpu.workload import DEFAULT_SOLO_NS, SOLO_ENV
from glow_core.errors import BackendError
from glow_core.ir.graph import Function
from glow_core.ir.kinds import get_kind
from glow_core.ir.types import ElemKind
from glow_sdk.backend import (
    Backend,
    BundleOptions,
    CacheInfo,
    Capability,
    CompiledFunction,
    CompileOptions,
    DeviceInfo,
)
from glow_sdk.options import BackendOption

if TYPE_CHECKING:
    from llvmlite import ir

    from glow_backend_cpu.codegen import Layout

DEFAULT_PARALLEL_THRESHOLD = 32768
#: a function with fewer nodes is compiled in one process (starting workers would cost more than they save)
SPLIT_MIN_NODES = 48
#: overrides the default parallel threshold (0: every function runs on every thread; for tests)
THRESHOLD_ENV = "GLOW_CPU_PARALLEL_THRESHOLD"
ADAPTIVE_ENV = "GLOW_CPU_ADAPTIVE"


def _work_elements(function: Function) -> int:
    """Elements read and written by every node (a rough measure of the work)."""
    total = 0
    for n in function.nodes:
        total += sum(v.type.size for v in n.inputs if v is not None) + sum(o.type.size for o in n.outputs)
    return total


def compile_jobs(extra: Mapping[str, Any]) -> int:
    """Processes a big function's LLVM compile is split over (``compile_jobs`` option, else ``objworker.default_jobs``)."""
    jobs = extra.get("compile_jobs")
    if jobs is None:
        return objworker.default_jobs()
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise BackendError(f"cpu backend: compile_jobs must be a positive integer, got {jobs!r}")
    return jobs


def thread_options(extra: Mapping[str, Any]) -> tuple[int, float]:
    """(parallel_threshold in elements, solo_ns) from the compile options and the environment."""
    threshold = int(extra.get("parallel_threshold", os.environ.get(THRESHOLD_ENV, DEFAULT_PARALLEL_THRESHOLD)))
    default_solo = 0 if threshold == 0 else os.environ.get(SOLO_ENV, DEFAULT_SOLO_NS)
    solo = float(extra.get("solo_ns", default_solo))
    if solo < 0 or threshold < 0:
        raise BackendError(f"cpu backend: parallel_threshold and solo_ns must be >= 0, got {threshold} and {solo}")
    return threshold, solo


def adaptive_threads(extra: Mapping[str, Any], threshold: int) -> bool:
    """Does the runtime choose the thread count by measured time (``runtime.ThreadChooser``)? The option
    ``adaptive_threads``, else ``GLOW_CPU_ADAPTIVE=1`` unless ``parallel_threshold=0``."""
    return bool(extra.get("adaptive_threads", threshold > 0 and os.environ.get(ADAPTIVE_ENV, "0") == "1"))


#: the cpu backend's option schema (SDK API 2.1)
CPU_OPTIONS = (
    BackendOption("threads", int, None, "worker threads (the threads= argument wins)"),
    BackendOption("compile_jobs", int, None, "processes a big function's LLVM compile is split over"),
    BackendOption("parallel_threshold", int, DEFAULT_PARALLEL_THRESHOLD,
                  f"elements from which a kernel runs on several threads (env {THRESHOLD_ENV})"),
    BackendOption("solo_ns", float, DEFAULT_SOLO_NS, f"a kernel shorter than this runs on one thread (env {SOLO_ENV})"),
    BackendOption("adaptive_threads", bool, False, f"choose the thread count by measured time (env {ADAPTIVE_ENV})"),
    BackendOption("precision", str, "fp32", "bf16: GEMM weights and operands in bfloat16, float32 sums"),
)


def precision_of(extra: Mapping[str, Any]) -> str:
    """The ``precision`` option: "fp32" (default) or "bf16" (``emit/bf16.py``)."""
    value = extra.get("precision") or "fp32"
    if value not in PRECISIONS:
        raise BackendError(f"cpu backend: precision must be one of {', '.join(PRECISIONS)}, got {value!r}")
    return str(value)


class CpuBackend(Backend):
    fused_activations = frozenset({"none", "relu", "clip", "hardswish", "hardswish6"})
    name = "cpu"
    version = __version__
    sdk_api_version = 1

    def __init__(self) -> None:
        load_all()
        self._caps: list[Capability] | None = None
        #: the last compile's stage timings (seconds), for ``glow bench`` and tests
        self.last_compile: dict[str, Any] = {}

    def options(self) -> Sequence[BackendOption]:
        """The cpu backend's options (``glow_core.compile(..., options={...})``), besides the core's."""
        return CPU_OPTIONS

    def capabilities(self) -> Sequence[Capability]:
        if self._caps is None:
            caps = []
            for kind in sorted(EMITTERS):
                elems = EMITTER_ELEMS.get(kind, frozenset({ElemKind.FLOAT32}))
                declared = get_kind(kind).elems
                elems = frozenset(elems) & (declared | {ElemKind.BOOL, ElemKind.INT32, ElemKind.INT64})
                pred = EMITTER_PREDICATES.get(kind)
                caps.append(Capability(kind, elems, pred[0] if pred else None, pred[1] if pred else ""))
            self._caps = caps
        return self._caps

    def symbolic_kinds(self) -> frozenset[str]:
        """The kinds whose emitters read the run's sizes (``register_emitter(..., symbolic=True)``)."""
        return frozenset(SYMBOLIC_EMITTERS)

    def symbolic_bundles(self) -> bool:
        """Bundles of a model with open symbols take their sizes as entry arguments (``bundle_symbols.py``)."""
        return True

    def supported_kinds(self) -> Mapping[str, frozenset[ElemKind]]:
        out: dict[str, frozenset[ElemKind]] = {}
        for cap in self.capabilities():
            out[cap.kind] = out.get(cap.kind, frozenset()) | cap.elems
        return out

    def conformance_waivers(self) -> str | None:
        from importlib import resources

        return resources.files("glow_backend_cpu").joinpath("conformance_waivers.txt").read_text(encoding="utf-8")

    def cache_info(self) -> CacheInfo:
        """The object cache (``glow cache info``): complete entries, bytes, the LRU limit."""
        return object_cache.info()

    def clear_cache(self) -> tuple[int, int]:
        return object_cache.clear()

    def create_device(self) -> DeviceInfo:
        try:
            mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):  # pragma: no cover
            mem = 8 << 30
        return DeviceInfo(name="cpu", memory_bytes=int(mem))

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        from glow_backend_cpu.codegen import generate

        extra = dict(options.extra)
        threads = int(options.threads or extra.get("threads") or default_threads())
        use_cache = bool(extra.get("cache", True)) and object_cache.enabled()
        threshold, solo_ns = thread_options(extra)
        compile_jobs(extra)  # checked on a cache hit too
        adaptive = adaptive_threads(extra, threshold)
        profile = bool(extra.get("profile", False))
        precision = precision_of(extra)
        if precision == "bf16":
            amx_permitted()  # AMX code (from the object cache too) needs the process's permission first
        cg = host_codegen()
        timings: dict[str, Any] = {"cached": False}
        t0 = time.perf_counter()
        key = object_cache.key(function, {"debug": options.debug, "profile": profile, "solo_ns": solo_ns,
                                          **({"precision": precision} if precision != "fp32" else {})},
                               cg.identity) if use_cache else ""
        timings["key"] = time.perf_counter() - t0
        hit = object_cache.load(key) if use_cache else None
        lir = None
        image: str | None = None
        if hit is not None:
            objects, layout, path = hit
            lib = Library(function.name, objects[0], more_objects=objects[1:])
            image = str(path)
            timings["cached"] = stored = True
        else:
            # a big function compiles in parts in parallel: the workers start now, while the LIR is generated,
            # and compile the first kernels while the others are generated
            jobs = compile_jobs(extra) if len(function.nodes) >= SPLIT_MIN_NODES else 1
            workers = objworker.start(jobs - 1)
            stream = ParallelStream(cg, workers)
            # with the cache, packed constants go to the entry's image file as they are packed (``spill.py``)
            spill = PackedSpill(object_cache.cache_dir(), key) if use_cache else None
            try:
                t1 = time.perf_counter()
                lir = options.build_lir(function, debug=options.debug)
                timings["lir"] = time.perf_counter() - t1
                t2 = time.perf_counter()
                module, layout = generate(cg, lir, name=f"glow_{function.name}", profile=profile, solo_ns=solo_ns,
                                          on_kernel=stream.on_kernel, precision=precision, glue=False, spill=spill)
                timings["irgen"] = time.perf_counter() - t2
            except BaseException:
                stream.abandon()
                objworker.release(workers)
                if spill is not None:
                    spill.close()
                raise
            try:
                lib, stored = self._finish_compile(cg, module, layout, workers, stream, key, use_cache, spill)
            finally:
                if spill is not None:
                    spill.close()
            timings.update(lib.timings)
            if stored and layout.packed_bytes:
                image = str(object_cache.image_path(key))  # mapped from the file just written: no copy
        t3 = time.perf_counter()
        cg.load(lib)
        consts = {c.name: c.payload for c in function.constants}
        try:
            exe = CpuExecutable(function, lib, layout, consts, threads=threads,
                                parallel=_work_elements(function) >= threshold and layout.parallel_kernels > 0,
                                packed_image=image, adaptive=adaptive)
        except KeyError as e:  # pragma: no cover  (layout and function disagree)
            raise BackendError(f"cpu backend: compiled code does not match the function ({e})") from e
        except OSError:
            if image is None:
                raise
            # another process evicted the entry between load and mapping its image: compile afresh
            return self.compile(function, dataclasses.replace(options, extra={**extra, "cache": False}))
        timings["load"] = time.perf_counter() - t3
        exe.lir = lir  # type: ignore[attr-defined]
        exe.compile_timings = timings  # type: ignore[attr-defined]
        # what the program cache needs (``programs.py``): the object entry on disk, the executable's flags
        exe.object_key = key if stored else None  # type: ignore[attr-defined]
        exe.program_flags = {"parallel": exe.parallel, "adaptive": adaptive}  # type: ignore[attr-defined]
        self.last_compile = timings
        return exe

    @staticmethod
    def _finish_compile(cg: Codegen, module: ir.Module, layout: Layout, workers: list[Any], stream: ParallelStream,
                        key: str, use_cache: bool, spill: PackedSpill | None) -> tuple[Library, bool]:
        """LLVM on the generated module (in parallel parts), the glue linked, the entry stored in the cache; the
        library and whether it was stored."""
        from glow_backend_cpu.codegen import module_text, printed_texts

        early: list[bool] = []  # the cache's packed image, written while the workers finish their parts
        lib = cg.compile_parallel(module, printed_texts(module), workers, lambda: module_text(module),
                                  idle=lambda: early.append(use_cache and object_cache.store_image(key, layout, spill)),
                                  stream=stream)
        lib.more_objects.append(network_glue(cg))
        stored = use_cache and object_cache.store(key, lib.objects, layout, image_written=any(early), spill=spill)
        return lib, stored

    def program_identity(self, options: CompileOptions) -> str | None:
        from glow_backend_cpu import programs

        return programs.identity(options)

    def load_program(self, key: str, options: CompileOptions,
                     interface: Callable[[Mapping[str, Any]], Function | None]) -> tuple[Function, CompiledFunction] | None:
        from glow_backend_cpu import programs

        if precision_of(dict(options.extra)) == "bf16":
            amx_permitted()
        return programs.load(key, options, interface)

    def store_program(self, key: str, info: Mapping[str, Any], function: Function,
                      executable: CompiledFunction) -> bool:
        from glow_backend_cpu import programs

        return programs.store(key, info, function, executable)

    def save_bundle(self, function: Function, options: CompileOptions, bundle: BundleOptions,
                    out_dir: Path) -> list[Path]:
        """An ahead-of-time bundle: NAME.o, NAME.h, NAME.weights.bin, NAME.json (``bundle.py``)."""
        from glow_backend_cpu.bundle import save_bundle

        threshold, solo_ns = thread_options(dict(options.extra))
        return save_bundle(function, options, bundle, Path(out_dir), parallel=_work_elements(function) >= threshold,
                           solo_ns=solo_ns)
