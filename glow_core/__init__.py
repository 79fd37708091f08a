"""Glow: a machine-learning compiler for heterogeneous hardware.

``glow_core.compile(model, backend="interpreter")`` imports an ONNX model,
optimizes and lowers it for the chosen backend and returns a compiled network
whose ``run(feeds)`` returns the outputs. See docs/ for the architecture.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

if TYPE_CHECKING:
    from glow_core.api import CompiledNetwork


def compile(model: Any, backend: str = "interpreter", input_shapes: Any = None, **kwargs: Any) -> "CompiledNetwork":
    """Compile an ONNX model (path or ModelProto) for a backend chosen by name."""
    from glow_core.api import compile as _compile

    return _compile(model, backend, input_shapes, **kwargs)


def profile(model: Any, data: Any, backend: str = "interpreter", input_shapes: Any = None, **kwargs: Any) -> Any:
    """Profile a model on sample data for quantization (see glow_core.quantization.profile)."""
    from glow_core.quantization.profile import profile as _profile

    return _profile(model, data, backend, input_shapes, **kwargs)


def load_bundle(directory: Any, name: str | None = None, **kwargs: Any) -> Any:
    """Link and load the ahead-of-time bundle in ``directory`` (``glow bundle``) to run it from Python."""
    from glow_core.bundle import load_bundle as _load

    return _load(directory, name, **kwargs)


__all__ = ["__version__", "compile", "load_bundle", "profile"]
