"""Glow: a machine-learning compiler for heterogeneous hardware.

``glow_core.compile(model, backend="interpreter")`` imports an ONNX model,
optimizes and lowers it for the chosen backend and returns a compiled network
whose ``run(feeds)`` returns the outputs. See docs/ for the architecture.

The functions here are ``glow_core.api``'s, imported on first use (``import glow_core`` stays cheap).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from glow_core.version import __version__

if TYPE_CHECKING:
    from glow_core.api import compile, load_bundle, profile

_API = ("compile", "load_bundle", "profile")


def __getattr__(name: str) -> Any:
    """``glow_core.compile`` and the rest of the facade, from ``glow_core.api`` on first use."""
    if name in _API:
        from glow_core import api

        return getattr(api, name)
    raise AttributeError(f"module 'glow_core' has no attribute {name!r}")


__all__ = ["__version__", "compile", "load_bundle", "profile"]
