"""Glow: a machine-learning compiler for heterogeneous hardware.

``glow_core.compile(model)`` imports an ONNX model, optimizes and lowers it for a backend (the fastest
installed when none is named) and returns a compiled network whose ``run(feeds)`` returns the outputs.
``glow_core.InferenceSession(model, providers=["cpu"])`` is the same compiler behind onnxruntime's
session interface. See docs/ for the architecture.

The names here are ``glow_core.api``'s and ``glow_core.session``'s, imported on first use (``import
glow_core`` stays cheap).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from glow_core.version import __version__

if TYPE_CHECKING:
    from glow_core.api import CacheLimits, DimBound, DynamicNetwork, compile, load_bundle, profile
    from glow_core.session import (
        GraphOptimizationLevel,
        InferenceSession,
        IOBinding,
        NodeArg,
        OrtValue,
        SessionOptions,
        get_available_providers,
    )

_API = ("CacheLimits", "DimBound", "DynamicNetwork", "compile", "load_bundle", "profile")
_SESSION = ("GraphOptimizationLevel", "IOBinding", "InferenceSession", "NodeArg", "OrtValue", "SessionOptions",
            "get_available_providers")


def __getattr__(name: str) -> Any:
    """``glow_core.compile``, ``glow_core.InferenceSession`` and the rest, from their modules on first use."""
    if name in _API:
        from glow_core import api

        return getattr(api, name)
    if name in _SESSION:
        from glow_core import session

        return getattr(session, name)
    raise AttributeError(f"module 'glow_core' has no attribute {name!r}")


__all__ = ["CacheLimits", "DimBound", "DynamicNetwork", "GraphOptimizationLevel", "IOBinding", "InferenceSession", "NodeArg", "OrtValue", "SessionOptions",
           "__version__", "compile", "get_available_providers", "load_bundle", "profile"]
