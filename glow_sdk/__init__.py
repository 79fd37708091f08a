"""What a backend author imports: hook specifications, base classes, helpers.

A backend package exposes a module through the entry-point group
``glow.backends``; that module implements the :func:`glow_backends` hook
(marked with :data:`hookimpl`) and returns :class:`BackendSpec` records.
"""

from glow_sdk.backend import Backend, BackendSpec, CompiledFunction, CompileOptions, DeviceInfo
from glow_sdk.hookspecs import PROJECT_NAME, hookimpl, hookspec
from glow_sdk.version import SDK_API_VERSION, SUPPORTED_SDK_API_VERSIONS

__all__ = [
    "Backend", "BackendSpec", "CompileOptions", "CompiledFunction", "DeviceInfo", "PROJECT_NAME",
    "SDK_API_VERSION", "SUPPORTED_SDK_API_VERSIONS", "hookimpl", "hookspec",
]
