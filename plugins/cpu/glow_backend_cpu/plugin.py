"""Entry point module (group ``glow.backends``, name ``cpu``)."""

from __future__ import annotations

from glow_backend_cpu import __version__
from glow_sdk import SDK_API_VERSION, BackendSpec, hookimpl


def _make():  # type: ignore[no-untyped-def]
    from glow_backend_cpu.backend import CpuBackend

    return CpuBackend()


@hookimpl
def glow_backends() -> list[BackendSpec]:
    return [
        BackendSpec(
            name="cpu",
            factory=_make,
            sdk_api_version=SDK_API_VERSION,
            version=__version__,
            description="LLVM CPU backend: specialized, vectorized, multi-threaded native code (llvmlite JIT)",
        ),
    ]
