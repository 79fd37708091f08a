"""The SDK API version, ``MAJOR.MINOR``: the major number changes when the Backend contract changes
incompatibly, the minor number when it grows (a new optional hook or member, with a default).

A backend declares the SDK API version it was built against (in its
:class:`~glow_sdk.backend.BackendSpec`, and as ``Backend.sdk_api_version``): an integer ``N``
(version ``N.0``; every backend written before minor numbers existed declares one) or a string
``"N.M"``. The plugin host loads only backends whose major version is in
:data:`SUPPORTED_SDK_API_VERSIONS` and whose minor version this core has; every other one is listed
as ``incompatible`` with the message of :func:`incompatibility_message`, which says which versions
work and what to upgrade.

The history of the contract is :data:`HISTORY`: every hook and feature with the version it arrived
in (``glow sdk info --history`` prints it). In words:

- 1.0: ``BackendSpec`` / ``glow_backends()`` hook; ``Backend.supported_kinds()`` or
  ``capabilities()``, ``compile()`` -> ``CompiledFunction.execute()``,
  ``supports_node``, ``should_lower``, ``transform_post_lowering``,
  ``create_device``, ``evaluate``, ``conformance_waivers``.
- 2.0: the low-level IR reaches a backend through the contract: ``CompileOptions``
  carries the core's LIR service, ``options.build_lir(function, debug=...)``
  (IRGen -> LIR passes -> static memory plan); the LIR compiler moved out of
  ``glow_core.lir`` (now data types only) into ``glow_core.lircompiler``, which
  backends do not import. The reference kernels are ``glow_core.reference``
  (``KERNELS``, ``run_kernel``). The public surface of what a backend consumes
  (``glow_core.ir``, ``glow_core.lir``, ``glow_core.reference``) is recorded in
  ``glow_sdk/surface.json`` and checked by tests: an incompatible change there bumps
  the major version, an addition the minor one (re-recorded with the history noting it). The developer tooling (``check_node``, divergence, capability
  reports, the scaffold) moved to ``glow_tools``; ``glow_sdk.testing`` keeps the
  pure tolerance and comparison helpers. Then, within 2.0: ``save_bundle``
  (ahead-of-time bundles), the on-disk cache (``cache_dir``, ``cache_info``,
  ``clear_cache``) and the program cache (``program_identity``, ``load_program``,
  ``store_program``).
  A version-1 backend still loads (version 2 only adds to ``CompileOptions``)
  unless it imported ``build_lir`` from ``glow_core.lir``: that import now fails
  and the plugin host lists the backend as ``broken`` with the import error.
- 2.1: the executable's optional features are declared members of ``CompiledFunction`` with
  defaults (``memory``, ``lir``, ``threads``, ``compile_timings``, ``close()``, ``profile_run()``);
  backend options have a declared schema (``Backend.options()``, :class:`~glow_sdk.backend.BackendOption`)
  and unknown keys are refused with the list of known ones; a backend may refuse a partition at
  compile time (``UnsupportedError``) and the runtime sends it to the next device; the claiming hook
  ``Backend.claim(function)`` with ``claim_level``; ``Backend.min_partition_nodes``; the cost hook
  ``Backend.estimate_cost(node)`` and the transfer figures ``DeviceInfo.bandwidth_bytes_per_s`` / ``latency_s``.
  Every 2.0 backend loads unchanged (2.1 only adds members with defaults; a 2.0 backend's options
  are not checked against a schema it does not declare).
- 2.2: the device API (``glow_sdk.device``): ``Backend.device_memory(ordinal)`` returns a device's
  ``DeviceMemory`` (``allocate``, ``copy_from_host``, ``copy_to_host``, ``copy_from_device`` between two
  devices of one backend, ``free``; ``resident`` says whether it is not host memory) holding
  ``DeviceBuffer`` s, and ``CompiledFunction.execute_async(inputs, memory)`` starts a run on buffers and
  returns its completion handle (a Future). Defaults: host memory, synchronous runs through ``execute``;
  every 2.1 backend runs unchanged.
- 2.3: symbolic dims (docs/dynamic-shapes.md): ``Backend.symbolic_kinds()`` names the kinds whose kernels
  read a run's sizes from ``TensorType.sym`` (a function laid out at the symbols' bounds); a backend that
  names any may receive functions with symbolic types (only element-wise use of symbolic axes by other
  kinds). Default: none; the core compiles a specialization per shape, as before.
- 2.4: weights held once (docs/dynamic-shapes.md, "The memory model"): a model file compiled by path is
  mapped, its weights read-only views of the mapping; ``glow_core.budget.release_pages()`` drops the mapped
  pages (a backend that copies weights into a form of its own calls it as it copies), ``trim_heap()``
  returns freed heap memory; ``glow_core.ir.interning.intern`` shares constants by content;
  ``glow_core.ir.symbolic.bind_symbols`` reads axes sized ``c*s`` (image plans in steps) and
  ``glow_core.reference.symbolic_sizes.is_global_pool`` names a pool over a whole symbolic extent.
- 2.5: symbolic bundles (docs/bundles.md, "Symbolic dims"): ``Backend.symbolic_bundles()`` says the backend's
  bundles take symbolic dims as arguments of their entry; such a backend receives a model with open symbols
  as one function laid out at the bounds, with ``BundleOptions.symbols`` (``BundleSymbol``: name, symbol,
  min, max, step) in the entry's order. Default False: the core asks for every dim fixed, as before.
- 2.6: ``CompiledFunction.strided_feeds``: an executable that takes feeds of any strides says so, and the core
  passes a non-contiguous array (a view of an earlier result) as it is instead of copying it contiguous.
  Default False: every feed is C-contiguous, as before.
- 2.7: the kind ``Attention`` has the attribute ``softmax_narrow``: float16 / bfloat16 operands without a wider
  ``softmax_precision`` round each step of the softmax to their type (the spec's default precision). Default
  False: the softmax runs in float32, as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The major API version this SDK defines (the core distribution is ``0.<major>.<patch>``).
SDK_API_VERSION = 2
#: The minor API version: what was added, with defaults, since ``SDK_API_VERSION.0``.
SDK_API_MINOR = 7
#: The major API versions this core can load.
SUPPORTED_SDK_API_VERSIONS = frozenset({1, 2})

#: The pip distribution of the compiler core (``glow_core``, ``glow_sdk``, the ``glow`` command). Its version is
#: ``0.<SDK_API_VERSION>.<patch>``: the minor number is the SDK API major version it defines.
CORE_DISTRIBUTION = "glow-compiler"

_TEXT = re.compile(r"^\s*(\d+)\.(\d+)\s*$")


@dataclass(frozen=True, order=True)
class ApiVersion:
    """An SDK API version, ``major.minor``."""

    major: int
    minor: int = 0

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    @classmethod
    def parse(cls, value: object) -> ApiVersion | None:
        """An integer ``N`` (``N.0``), a string ``"N.M"`` or an ApiVersion; None for anything else."""
        if isinstance(value, ApiVersion):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(value, 0)
        m = _TEXT.match(value) if isinstance(value, str) else None
        return cls(int(m.group(1)), int(m.group(2))) if m else None


#: the version this SDK defines, as ``major.minor``
SDK_API_RELEASE = ApiVersion(SDK_API_VERSION, SDK_API_MINOR)


@dataclass(frozen=True)
class Feature:
    """One hook or feature of the contract and the SDK API version it arrived in."""

    name: str
    since: ApiVersion
    what: str


def _f(name: str, since: str, what: str) -> Feature:
    version = ApiVersion.parse(since)
    assert version is not None
    return Feature(name, version, what)


#: Every hook and feature of the backend contract, with the version it arrived in (oldest first).
HISTORY: tuple[Feature, ...] = (
    _f("glow_backends", "1.0", "the plugin hook: return BackendSpec records"),
    _f("Backend.supported_kinds", "1.0", "kind -> element kinds (or Backend.capabilities)"),
    _f("Backend.capabilities", "1.0", "Capability records, optionally with a predicate"),
    _f("Backend.compile", "1.0", "a lowered function -> CompiledFunction"),
    _f("CompiledFunction.execute", "1.0", "run once on host arrays"),
    _f("Backend.supports_node", "1.0", "an extra predicate on attributes and shapes"),
    _f("Backend.should_lower", "1.0", "lower a non-primitive node?"),
    _f("Backend.transform_post_lowering", "1.0", "device-specific rewrites after lowering"),
    _f("Backend.create_device", "1.0", "DeviceInfo: name, memory, count"),
    _f("Backend.evaluate", "1.0", "evaluate one node on host arrays"),
    _f("Backend.conformance_waivers", "1.0", "the backend's waiver file"),
    _f("CompileOptions.build_lir", "2.0", "the core's LIR service (IRGen -> passes -> memory plan)"),
    _f("glow_sdk/surface.json", "2.0", "the recorded surface of glow_core.ir, .lir, .reference, .budget"),
    _f("Backend.fused_activations", "2.0", "activations of FusedConv / FusedMatMul the kernels implement"),
    _f("Backend.save_bundle", "2.0", "write an ahead-of-time bundle (BundleOptions)"),
    _f("Backend.cache_dir", "2.0", "the backend's on-disk cache folder (cache_info, clear_cache)"),
    _f("Backend.program_identity", "2.0", "the program cache: what a compiled program depends on"),
    _f("Backend.load_program", "2.0", "the program cache: load a stored executable"),
    _f("Backend.store_program", "2.0", "the program cache: store an executable"),
    _f("CompiledFunction.memory", "2.1", "declared: the memory plan (MemoryReport), default None"),
    _f("CompiledFunction.lir", "2.1", "declared: the LIR the executable runs, default None"),
    _f("CompiledFunction.threads", "2.1", "declared: threads the executable runs on, default None"),
    _f("CompiledFunction.compile_timings", "2.1", "declared: compile phase -> seconds, default None"),
    _f("CompiledFunction.close", "2.1", "declared: release resources, default no-op"),
    _f("CompiledFunction.profile_run", "2.1", "declared: an instrumented run, default UnsupportedError"),
    _f("Backend.options", "2.1", "the option schema (BackendOption); unknown keys are refused"),
    _f("partition refusal", "2.1", "compile() raising UnsupportedError sends a partition to the next device"),
    _f("Backend.claim", "2.1", "the node groups the backend takes from a graph (claim_level)"),
    _f("Backend.min_partition_nodes", "2.1", "the smallest partition worth offloading"),
    _f("Backend.estimate_cost", "2.1", "seconds one node takes on the device (the cost-aware partitioner)"),
    _f("DeviceInfo.bandwidth_bytes_per_s", "2.1", "host <-> device transfer bandwidth and latency_s"),
    _f("kind QLookup", "2.1", "surface addition: a quantized element-wise function as a 256-entry table"),
    _f("glow_core.ir.printer.format_type", "2.1", "surface addition (and format_function(dim_names=None))"),
    _f("Backend.device_memory", "2.2", "a device's memory (DeviceMemory); default host memory"),
    _f("DeviceMemory.allocate", "2.2", "a buffer for one tensor on the device"),
    _f("DeviceMemory.copy_from_host", "2.2", "host -> device: a new buffer holding an array"),
    _f("DeviceMemory.copy_to_host", "2.2", "device -> host: a buffer's contents as an array"),
    _f("DeviceMemory.copy_from_device", "2.2", "device -> device within one backend"),
    _f("DeviceMemory.free", "2.2", "release a buffer"),
    _f("DeviceMemory.resident", "2.2", "buffers live outside host memory: tensors stay on the device"),
    _f("DeviceBuffer", "2.2", "one tensor in a device's memory (type, memory, the backend's handle)"),
    _f("CompiledFunction.execute_async", "2.2", "a run on buffers returning a completion handle (Future)"),
    _f("glow_sdk.export.partition_to_onnx", "2.2", "a partition as a valid ONNX model (and split / run_parts)"),
    _f("kind DequantMatMul", "2.2", "surface addition: a float product whose weight stays int8 / uint8"),
    _f("Backend.symbolic_kinds", "2.3", "kinds whose kernels take symbolic dims (default none: specialize)"),
    _f("TensorType.sym", "2.3", "surface addition: per-axis SymExpr of a run's size (glow_core.ir.symbolic)"),
    _f("kind SymbolicValue", "2.3", "surface addition: sizes computed from a run's symbols (symbolic compiles)"),
    _f("glow_core.budget.release_pages", "2.4", "surface addition: drop mapped model files' pages (and trim_heap)"),
    _f("glow_core.ir.interning", "2.4", "surface addition: intern(array), constants shared by content"),
    _f("glow_core.reference.symbolic_sizes", "2.4", "surface addition: is_global_pool (symbolic image sizes)"),
    _f("Backend.symbolic_bundles", "2.5", "bundles that take symbolic dims as entry arguments (default False)"),
    _f("BundleOptions.symbols", "2.5", "the entry's symbol arguments (BundleSymbol: name, symbol, min, max, step)"),
    _f("CompiledFunction.strided_feeds", "2.6", "declared: execute() takes feeds of any strides, default False"),
    _f("kind Attention.softmax_narrow", "2.7", "surface addition: a float16 / bfloat16 softmax rounds each step"),
)

def _latest_minors() -> dict[int, int]:
    out: dict[int, int] = {SDK_API_VERSION: SDK_API_MINOR}
    for feature in HISTORY:
        out[feature.since.major] = max(out.get(feature.since.major, 0), feature.since.minor)
    return out


#: the newest minor version of each major version (from the history)
LATEST_MINOR: dict[int, int] = _latest_minors()


def features_of(version: object) -> list[Feature]:
    """The hooks and features a backend built for ``version`` may rely on (the history up to it)."""
    v = ApiVersion.parse(version)
    return [] if v is None else [f for f in HISTORY if f.since <= v]


def core_requirement(api_version: int = SDK_API_VERSION) -> str:
    """The requirement a backend built for SDK API ``api_version`` declares on the core distribution.

    ``glow-compiler>=0.N,<0.N+1``: any core release defining that SDK API major version, none defining another.
    """
    return f"{CORE_DISTRIBUTION}>=0.{api_version},<0.{api_version + 1}"


def is_compatible(api_version: object) -> bool:
    """Can this glow load a backend built for ``api_version`` (``N`` or ``"N.M"``)?"""
    v = ApiVersion.parse(api_version)
    return v is not None and v.major in SUPPORTED_SDK_API_VERSIONS and v.minor <= LATEST_MINOR.get(v.major, 0)


def supported_text() -> str:
    """The loadable versions in words: "version 2", "versions 1, 2 (up to 2.2)"."""
    versions = sorted(SUPPORTED_SDK_API_VERSIONS)
    return f"version{'s' if len(versions) > 1 else ''} {', '.join(str(v) for v in versions)} (up to {SDK_API_RELEASE})"


def incompatibility_message(api_version: object, distribution: str) -> str:
    """Why a backend built for ``api_version`` cannot be loaded, which versions work and what to upgrade.

    ``distribution`` names the backend's package (``glow-backend-xyz``) for the
    advice when the backend is the older side.
    """
    works = supported_text()
    v = ApiVersion.parse(api_version)
    if v is None:
        return (f"declares SDK API version {api_version!r}, which is not an integer N or a string 'N.M'; "
                f"this glow supports {works}: fix {distribution} to declare the version it was built for")
    newer = v > SDK_API_RELEASE
    todo = (f"upgrade {CORE_DISTRIBUTION} to a release that supports SDK API {api_version}" if newer
            else f"upgrade {distribution} to a release built for SDK API {SDK_API_VERSION}")
    return f"targets glow SDK API version {api_version}; this glow supports {works}: {todo}"


__all__ = [
    "CORE_DISTRIBUTION", "HISTORY", "LATEST_MINOR", "SDK_API_MINOR", "SDK_API_RELEASE", "SDK_API_VERSION",
    "SUPPORTED_SDK_API_VERSIONS", "ApiVersion", "Feature", "core_requirement", "features_of",
    "incompatibility_message", "is_compatible", "supported_text",
]
