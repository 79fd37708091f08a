"""The base classes a backend implements.

``Backend`` is the compiler side: identity (``name``, ``version``, the
``sdk_api_version`` it was built against), capabilities (node kinds x element
kinds, each optionally guarded by a predicate on attributes and shapes),
lowering decisions, post-lowering rewrites, ``compile`` and the device it
drives. ``CompiledFunction`` is the executable ``compile`` returns. The core
validates feeds (names, shapes, dtypes) before it ever calls
``CompiledFunction.execute``.

A backend declares what it runs either as a mapping (``supported_kinds()``:
kind name -> element kinds) or as :class:`Capability` records
(``capabilities()``), which may carry a predicate::

    def capabilities(self):
        return [
            Capability("Add", frozenset({ElemKind.FLOAT32})),
            Capability("MatMul", frozenset({ElemKind.FLOAT32}), when=lambda n: n.inputs[0].type.rank == 2,
                       why="2-D operands only"),
        ]

Everything else is lowered to the primitive set for it (``should_lower``) or
reported as unsupported, every offending node at once.
"""

from __future__ import annotations

import abc
import functools
import logging
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from glow_core.errors import BackendError, UnsupportedError
from glow_core.ir.graph import Function, Node
from glow_core.ir.kinds import all_kinds
from glow_core.ir.types import ElemKind, TensorType
from glow_core.lir.ir import LIRFunction
from glow_core.lir.memory import MemoryReport
from glow_sdk.device import DeviceBuffer, DeviceMemory, HostMemory
from glow_sdk.options import BackendOption, check_options
from glow_sdk.version import SDK_API_VERSION, ApiVersion

#: A predicate on a node's attributes and operand/result shapes.
NodePredicate = Callable[[Node], bool]

#: the root of every backend's on-disk cache (default ``~/.cache/glow``); backend NAME gets ``ROOT/NAME``
CACHE_DIR_ENV = "GLOW_CACHE_DIR"
#: the size limit of one backend's cache, in bytes (suffixes K, M, G: powers of 1024); default 1 GiB
CACHE_MAX_ENV = "GLOW_CACHE_MAX_BYTES"
DEFAULT_CACHE_MAX_BYTES = 1 << 30
_SIZE_SUFFIXES = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
                  "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TB": 1 << 40,
                  "TIB": 1 << 40}


def cache_root() -> Path:
    """The directory holding every backend's cache folder: ``$GLOW_CACHE_DIR`` or ``~/.cache/glow``."""
    base = os.environ.get(CACHE_DIR_ENV, "").strip()
    return Path(base).expanduser() if base else Path.home() / ".cache" / "glow"


def parse_size(text: str) -> int:
    """``1073741824``, ``512M``, ``1.5G``, ``64KiB`` -> bytes; ValueError when it is not a size."""
    t = text.strip().upper().replace(" ", "")
    num = t.rstrip("BKMGTI")
    unit = t[len(num):]
    if unit not in _SIZE_SUFFIXES or not num:
        raise ValueError(f"'{text}' is not a size (bytes, or a number with K, M, G or T)")
    try:
        value = float(num) * _SIZE_SUFFIXES[unit]
    except ValueError:
        value = float("nan")
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"'{text}' is not a size (bytes, or a number with K, M, G or T)")
    return int(value)


def cache_max_bytes() -> int:
    """The size limit of a backend cache: ``$GLOW_CACHE_MAX_BYTES`` (a warning and the default when malformed)."""
    raw = os.environ.get(CACHE_MAX_ENV, "").strip()
    if not raw:
        return DEFAULT_CACHE_MAX_BYTES
    try:
        return parse_size(raw)
    except ValueError as e:
        logging.getLogger("glow.cache").warning("%s: %s; using the default limit of %d bytes", CACHE_MAX_ENV, e,
                                                DEFAULT_CACHE_MAX_BYTES)
        return DEFAULT_CACHE_MAX_BYTES


@dataclass(frozen=True)
class CacheInfo:
    """What ``glow cache info`` shows of one backend's cache."""

    path: Path
    entries: int
    bytes: int
    #: the size limit in bytes, None when the backend sets none
    limit: int | None = None


def measure_cache_dir(path: Path) -> tuple[int, int]:
    """(files, bytes) under ``path``; files that vanish while counting are skipped."""
    files = total = 0
    for dirpath, _dirs, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
                files += 1
            except OSError:
                continue
    return files, total


def clear_cache_dir(path: Path) -> tuple[int, int]:
    """Remove everything under ``path`` (the folder stays); (files, bytes) removed. Missing files are skipped."""
    files, total = measure_cache_dir(path)
    if not path.is_dir():
        return 0, 0
    for child in list(path.iterdir()):
        try:
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink()
        except FileNotFoundError:
            continue
    return files, total


@dataclass(frozen=True)
class Capability:
    """One declared capability: a node kind, the element kinds it accepts, an optional predicate.

    A node of ``kind`` is supported when every operand and result element kind
    (index operands and boolean results included) is in ``elems`` and
    ``when(node)`` (if given) is true. ``why`` says in words what ``when``
    requires; capability reports print it.
    """

    kind: str
    elems: frozenset[ElemKind]
    when: NodePredicate | None = None
    why: str = ""

    def accepts(self, node: Node) -> bool:
        types = [v.type for v in node.inputs if v is not None] + [o.type for o in node.outputs]
        if not all(t.elem in self.elems for t in types):
            return False
        return self.when is None or bool(self.when(node))


@dataclass(frozen=True)
class BackendSpec:
    """A plugin's registration record for one backend.

    ``sdk_api_version`` is the SDK API version the backend was built against;
    the plugin host refuses (status ``incompatible``) one this glow cannot
    load, before calling ``factory``.
    """

    name: str
    factory: Callable[[], Backend]
    sdk_api_version: int
    version: str = "0"
    description: str = ""


@dataclass(frozen=True)
class DeviceInfo:
    """What the runtime needs to know of a device: its name, memory capacity (bytes), how many there are and
    (SDK API 2.1) what moving a tensor between the host and the device costs: ``bandwidth_bytes_per_s``
    (None: the device computes in host memory, moving is free) and ``latency_s`` per transfer."""

    name: str
    memory_bytes: int
    count: int = 1
    bandwidth_bytes_per_s: float | None = None
    latency_s: float = 0.0

    def transfer_seconds(self, nbytes: int) -> float:
        """The estimated time to move ``nbytes`` between the host and this device (one direction)."""
        if self.bandwidth_bytes_per_s is None:
            return 0.0
        return self.latency_s + nbytes / self.bandwidth_bytes_per_s

    def __post_init__(self) -> None:
        bandwidth = self.bandwidth_bytes_per_s
        if bandwidth is not None and not (isinstance(bandwidth, (int, float)) and bandwidth > 0):
            raise ValueError(f"device {self.name}: bandwidth_bytes_per_s must be positive or None, got {bandwidth!r}")
        if not isinstance(self.latency_s, (int, float)) or self.latency_s < 0:
            raise ValueError(f"device {self.name}: latency_s must be >= 0, got {self.latency_s!r}")
        if not isinstance(self.memory_bytes, int) or self.memory_bytes <= 0:
            raise ValueError(f"device {self.name}: memory_bytes must be a positive integer, got {self.memory_bytes!r}")
        if not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"device {self.name}: count must be >= 1, got {self.count!r}")


#: The core's LIR service: ``build(function, debug=...)`` -> a planned ``glow_core.lir.LIRFunction``.
LIRBuilder = Callable[..., "LIRFunction"]


@dataclass(frozen=True)
class CompileOptions:
    """Options passed from ``glow_core.compile`` to ``Backend.compile``, and the core's services.

    ``lir_builder`` is the core's LIR compiler (IRGen -> LIR passes -> static
    memory plan), filled in by the core (``glow_core.pipeline.compile_options``);
    a backend that consumes the low-level IR calls :meth:`build_lir` instead of
    importing the compiler (SDK API 2).
    """

    threads: int | None = None
    debug: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)
    lir_builder: LIRBuilder | None = field(default=None, compare=False, repr=False)

    def build_lir(self, function: Function, *, debug: bool | None = None) -> LIRFunction:
        """The planned low-level IR of ``function`` (``debug`` defaults to ``self.debug``: verify after each step)."""
        if self.lir_builder is None:
            raise BackendError("these CompileOptions carry no LIR service: the backend needs the low-level IR, "
                               "so compile through glow (glow_core.compile) or build the options with "
                               "glow_core.pipeline.compile_options()")
        return self.lir_builder(function, debug=self.debug if debug is None else debug)


@dataclass(frozen=True)
class BundleSymbol:
    """One symbolic dim a bundle's entry takes as an argument (SDK 2.5; docs/bundles.md, "Symbolic dims")."""

    #: the model's name for it (``dim_param``, or ``input:axis`` for an unknown dim)
    name: str
    #: the name the function's dims use: ``name``, or ``name/m`` for a step ``m`` (the size over ``m``)
    symbol: str
    #: the sizes the entry accepts: ``min..max`` in multiples of ``step`` (sizes, not quotients)
    min: int
    max: int
    step: int = 1


@dataclass(frozen=True)
class BundleOptions:
    """What ``glow bundle`` asks of :meth:`Backend.save_bundle` (an ahead-of-time bundle)."""

    #: the bundle's name: its files are NAME.*, and NAME is the C entry point
    name: str
    #: target triple (None: the host), CPU name and LLVM-style feature string (None: the target's default)
    target: str | None = None
    cpu: str | None = None
    features: str | None = None
    #: threads the bundle's entry runs on (1: no threads library needed)
    threads: int = 1
    #: put the weights inside the object instead of NAME.weights.bin
    embed_weights: bool = False
    #: also write NAME.weights.txt, the weights as a C array initializer
    weights_text: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: the entry's symbol arguments, in order (SDK 2.5): a function with symbolic dims, laid out at their
    #: bounds, reaches ``save_bundle`` only on a backend whose :meth:`Backend.symbolic_bundles` is True
    symbols: tuple[BundleSymbol, ...] = ()


class CompiledFunction(abc.ABC):
    """An executable produced by ``Backend.compile`` for one function.

    ``execute`` is the one member a backend must write. The optional features are declared here with
    their defaults (SDK API 2.1); an executable overrides those it has (as class or instance
    attributes, or methods), and the core reads them directly, never probing:

    - ``memory``: the memory plan's figures (``glow_core.lir.memory.MemoryReport``) the runtime
      accounts when it loads the executable (None: the runtime uses its graph estimate); an
      executable built for SDK API 2.0 may define it as a method returning the report;
    - ``lir``: the low-level IR the executable runs (``glow dump --lir``), None when it runs none;
    - ``threads``: the threads it runs on (None: one, or not known);
    - ``compile_timings``: compile phase -> seconds (``glow bench``), None when not measured;
    - ``close()``: release what it holds (threads, device memory); the default does nothing;
    - ``profile_run()``: an instrumented run (``glow bench --profile``); the default raises
      ``UnsupportedError``, and ``profiles`` says whether it is implemented;
    - ``execute_async(inputs, memory)`` (SDK API 2.2): a run on device buffers returning a completion
      handle (a Future); the default runs ``execute`` on host copies (``glow_sdk.device``);
    - ``strided_feeds`` (SDK API 2.6): True when ``execute`` takes feeds of any strides (a view of an
      earlier result, say, which the core then passes as it is); default False: every feed ``execute``
      receives is C-contiguous.
    """

    memory: MemoryReport | Callable[[], MemoryReport | None] | None = None
    lir: LIRFunction | None = None
    threads: int | None = None
    compile_timings: Mapping[str, Any] | None = None
    #: whether :meth:`profile_run` is implemented
    profiles: bool = False
    #: whether :meth:`execute` takes feeds of any strides (else the core makes each C-contiguous)
    strided_feeds: bool = False

    def __init__(self, function: Function) -> None:
        self.input_types: dict[str, TensorType] = {p.name: p.type for p in function.inputs}
        self.output_types: dict[str, TensorType] = {n: v.type for n, v in function.outputs}

    @abc.abstractmethod
    def execute(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once. ``feeds`` were already checked against ``input_types``."""

    def memory_plan(self) -> MemoryReport | None:
        """The ``memory`` member as a report (called when it is a method, as SDK API 2.0 executables wrote it)."""
        report = self.memory() if callable(self.memory) else self.memory
        return report if isinstance(report, MemoryReport) else None

    def close(self) -> None:
        """Release what the executable holds; it is not run again afterwards. Default: nothing to release."""

    def profile_run(self) -> Any:
        """One instrumented run's per-kernel times (``glow bench --profile``). Default: not implemented."""
        raise UnsupportedError(f"{type(self).__name__} cannot profile runs",
                               hint="compile with a backend that profiles (cpu, options={'profile': True})")

    def execute_async(self, inputs: Mapping[str, DeviceBuffer], memory: DeviceMemory) -> Future:
        """Start one run on device buffers (SDK API 2.2) and return its completion handle: a Future of the
        output buffers by name, on ``memory``. The runtime calls it for a backend whose device memory is
        resident (``DeviceMemory.resident``). Default: synchronous, :meth:`execute` on the inputs' host copies,
        the outputs copied into ``memory``; the handle is already complete."""
        done: Future = Future()
        try:
            outputs = self.execute({n: memory.copy_to_host(b) for n, b in inputs.items()})
            done.set_result({n: memory.copy_from_host(a) for n, a in outputs.items()})
        except BaseException as e:  # noqa: BLE001  (the handle carries the error)
            done.set_exception(e)
        return done


#: the attributes of a kind that fuses an activation (FusedConv, FusedMatMul: ``glow_core.ir.defs.fused``)
_ACTIVATION_ATTRS = frozenset({"activation", "clip_min", "clip_max"})


def _fused_activation(node: Node) -> str:
    """The activation a fused kind's node applies ("none" for every other kind)."""
    if not _ACTIVATION_ATTRS <= {a.name for a in node.kind.attrs}:
        return "none"
    return str(node.attrs.get("activation", "none"))


#: compile / save_bundle methods already wrapped by :func:`_checking_options`
_CHECKED: set[Callable[..., Any]] = set()


def _checking_options(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method(self, function, options, ...)`` that first checks ``options.extra`` (Backend.check_options)."""
    @functools.wraps(method)
    def checked(self: Backend, function: Function, options: CompileOptions, *args: Any, **kwargs: Any) -> Any:
        if isinstance(options, CompileOptions):
            self.check_options(options.extra)
        return method(self, function, options, *args, **kwargs)
    return checked


def connected_groups(function: Function, nodes: Sequence[Node]) -> list[list[Node]]:
    """``nodes`` in groups connected through the values they pass each other (function order kept)."""
    member = {id(n) for n in nodes}
    parent = {id(n): id(n) for n in nodes}

    def root(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for n in nodes:
        for v in n.inputs:
            src = v.producer if v is not None else None
            if src is not None and id(src) in member:
                parent[root(id(n))] = root(id(src))
    groups: dict[int, list[Node]] = {}
    for n in function.nodes:
        if id(n) in member:
            groups.setdefault(root(id(n)), []).append(n)
    return list(groups.values())


class Backend(abc.ABC):
    """A code generator / executor for one kind of device.

    Subclasses set ``name`` (and ``version``, ``sdk_api_version``), declare
    what they run with :meth:`supported_kinds` or :meth:`capabilities`, and
    implement :meth:`compile`. Everything else has a sensible default.

    A backend that consumes the low-level IR gets it from the core through the
    options, never by importing the LIR compiler (SDK API 2)::

        def compile(self, function, options):
            lir = options.build_lir(function)   # glow_core.lir.LIRFunction, memory planned
            ...

    The types it reads (``glow_core.ir``, ``glow_core.lir``, ``glow_core.reference``)
    are part of the contract: their public surface is recorded per SDK API
    version (``glow_sdk/surface.json``, checked by tests/sdk/test_surface.py).
    """

    #: the name users pass as ``--backend``
    name: str = "unnamed"
    #: the backend's own version
    version: str = "0"
    #: the SDK API version the backend was built against (write the number, not
    #: ``glow_sdk.SDK_API_VERSION``, so an incompatible glow can tell)
    sdk_api_version: int = SDK_API_VERSION
    #: the ``activation`` values of FusedConv / FusedMatMul this backend implements: the fusion pass makes
    #: no fused node with another one (a backend that adds ``"hardswish"`` here implements it as
    #: ``y * max(min((y + 3) / 6, 1), 0)`` in float32, as the reference kernel does)
    fused_activations: frozenset[str] = frozenset({"none", "relu", "clip"})
    #: what :meth:`claim` receives (SDK API 2.1): ``"lowered"``, the function prepared for the device list
    #: (lowered, optimized), or ``"high-level"``, the imported function before lowering (nodes carry their
    #: ONNX origin; every prepared node of a claimed origin that this backend supports is taken)
    claim_level: str = "lowered"
    #: the fewest nodes a partition on this backend may have (SDK API 2.1): the partitioner never offloads
    #: a smaller one, its nodes go to the next device of the list that runs them
    min_partition_nodes: int = 1

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass's ``compile`` / ``save_bundle`` see options already checked against :meth:`options`."""
        super().__init_subclass__(**kwargs)
        for name in ("compile", "save_bundle"):
            method = cls.__dict__.get(name)
            if callable(method) and method not in _CHECKED:
                wrapped = _checking_options(method)
                _CHECKED.add(wrapped)
                setattr(cls, name, wrapped)

    def options(self) -> Sequence[BackendOption]:
        """The backend's own options (``CompileOptions.extra`` keys), besides the core's
        (``glow_sdk.options.CORE_OPTIONS``). Default: none. A key neither declares is refused."""
        return ()

    def checks_options(self) -> bool:
        """Whether ``extra`` keys are checked: the backend declares a schema, or is built for SDK API 2.1+."""
        version = ApiVersion.parse(self.sdk_api_version)
        return type(self).options is not Backend.options or (version is not None and version >= ApiVersion(2, 1))

    def check_options(self, extra: Mapping[str, Any]) -> None:
        """Refuse option keys neither the core nor :meth:`options` declares, and values of the wrong type."""
        if extra and self.checks_options():
            check_options(self.name, extra, self.options())

    def claim(self, function: Function) -> Sequence[Sequence[Node]]:
        """The node groups of ``function`` this backend takes (SDK API 2.1; :attr:`claim_level` says which
        function it receives). Default: the connected groups of the nodes :meth:`supports` accepts.

        A node no earlier backend of the device list claims goes to the first one claiming it; a group
        is a unit the backend wants whole (a pattern it fuses). Claim only nodes :meth:`supports`
        accepts: they reach :meth:`compile`.
        """
        return connected_groups(function, [n for n in function.nodes if self.supports(n)])

    def supported_kinds(self) -> Mapping[str, frozenset[ElemKind]]:
        """Node kinds this backend executes, each with the element kinds it accepts.

        Override this or :meth:`capabilities` (the default of each is derived
        from the other).
        """
        if type(self).capabilities is Backend.capabilities:
            raise NotImplementedError(f"backend {self.name}: override supported_kinds() or capabilities()")
        out: dict[str, frozenset[ElemKind]] = {}
        for cap in self.capabilities():
            out[cap.kind] = out.get(cap.kind, frozenset()) | cap.elems
        return out

    def capabilities(self) -> Sequence[Capability]:
        """The declared capabilities as records (kind, element kinds, optional predicate).

        Several records may name one kind (say, float32 always, int8 only 2-D);
        a node is supported when one of them accepts it.
        """
        if type(self).supported_kinds is Backend.supported_kinds:
            raise NotImplementedError(f"backend {self.name}: override supported_kinds() or capabilities()")
        return [Capability(k, frozenset(e)) for k, e in self.supported_kinds().items()]

    @abc.abstractmethod
    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        """Compile a lowered, optimized function into an executable."""

    def save_bundle(self, function: Function, options: CompileOptions, bundle: BundleOptions,
                    out_dir: Path) -> list[Path]:
        """Write an ahead-of-time bundle of a lowered, optimized function into ``out_dir``; return its files.

        A bundle runs without Python (``glow bundle``; docs/bundles.md describes the cpu backend's format).
        A backend with its own AOT format overrides this; the default says the backend has none.
        """
        raise UnsupportedError(f"backend '{self.name}' cannot write bundles",
                               hint="use a backend that can, such as cpu (glow backends lists them)")

    def symbolic_bundles(self) -> bool:
        """Do this backend's bundles take symbolic dims as arguments of their entry (SDK 2.5)? When True, a
        model with open symbols reaches :meth:`save_bundle` as one function laid out at the bounds (as
        :meth:`symbolic_kinds` describes), with :attr:`BundleOptions.symbols`; default False: the core asks the
        user to fix every symbolic dim (``--dim``) before bundling."""
        return False

    def supports(self, node: Node) -> bool:
        """Can this node run here? A capability of its kind accepts it, its activation (a fused kind's) is
        one of :attr:`fused_activations`, and :meth:`supports_node`."""
        kind = node.kind.name
        if _fused_activation(node) not in self.fused_activations:
            return False
        if type(self).capabilities is Backend.capabilities:  # the mapping form: no predicates
            elems = self.supported_kinds().get(kind)
            if elems is None:
                return False
            types = [v.type for v in node.inputs if v is not None] + [o.type for o in node.outputs]
            return all(t.elem in elems for t in types) and self.supports_node(node)
        return any(c.kind == kind and c.accepts(node) for c in self.capabilities()) and self.supports_node(node)

    def supports_node(self, node: Node) -> bool:
        """Optional predicate on attributes and shapes (default: accept)."""
        return True

    def symbolic_kinds(self) -> frozenset[str]:
        """Node kinds whose kernels take symbolic dims (SDK 2.3; docs/dynamic-shapes.md): a function compiled
        for symbolic dims is laid out at the symbols' bounds, ``TensorType.sym`` gives each axis's run-time size,
        and a kernel of these kinds reads it (it must, where it reduces over such an axis). Nodes of other kinds
        reach the backend only where every symbolic axis is element-wise for them (the kernel may compute over
        the whole bound). Default: none -- the core compiles a specialization per input shape, and the backend
        never sees a symbolic type."""
        return frozenset()

    def should_lower(self, node: Node) -> bool:
        """Lower this node to primitives? Default: when it is not supported natively."""
        return not self.supports(node)

    def transform_post_lowering(self, function: Function) -> bool:
        """Backend-specific graph rewrites (fusion) after lowering; return whether anything changed."""
        return False

    def estimate_cost(self, node: Node) -> float | None:
        """The estimated seconds one run of ``node`` takes on this device (SDK API 2.1), or None (the default:
        no estimate; the partitioner then uses a rough figure from the node's sizes). With estimates and the
        device's transfer figures (:class:`DeviceInfo`), a partition whose tensors cost more to move than
        running it on the next device of the list is not offloaded."""
        return None

    def create_device(self) -> DeviceInfo:
        """The device this backend drives, with its memory capacity (default: 8 GiB, one device)."""
        return DeviceInfo(name=self.name, memory_bytes=8 << 30)

    def device_memory(self, ordinal: int) -> DeviceMemory:
        """The memory of this backend's device number ``ordinal`` (0, 1, ... in the device list; SDK API 2.2):
        buffers, host <-> device and device <-> device copies (``glow_sdk.device``). Default: host memory, so
        executables run on host arrays through :meth:`CompiledFunction.execute`."""
        return HostMemory(self.name, ordinal)

    def evaluate(
        self, kind: str, attrs: Mapping[str, Any], inputs: Sequence[np.ndarray | None], out_types: Sequence[TensorType]
    ) -> list[np.ndarray]:
        """Evaluate one node on host arrays (reference backends; the conformance suite's reference may use it)."""
        raise UnsupportedError(f"backend {self.name} cannot evaluate single nodes")

    def conformance_waivers(self) -> str | None:
        """The text of the backend's conformance waiver file, when it ships one.

        One waiver per line, ``CASE-ID-PATTERN: reason`` (``*`` matches any
        text; ``#`` starts a comment). ``glow conformance`` applies it unless
        ``--waivers`` names another file. Mandatory cases cannot be waived.
        """
        return None

    def cache_dir(self) -> Path:
        """The folder the core hands this backend for its on-disk cache: ``cache_root() / name``.

        Characters other than letters, digits, ``-``, ``_`` and ``.`` become
        ``_``, so no backend name reaches outside the root.
        """
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.name).strip(".")
        return cache_root() / (safe or "_")

    def cache_info(self) -> CacheInfo:
        """Entries, bytes and limit of the backend's cache (``glow cache info``).

        Default: every file under :meth:`cache_dir` is an entry, no limit. A
        backend whose entries span several files, or that bounds its cache,
        overrides this.
        """
        files, total = measure_cache_dir(self.cache_dir())
        return CacheInfo(self.cache_dir(), files, total, None)

    def clear_cache(self) -> tuple[int, int]:
        """Empty the backend's cache (``glow cache clear``); (entries, bytes) removed. Default: all of cache_dir()."""
        return clear_cache_dir(self.cache_dir())

    def program_identity(self, options: CompileOptions) -> str | None:
        """The program cache (docs/cpu-backend.md, "Cache levels"): what a compiled program depends on besides
        the model file, the compile options and the core (host, CPU features, backend version and sources,
        settings read from the environment). None (the default): the backend keeps no program cache."""
        return None

    def load_program(self, key: str, options: CompileOptions,
                     interface: Callable[[Mapping[str, Any]], Function | None]) -> tuple[Function, CompiledFunction] | None:
        """The function interface and executable stored under ``key`` by :meth:`store_program`, or None (a miss;
        never an error). ``interface`` turns the stored core ``info`` into the function's inputs and outputs
        (None: unusable info, a miss)."""
        return None

    def store_program(self, key: str, info: Mapping[str, Any], function: Function,
                      executable: CompiledFunction) -> bool:
        """Store what running ``executable`` needs under ``key``, with the core's JSON-serializable ``info``;
        False when it is not stored."""
        return False

    def capability_report(self) -> dict[str, list[str]]:
        """Kind -> supported element kinds, for every kind in the table (empty list: unsupported).

        ``glow_tools.capabilities.capability_report`` gives the full report
        (mandatory primitives missing, what is lowered, predicates).
        """
        sup = self.supported_kinds()
        return {k: sorted(e.value for e in sup.get(k, ())) for k in sorted(all_kinds())}
