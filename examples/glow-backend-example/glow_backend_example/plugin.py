"""Entry point module of the backend (group ``glow.backends``, name ``example``).

glow imports this module when it lists or uses backends, and calls
``glow_backends()``. Keep it light: the backend object is created by the
factory, on first use.
"""

from __future__ import annotations

from glow_backend_example import __version__
from glow_sdk import Backend, BackendSpec, hookimpl

#: the SDK API version this backend was written against: a glow that cannot load it says so
SDK_API = 2


def _make() -> Backend:
    from glow_backend_example.backend import ExampleBackend

    return ExampleBackend()


@hookimpl
def glow_backends() -> list[BackendSpec]:
    return [BackendSpec(name="example", factory=_make, sdk_api_version=SDK_API, version=__version__,
                        description="example: the mandatory primitives as numpy kernels (scaffolded)")]
