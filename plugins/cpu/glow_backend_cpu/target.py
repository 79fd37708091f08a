"""The code generator of one target (the host): LLVM target machine, pass builder, object code, JIT.

One :class:`Codegen` per process and host (numba's ``CPUCodegen``): it knows
the triple, CPU name and features (AVX-512 / AVX2 / FMA when present, a
portable path otherwise), owns the target machine and data layout, and turns
one compilation unit (an ``llvmlite.ir.Module``) into object code:

    add IR -> parse -> verify -> optimize (new pass manager, O3) -> verify -> emit object

:meth:`Codegen.load` puts object code into an MCJIT engine and returns the
address of the entry point. Object code is what the on-disk cache stores
(``cache.py``), so a cached compile skips the first four steps.

External symbols the generated code calls (libm functions, ``sched_yield``)
are registered with LLVM explicitly (``llvm.add_symbol``), so resolving them
never depends on how the process was linked.

``GLOW_CPU_FEATURES`` (``avx512`` / ``avx512-novnni`` / ``avx512-noamx`` / ``avx512-nobf16`` / ``avx2`` /
``generic``) restricts the features used, to exercise the narrower paths on an AVX-512 host (``-noamx``: no
AMX tiles; ``-nobf16``: neither AMX nor AVX512-BF16, the bf16 kernels' emulation).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import llvmlite
import llvmlite.binding as llvm
from llvmlite import ir

from glow_backend_cpu import objworker
from glow_backend_cpu.emit.context import CpuTarget
from glow_core.errors import BackendError

#: the C functions generated code may call: name -> library (None: the C library)
EXTERNAL_SYMBOLS: dict[str, str] = {
    **{f: "m" for f in (
        "expf", "logf", "sinf", "cosf", "tanf", "asinf", "acosf", "atanf", "sinhf", "coshf", "tanhf",
        "asinhf", "acoshf", "atanhf", "erff", "powf", "fmodf", "log1pf", "expm1f",
        "exp", "log", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh",
        "asinh", "acosh", "atanh", "erf", "pow", "fmod", "log1p", "expm1",
    )},
    "sched_yield": "c", "syscall": "c", "memcpy": "c", "memmove": "c", "memset": "c",
}

FEATURES_ENV = "GLOW_CPU_FEATURES"

_init_lock = threading.Lock()
_initialized = False


def _init_llvm() -> None:
    global _initialized
    with _init_lock:
        if _initialized:
            return
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        llvm.initialize_all_targets()  # bundles may be cross-compiled for any target LLVM was built with
        llvm.initialize_all_asmprinters()
        _register_externals()
        _initialized = True


def _open_library(lib: str) -> ctypes.CDLL:
    """The C library ``lib`` (``m``, ``c``): glibc's soname first (``find_library`` runs ``ldconfig``, a
    process of its own), then whatever ``find_library`` finds, then this process's own symbols."""
    try:
        return ctypes.CDLL(f"lib{lib}.so.6")
    except OSError:
        path = ctypes.util.find_library(lib)
        return ctypes.CDLL(path) if path else ctypes.CDLL(None)


def _register_externals() -> None:
    libs: dict[str, ctypes.CDLL] = {}
    for name, lib in EXTERNAL_SYMBOLS.items():
        if lib not in libs:
            libs[lib] = _open_library(lib)
        try:
            fn = getattr(libs[lib], name)
        except AttributeError:
            continue
        llvm.add_symbol(name, ctypes.cast(fn, ctypes.c_void_p).value)


#: the AVX-512 levels that turn off one family: its feature name prefixes
_WITHOUT = {"avx512-novnni": ("avx512vnni",), "avx512-noamx": ("amx-",), "avx512-nobf16": ("avx512bf16", "amx-")}


def _restrict_features(features: str, level: str) -> str:
    """Turn off the feature families above ``level`` (``avx512``, ``avx512-novnni``, ``avx512-noamx``,
    ``avx512-nobf16``, ``avx2`` or ``generic``)."""
    if level in ("", "native", "avx512"):
        return features
    out = []
    for f in features.split(","):
        name = f[1:]
        if level in _WITHOUT:
            out.append("-" + name if name.startswith(_WITHOUT[level]) and f.startswith("+") else f)
            continue
        off = name.startswith("avx512") or (level == "generic" and (
            name.startswith(("avx", "fma", "f16c", "vaes", "vpclmul", "gfni", "bmi")) or name == "xop"))
        out.append("-" + name if off and f.startswith("+") else f)
    return ",".join(out)


@dataclass
class Library:
    """One compiled unit: object code and, once loaded, its execution engine."""

    name: str
    object_code: bytes
    engine: llvm.ExecutionEngine | None = None
    #: seconds per stage (parse, optimize, codegen; a parallel compile: this process's part, and the wait)
    timings: dict[str, float] = field(default_factory=dict)
    #: the object code of the other parts of a parallel compile (``compile_parallel``), loaded with it
    more_objects: list[bytes] = field(default_factory=list)

    @property
    def objects(self) -> list[bytes]:
        """Every object of the library, the first part first."""
        return [self.object_code, *self.more_objects]

    def address(self, symbol: str) -> int:
        assert self.engine is not None
        addr = int(self.engine.get_function_address(symbol))
        if not addr:
            raise BackendError(f"compiled library {self.name} has no symbol {symbol!r}")
        return addr


class Codegen:
    """LLVM for the host: target machine, data layout, pass builder, JIT."""

    def __init__(self, opt_level: int = 3, *, triple: str | None = None, cpu_name: str | None = None,
                 features: str | None = None, reloc: str = "static", codemodel: str = "jitdefault") -> None:
        """The host's code generator by default; ``triple`` / ``cpu_name`` / ``features`` choose another target
        (ahead-of-time bundles: then nothing is JIT-compiled, and ``reloc="pic"`` makes linkable objects)."""
        _init_llvm()
        host = triple is None and cpu_name is None and features is None
        self.triple = triple or llvm.get_process_triple()
        if host:
            self.cpu_name = llvm.get_host_cpu_name()
            level = os.environ.get(FEATURES_ENV, "").strip().lower()
            self.features = _restrict_features(llvm.get_host_cpu_features().flatten(), level)
            if level == "generic":
                self.cpu_name = "x86-64" if self.triple.startswith("x86_64") else "generic"
        else:
            self.cpu_name = cpu_name or ""
            self.features = features or ""
        self.opt_level = opt_level
        self.reloc, self.codemodel = reloc, codemodel
        self.is_x86 = self.triple.startswith(("x86_64", "i686", "i386"))
        self.tm = self._target_machine()
        self.data_layout = str(self.tm.target_data)
        feats = {f[1:] for f in self.features.split(",") if f.startswith("+")}
        # the wide micro-kernel geometries are x86 register files: every other target takes the 4-lane path
        lanes = (16 if "avx512f" in feats else 8 if "avx" in feats else 4) if self.is_x86 else 4
        self.target = CpuTarget(
            triple=self.triple, cpu_name=self.cpu_name, features=self.features, vector_lanes=lanes,
            has_fma=self.is_x86 and ("fma" in feats or "avx512f" in feats),
        )
        self._lock = threading.Lock()
        if host:
            _install_support(self)

    def _target_machine(self) -> llvm.TargetMachine:
        target = llvm.Target.from_triple(self.triple)
        return target.create_target_machine(cpu=self.cpu_name, features=self.features, opt=self.opt_level,
                                            reloc=self.reloc, codemodel=self.codemodel)

    @property
    def identity(self) -> str:
        """What object code depends on besides the IR (for cache keys)."""
        return f"{self.triple}|{self.cpu_name}|{self.features}|O{self.opt_level}|llvmlite {llvmlite.__version__}" \
               f"|llvm {'.'.join(map(str, llvm.llvm_version_info))}"

    def new_module(self, name: str) -> ir.Module:
        m = ir.Module(name=name)
        m.triple = self.triple
        m.data_layout = self.data_layout
        return m

    def compile_module(self, module: ir.Module, *, optimize: bool = True, text: str | None = None) -> Library:
        """add IR -> parse -> verify -> optimize -> verify -> object code (``text``: ``str(module)`` if known)."""
        return self._compile_text(module.name, str(module) if text is None else text, optimize=optimize)

    def _compile_text(self, name: str, text: str, *, optimize: bool = True) -> Library:
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        try:
            mod = llvm.parse_assembly(text)
            mod.verify()
        except RuntimeError as e:
            raise BackendError(f"generated LLVM IR of {name} is invalid: {e}",
                               hint="this is a bug in the cpu backend") from e
        timings["parse"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        if optimize:
            with self._lock:
                objworker.run_pipeline(self.tm, mod, self.opt_level)
            try:
                mod.verify()
            except RuntimeError as e:  # pragma: no cover
                raise BackendError(f"LLVM IR of {name} is invalid after optimization: {e}") from e
        timings["optimize"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        obj = self.tm.emit_object(mod)
        timings["codegen"] = time.perf_counter() - t2
        return Library(name, bytes(obj), timings=timings)

    def worker_target(self) -> objworker.Target:
        return objworker.Target(self.triple, self.cpu_name, self.features, self.opt_level, self.reloc,
                                self.codemodel)

    def compile_parallel(self, module: ir.Module, printed: dict[str, str], workers: list[objworker.Worker],
                         text: Callable[[], str], idle: Callable[[], None] | None = None,
                         stream: ParallelStream | None = None) -> Library:
        """Like :meth:`compile_module`, in parts compiled by ``workers`` and this process at once (``split.py``);
        whole when the module is small or there are no workers. ``printed``: the text of globals already printed;
        ``text``: makes the whole module's text (needed only to compile it whole); ``idle``: work for this
        process once it has no part left, while the workers may still be busy (not called for a whole module);
        ``stream``: the parts already cut off and queued while the module was generated."""
        from glow_backend_cpu.split import split_module

        if stream is not None and stream.queue is not None and stream.cutter is not None and stream.cutter.sent:
            queue = stream.queue
            queue.add(stream.cutter.rest())
        else:
            parts = split_module(module, printed, len(workers) + 1) if workers else None
            if parts is None:
                if stream is not None and stream.queue is not None:
                    stream.queue.abort()
                else:
                    objworker.release(workers)
                return self.compile_module(module, text=text())
            queue = stream.queue if stream is not None and stream.queue is not None else \
                objworker.PartQueue(workers, self.worker_target())
            for part in parts:
                queue.add(part)
        timings: dict[str, float] = {"parse": 0.0, "optimize": 0.0, "codegen": 0.0}

        def local(part: str) -> bytes:
            lib = self._compile_text(module.name, part)
            for k, v in lib.timings.items():
                timings[k] += v
            return lib.object_code

        objects = queue.finish(local, timings, idle)
        lib = Library(module.name, objects[0], more_objects=objects[1:], timings=timings)
        lib.timings["parts"] = len(objects)
        return lib

    def load(self, lib: Library) -> Library:
        """Put the library's object code into an MCJIT engine of its own."""
        empty = llvm.parse_assembly(f'target triple = "{self.triple}"\ntarget datalayout = "{self.data_layout}"\n')
        # the engine owns (and frees) its target machine: give it one of its own
        ee = llvm.create_mcjit_compiler(empty, self._target_machine())
        for obj in lib.objects:  # the parts of a parallel compile refer to each other by name
            ee.add_object_file(llvm.ObjectFileRef.from_data(obj))
        ee.finalize_object()
        lib.engine = ee
        return lib


class ParallelStream:
    """The parallel compile's pipelining: a part queue fed by the workers' threads from the start, and the
    parts that :class:`~glow_backend_cpu.split.PartCutter` cuts off while the kernels are generated
    (:meth:`on_kernel`: the code generator's hook for each new kernel)."""

    def __init__(self, codegen: Codegen, workers: list[objworker.Worker]) -> None:
        self.queue = objworker.PartQueue(workers, codegen.worker_target()) if workers else None
        self.cutter: Any = None

    def on_kernel(self, module: ir.Module, name: str) -> None:
        if self.queue is None:
            return
        if self.cutter is None:
            from glow_backend_cpu.codegen import printed_texts
            from glow_backend_cpu.split import PartCutter

            self.cutter = PartCutter(module, printed_texts(module))
        part = self.cutter.add_kernel(name)
        if part is not None:
            self.queue.add(part)

    def abandon(self) -> None:
        """Generation failed: let the workers go."""
        if self.queue is not None:
            self.queue.abort()


_support_engine: llvm.ExecutionEngine | None = None


def _install_support(cg: Codegen) -> None:
    """The run-time support functions (``support.py``), once per process."""
    global _support_engine
    with _init_lock:
        if _support_engine is None:
            from glow_backend_cpu import support

            _support_engine = support.install(cg._target_machine(), cg.triple, cg.data_layout, cg.identity)


_codegen: Codegen | None = None
_codegen_lock = threading.Lock()


def host_codegen() -> Codegen:
    """The process-wide code generator for the host."""
    global _codegen
    with _codegen_lock:
        if _codegen is None:
            _codegen = Codegen()
        return _codegen
