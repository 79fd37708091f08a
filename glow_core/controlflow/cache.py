"""The compile cache of each program of a model split at run-time control flow (:mod:`.program`).

It is the pipeline's specialization cache (``glow_core.pipeline.specialize.Specializations``: an LRU keyed
by input signature and the values of the bound inputs, which binds the inputs a
:class:`~glow_core.errors.DynamicValueError` names and builds again, thread-safe), bounded by count only:
the stages it keeps are small, and their segments' networks are freed with them.
"""

from __future__ import annotations

from typing import Any, TypeVar

from glow_core.pipeline.specialize import CacheLimits, Specializations, digest, signature_key

T = TypeVar("T")

__all__ = ["BindingCache", "digest", "signature_key"]


def _no_buffers(_: Any) -> dict[int, int]:
    return {}


def _keep(_: Any) -> None:
    """Nothing to close: a stage's networks are released when the stage is."""


def BindingCache(size: int) -> Specializations[Any]:  # noqa: N802  (the name the callers have always used)
    """An LRU of ``size`` compiled results that binds shape-deciding inputs and builds again."""
    return Specializations(CacheLimits(count=size), size_of=_no_buffers, close=_keep)
