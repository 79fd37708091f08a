"""The compile cache shared by the ONNX backend interface and the control-flow programs
(glow_core/controlflow/cache.py): LRU per signature, binding of shape-deciding inputs, retries."""

from __future__ import annotations

import numpy as np
import pytest

from glow_core.controlflow.cache import BindingCache
from glow_core.errors import DynamicValueError
from tests.robustness.util import run_together


def _builder(calls: list[tuple[str, ...]], decides: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    """A build that needs the inputs ``decides`` bound (else DynamicValueError naming them)."""
    def build(bound: list[str]) -> tuple[str, ...]:
        calls.append(tuple(bound))
        missing = tuple(n for n in decides if n not in bound)
        if missing:
            raise DynamicValueError("decides a shape", missing)
        return tuple(bound)
    return build


def test_lru_keeps_the_last_signatures_and_builds_again_after_eviction() -> None:
    cache = BindingCache(2)
    calls: list[tuple[str, ...]] = []
    for sig in ("a", "b", "a", "c", "a", "b"):  # "b" was evicted by "c" (a was used more recently)
        cache.get(sig, {}, _builder(calls))
    assert len(calls) == 4 and len(cache.entries()) == 2


def test_a_shape_deciding_input_is_bound_and_keyed_by_its_value() -> None:
    cache = BindingCache(8)
    calls: list[tuple[str, ...]] = []
    build = _builder(calls, ("k",))
    assert cache.get("s", {"k": np.array(3), "x": np.zeros(2)}, build) == ("k",)
    assert calls == [(), ("k",)] and cache.bound() == {"k"}
    cache.get("s", {"k": np.array(3), "x": np.ones(2)}, build)  # another x, same k: cached
    cache.get("s", {"k": np.array(4), "x": np.ones(2)}, build)  # another k: built once, bound from the start
    assert calls == [(), ("k",), ("k",)]


def test_an_unbindable_dynamic_value_is_raised() -> None:
    cache = BindingCache(8)
    with pytest.raises(DynamicValueError):
        cache.get("s", {"x": np.zeros(2)}, _builder([], ("k",)))  # "k" is not among the values


def test_threads_racing_on_the_first_build_all_get_the_result() -> None:
    cache = BindingCache(8)
    calls: list[tuple[str, ...]] = []
    build = _builder(calls, ("k",))
    results = run_together(8, lambda: cache.get("s", {"k": np.array(3)}, build))
    assert results == [("k",)] * 8
    assert 2 <= len(calls) <= 16 and cache.bound() == {"k"} and len(cache.entries()) == 1
