"""Helpers for pass tests: build functions, run them on the interpreter, apply passes in debug mode.

Every pass test follows one shape: run the function on random inputs, apply the
pass (verified after every pass: ``PassContext(debug=True)``), check a
structural property, run again and compare.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from glow_backend_interpreter.backend import InterpreterBackend, PrimitivesInterpreterBackend

from glow_core.pipeline import compile_options
from glow_core.ir.graph import Function
from glow_core.passes import PassContext, PassManager
from glow_core.passinfra import Step

F32 = np.float32


def run(fn: Function, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Execute ``fn`` as it is now on the reference interpreter."""
    fn.verify()
    return InterpreterBackend().compile(fn, compile_options()).execute(dict(feeds))


def random_feeds(fn: Function, seed: int = 0) -> dict[str, np.ndarray]:
    """Normal floats (some negative, so activations matter), small integers, random bools."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for p in fn.inputs:
        dt = p.type.dtype
        if dt.kind == "f" or dt.kind == "V":
            feeds[p.name] = rng.standard_normal(p.type.shape).astype(dt)
        elif dt.kind == "b":
            feeds[p.name] = rng.random(p.type.shape) < 0.5
        else:
            feeds[p.name] = rng.integers(-5 if dt.kind == "i" else 0, 10, p.type.shape).astype(dt)
    return feeds


def apply(fn: Function, *steps: Step, backend: Any = None, options: Mapping[str, object] | None = None) -> PassContext:
    """Run ``steps`` on ``fn`` verifying after every pass (``options``: the context's, e.g. ``fast_math``);
    returns the context (changes, timings)."""
    ctx = PassContext(backend=backend, debug=True, options=dict(options or {}))
    ctx.changes.clear()
    PassManager(list(steps)).run(fn, ctx)
    fn.verify()
    return ctx


def check(fn: Function, *steps: Step, backend: Any = None, rtol: float = 1e-5, atol: float = 1e-6,
          seed: int = 0, exact: bool = False, options: Mapping[str, object] | None = None) -> bool:
    """Apply ``steps``; assert outputs before and after agree on random inputs; return whether it changed."""
    feeds = random_feeds(fn, seed)
    before = run(fn, feeds)
    ctx = apply(fn, *steps, backend=backend, options=options)
    after = run(fn, feeds)
    assert list(before) == list(after)
    for name in before:
        b, a = before[name], after[name]
        assert a.dtype == b.dtype and a.shape == b.shape, (name, a.dtype, a.shape, b.dtype, b.shape)
        if exact or b.dtype.kind not in "fV":
            np.testing.assert_array_equal(a, b, err_msg=name)
        else:
            np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol,
                                       err_msg=name)
    return bool(ctx.changes)


def kinds(fn: Function) -> dict[str, int]:
    return fn.count_by_kind()


def f(shape: Sequence[int], dtype: Any = F32, seed: int = 1) -> np.ndarray:
    """A random constant payload."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(tuple(shape))
    return a.astype(dtype) if np.dtype(dtype).kind == "f" else rng.integers(-5, 10, tuple(shape)).astype(dtype)


class FusingPrimitivesBackend(PrimitivesInterpreterBackend):
    """A test backend: the primitives plus the fused kinds (what a vendor with fused kernels declares)."""

    name = "test-fusing-primitives"

    def supported_kinds(self) -> Mapping[str, frozenset[Any]]:
        from glow_core.ir.kinds import get_kind

        kinds = dict(super().supported_kinds())
        for k in ("FusedConv", "FusedMatMul"):
            kinds[k] = get_kind(k).elems
        return kinds


class Float32OnlyFusionBackend(InterpreterBackend):
    """A test backend declaring the fused kinds for float32 only."""

    name = "test-fused-f32"

    def supported_kinds(self) -> Mapping[str, frozenset[Any]]:
        from glow_core.ir.types import ElemKind

        kinds = dict(super().supported_kinds())
        kinds["FusedConv"] = frozenset({ElemKind.FLOAT32})
        kinds["FusedMatMul"] = frozenset({ElemKind.FLOAT32})
        return kinds
