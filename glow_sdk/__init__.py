"""What a backend author imports: hook specifications, base classes, helpers.

A backend package exposes a module through the entry-point group
``glow.backends``; that module implements the :func:`glow_backends` hook
(marked with :data:`hookimpl`) and returns :class:`BackendSpec` records.

Modules:

- ``glow_sdk.hookspecs``: the hook specifications (pluggy);
- ``glow_sdk.backend``: ``Backend``, ``Capability``, ``CompiledFunction``, ``DeviceInfo``, ...;
- ``glow_sdk.version``: the SDK API version and the compatibility message;
- ``glow_sdk.primitives``: the mandatory primitive set;
- ``glow_sdk.testing``: tolerances, comparisons, running nodes against the reference backend;
- ``glow_tools.capabilities``: the capability report of a backend;
- ``glow_tools.divergence``: which node of a model diverges first between two backends;
- ``glow_tools.scaffold``: ``glow sdk new-backend`` (a complete backend package to start from).
"""

from glow_sdk.backend import Backend, BackendSpec, Capability, CompiledFunction, CompileOptions, DeviceInfo
from glow_sdk.hookspecs import PROJECT_NAME, hookimpl, hookspec
from glow_sdk.version import SDK_API_VERSION, SUPPORTED_SDK_API_VERSIONS

__all__ = [
    "PROJECT_NAME",
    "SDK_API_VERSION",
    "SUPPORTED_SDK_API_VERSIONS",
    "Backend",
    "BackendSpec",
    "Capability",
    "CompileOptions",
    "CompiledFunction",
    "DeviceInfo",
    "hookimpl",
    "hookspec",
]
