"""The SDK API version: bumped when the Backend contract changes incompatibly.

A backend declares the SDK API version it was built against (in its
:class:`~glow_sdk.backend.BackendSpec`, and as ``Backend.sdk_api_version``).
The plugin host loads only backends whose version is in
:data:`SUPPORTED_SDK_API_VERSIONS`; every other one is listed as
``incompatible`` with the message of :func:`incompatibility_message`, which
says which versions work and what to upgrade.

History of the contract (what a backend built for each version may rely on):

- 1: ``BackendSpec`` / ``glow_backends()`` hook; ``Backend.supported_kinds()`` or
  ``capabilities()``, ``compile()`` -> ``CompiledFunction.execute()``,
  ``supports_node``, ``should_lower``, ``transform_post_lowering``,
  ``create_device``, ``evaluate``, ``conformance_waivers``.
- 2: the low-level IR reaches a backend through the contract: ``CompileOptions``
  carries the core's LIR service, ``options.build_lir(function, debug=...)``
  (IRGen -> LIR passes -> static memory plan); the LIR compiler moved out of
  ``glow_core.lir`` (now data types only) into ``glow_core.lircompiler``, which
  backends do not import. The reference kernels are ``glow_core.reference``
  (``KERNELS``, ``run_kernel``). The public surface of what a backend consumes
  (``glow_core.ir``, ``glow_core.lir``, ``glow_core.reference``) is recorded in
  ``glow_sdk/surface.json`` and checked by tests: a change there bumps this
  version. The developer tooling (``check_node``, divergence, capability
  reports, the scaffold) moved to ``glow_tools``; ``glow_sdk.testing`` keeps the
  pure tolerance and comparison helpers.
  A version-1 backend still loads (version 2 only adds to ``CompileOptions``)
  unless it imported ``build_lir`` from ``glow_core.lir``: that import now fails
  and the plugin host lists the backend as ``broken`` with the import error.
"""

from __future__ import annotations

#: The API version this SDK defines; a backend declares the one it targets.
SDK_API_VERSION = 2
#: The API versions this core can load.
SUPPORTED_SDK_API_VERSIONS = frozenset({1, 2})

#: The pip distribution of the compiler core (``glow_core``, ``glow_sdk``, the ``glow`` command). Its version is
#: ``0.<SDK_API_VERSION>.<patch>``: the minor number is the SDK API version it defines.
CORE_DISTRIBUTION = "glow-compiler"


def core_requirement(api_version: int = SDK_API_VERSION) -> str:
    """The requirement a backend built for SDK API ``api_version`` declares on the core distribution.

    ``glow-compiler>=0.N,<0.N+1``: any core release defining that SDK API version, none defining another.
    """
    return f"{CORE_DISTRIBUTION}>=0.{api_version},<0.{api_version + 1}"


def is_compatible(api_version: object) -> bool:
    """Can this glow load a backend built for ``api_version``?"""
    return isinstance(api_version, int) and not isinstance(api_version, bool) and \
        api_version in SUPPORTED_SDK_API_VERSIONS


def supported_text() -> str:
    """The loadable versions in words: "version 2", "versions 1, 2"."""
    versions = sorted(SUPPORTED_SDK_API_VERSIONS)
    return f"version{'s' if len(versions) > 1 else ''} {', '.join(str(v) for v in versions)}"


def incompatibility_message(api_version: object, distribution: str) -> str:
    """Why a backend built for ``api_version`` cannot be loaded, which versions work and what to upgrade.

    ``distribution`` names the backend's package (``glow-backend-xyz``) for the
    advice when the backend is the older side.
    """
    works = supported_text()
    if not isinstance(api_version, int) or isinstance(api_version, bool):
        return (f"declares SDK API version {api_version!r}, which is not an integer; this glow supports {works}: "
                f"fix {distribution} to declare glow_sdk.SDK_API_VERSION")
    newer = api_version > max(SUPPORTED_SDK_API_VERSIONS)
    todo = (f"upgrade {CORE_DISTRIBUTION} to a release that supports SDK API {api_version}" if newer
            else f"upgrade {distribution} to a release built for SDK API {SDK_API_VERSION}")
    return f"targets glow SDK API version {api_version}; this glow supports {works}: {todo}"


__all__ = [
    "CORE_DISTRIBUTION", "SDK_API_VERSION", "SUPPORTED_SDK_API_VERSIONS", "core_requirement", "incompatibility_message",
    "is_compatible", "supported_text",
]
