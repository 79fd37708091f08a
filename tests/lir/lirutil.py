"""Helpers of the LIR tests: small graph functions, LIR building and differential runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from glow_backend_interpreter.backend import GraphExecutable, InterpreterBackend, run_kernel
from glow_backend_interpreter.lir_exec import LIRExecutable

from glow_core.pipeline import compile_options
from glow_core.ir.graph import Function, Value
from glow_core.ir.types import ElemKind, TensorType
from glow_core.lir import LIRFunction
from glow_core.lir.instructions import ALLOC, DEALLOC, TENSORVIEW
from glow_core.lir.ir import Activation, Instr
from glow_core.lircompiler import build_lir, generate_lir, plan_memory

F32 = ElemKind.FLOAT32


def f32(*shape: int) -> TensorType:
    return TensorType(F32, shape)


def node(fn: Function, kind: str, *inputs: Value | None, name: str | None = None, **attrs: Any) -> Value:
    """Create a one-result node and return its result."""
    return fn.create(kind, list(inputs), attrs, name=name).result


def compute(lir: LIRFunction) -> list[Instr]:
    """The instructions that are neither alloc, dealloc nor tensorview."""
    return [i for i in lir.instrs if i.kind not in (ALLOC, DEALLOC, TENSORVIEW)]


def kinds(lir: LIRFunction) -> list[str]:
    return [i.kind for i in compute(lir)]


def by_name(lir: LIRFunction, name: str) -> Instr:
    for i in lir.instrs:
        if i.name == name:
            return i
    raise KeyError(name)


def random_feeds(fn: Function, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {p.name: rng.standard_normal(p.type.shape).astype(p.type.dtype) for p in fn.inputs}


def run_lir(fn: Function, feeds: Mapping[str, np.ndarray], lir: LIRFunction | None = None,
            poison: bool = True) -> dict[str, np.ndarray]:
    """Run ``fn`` on a poisoned arena: its LIR built with verification, or ``lir`` planned and verified."""
    if lir is None:
        lir = build_lir(fn, debug=True)
    else:
        plan_memory(lir)
        lir.verify()
    return LIRExecutable(fn, lir, run_kernel, poison=poison).execute(feeds)


def run_graph(fn: Function, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return GraphExecutable(fn).execute(feeds)


def check_same(fn: Function, feeds: Mapping[str, np.ndarray] | None = None,
               lir: LIRFunction | None = None) -> dict[str, np.ndarray]:
    """The arena run gives exactly what the node-by-node run gives."""
    feeds = feeds if feeds is not None else random_feeds(fn)
    want = run_graph(fn, feeds)
    got = run_lir(fn, feeds, lir)
    assert list(got) == list(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    return got


def activations_written_by(lir: LIRFunction, name: str) -> list[Activation]:
    return [op.value.root for op in by_name(lir, name).outs if isinstance(op.value.root, Activation)]  # type: ignore[union-attr]


def compile_interpreter(fn: Function, **extra: Any) -> Any:
    return InterpreterBackend().compile(fn, compile_options(debug=True, extra=extra))


__all__ = ["F32", "Function", "TensorType", "build_lir", "generate_lir", "np"]
