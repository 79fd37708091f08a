"""The backend contract: what a backend implements and the core calls.

A backend package exposes a module through the entry-point group
``glow.backends``; that module implements the :func:`glow_backends` hook
(marked with :data:`hookimpl`) and returns :class:`BackendSpec` records.

Modules:

- ``glow_sdk.hookspecs``: the hook specifications (pluggy);
- ``glow_sdk.backend``: ``Backend``, ``Capability``, ``CompiledFunction``, ``CompileOptions``
  (with the core's ``build_lir`` service), ``DeviceInfo``, ``BackendSpec``;
- ``glow_sdk.version``: the SDK API version (``MAJOR.MINOR``), the compatibility message and the
  contract's history (every hook with the version it arrived in);
- ``glow_sdk.device``: the device API (SDK API 2.2): ``DeviceMemory``, ``DeviceBuffer``, ``HostMemory``;
- ``glow_sdk.options``: the backend option schema (``BackendOption``) and its check;
- ``glow_sdk.primitives``: the mandatory primitive set;
- ``glow_sdk.testing``: tolerances and comparisons (pure helpers);
- ``surface.json``: the recorded public surface of the core modules a backend reads
  (``glow_core.ir``, ``glow_core.lir``, ``glow_core.reference``), covered by the SDK API version.

The SDK sits on ``glow_core.errors``, ``glow_core.ir``, ``glow_core.lir`` and
``glow_core.reference`` and imports nothing above them (the import contract in
pyproject.toml). Developer tooling that drives the compiler (``check_node``,
capability reports, divergence, the scaffold) is ``glow_tools``.
"""

from glow_sdk.backend import (
    Backend,
    BackendSpec,
    BundleOptions,
    BundleSymbol,
    Capability,
    CompiledFunction,
    CompileOptions,
    DeviceInfo,
)
from glow_sdk.device import DeviceBuffer, DeviceMemory, HostMemory
from glow_sdk.hookspecs import PROJECT_NAME, hookimpl, hookspec
from glow_sdk.options import BackendOption
from glow_sdk.version import SDK_API_RELEASE, SDK_API_VERSION, SUPPORTED_SDK_API_VERSIONS

__all__ = [
    "PROJECT_NAME",
    "SDK_API_RELEASE",
    "SDK_API_VERSION",
    "SUPPORTED_SDK_API_VERSIONS",
    "Backend",
    "BackendOption",
    "BackendSpec",
    "Capability",
    "BundleOptions",
    "BundleSymbol",
    "CompileOptions",
    "CompiledFunction",
    "DeviceBuffer",
    "DeviceInfo",
    "DeviceMemory",
    "HostMemory",
    "hookimpl",
    "hookspec",
]
