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
import logging
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from glow_core.errors import BackendError, UnsupportedError
from glow_core.ir.graph import Function, Node
from glow_core.ir.kinds import all_kinds
from glow_core.ir.types import ElemKind, TensorType
from glow_core.lir.ir import LIRFunction
from glow_sdk.version import SDK_API_VERSION

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
    """What the runtime needs to know of a device: its name, memory capacity (bytes) and how many there are."""

    name: str
    memory_bytes: int
    count: int = 1

    def __post_init__(self) -> None:
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


class CompiledFunction(abc.ABC):
    """An executable produced by ``Backend.compile`` for one function."""

    def __init__(self, function: Function) -> None:
        self.input_types: dict[str, TensorType] = {p.name: p.type for p in function.inputs}
        self.output_types: dict[str, TensorType] = {n: v.type for n, v in function.outputs}

    @abc.abstractmethod
    def execute(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once. ``feeds`` were already checked against ``input_types``."""


#: the attributes of a kind that fuses an activation (FusedConv, FusedMatMul: ``glow_core.ir.defs.fused``)
_ACTIVATION_ATTRS = frozenset({"activation", "clip_min", "clip_max"})


def _fused_activation(node: Node) -> str:
    """The activation a fused kind's node applies ("none" for every other kind)."""
    if not _ACTIVATION_ATTRS <= {a.name for a in node.kind.attrs}:
        return "none"
    return str(node.attrs.get("activation", "none"))


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

    def should_lower(self, node: Node) -> bool:
        """Lower this node to primitives? Default: when it is not supported natively."""
        return not self.supports(node)

    def transform_post_lowering(self, function: Function) -> bool:
        """Backend-specific graph rewrites (fusion) after lowering; return whether anything changed."""
        return False

    def create_device(self) -> DeviceInfo:
        """The device this backend drives, with its memory capacity (default: 8 GiB, one device)."""
        return DeviceInfo(name=self.name, memory_bytes=8 << 30)

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
