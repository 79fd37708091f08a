"""Entry point module (group ``glow.backends``, name ``interpreter``)."""

from __future__ import annotations

from glow_sdk import SDK_API_VERSION, BackendSpec, hookimpl

from glow_backend_interpreter import __version__


def _make():  # type: ignore[no-untyped-def]
    from glow_backend_interpreter.backend import InterpreterBackend

    return InterpreterBackend()


def _make_primitives():  # type: ignore[no-untyped-def]
    from glow_backend_interpreter.backend import PrimitivesInterpreterBackend

    return PrimitivesInterpreterBackend()


@hookimpl
def glow_backends() -> list[BackendSpec]:
    return [
        BackendSpec(
            name="interpreter",
            factory=_make,
            sdk_api_version=SDK_API_VERSION,
            version=__version__,
            description="numpy reference interpreter (the executable specification)",
        ),
        BackendSpec(
            name="interpreter-primitives",
            factory=_make_primitives,
            sdk_api_version=SDK_API_VERSION,
            version=__version__,
            description="the reference interpreter restricted to the primitive set (everything else is lowered)",
        ),
    ]
