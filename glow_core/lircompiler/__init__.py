"""The LIR compiler: graph function -> low-level IR -> IR optimizations -> static memory plan.

Typical use (what the core's ``build_lir`` service, ``CompileOptions.build_lir``, runs)::

    from glow_core.lircompiler import build_lir
    lir = build_lir(function)          # IRGen -> IR passes -> memory plan

It sits in the passes layer (on ``glow_core.passinfra``); the LIR data types it
produces are ``glow_core.lir``. See docs/low-level-ir.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from glow_core.ir.graph import Function
from glow_core.lir.ir import LIRFunction
from glow_core.lir.memory import MemoryReport
from glow_core.lircompiler.irgen import generate_lir
from glow_core.lircompiler.passes import DEFAULT_PIPELINE, LIRPassContext, LIRPassManager, Step, all_lir_passes
from glow_core.lircompiler.plan_memory import HEURISTICS, plan_memory
from glow_sdk.backend import CompiledFunction


def optimize_lir(lir: LIRFunction, *, debug: bool = False, pipeline: Sequence[Step] | None = None,
                 ctx: LIRPassContext | None = None) -> bool:
    """Run the IR optimizer (``DEFAULT_PIPELINE`` unless given); verify after each pass in debug mode."""
    ctx = ctx or LIRPassContext(debug=debug)
    return LIRPassManager(DEFAULT_PIPELINE if pipeline is None else pipeline).run(lir, ctx)


def build_lir(function: Function, *, debug: bool = False, optimize: bool = True,
              pipeline: Sequence[Step] | None = None, ctx: LIRPassContext | None = None) -> LIRFunction:
    """IRGen, IR optimizations and the memory plan of a lowered, optimized graph function."""
    lir = generate_lir(function)
    if debug:
        lir.verify()
    if optimize:
        optimize_lir(lir, debug=debug, pipeline=pipeline, ctx=ctx)
    plan_memory(lir)
    if debug:
        lir.verify()
    return lir


def lir_of(target: Any, *, debug: bool = False) -> LIRFunction:
    """The LIR of a compiled network (the one its executable runs, if it runs one) or of a graph function.

    For ``glow dump --lir`` / ``glow compile --stats``: ``lir_of(glow_core.compile(model, backend))``.
    """
    exe = getattr(target, "executable", None)
    lir = exe.lir if isinstance(exe, CompiledFunction) else None
    if isinstance(lir, LIRFunction):
        return lir
    function = getattr(target, "function", target)
    if not isinstance(function, Function):
        raise TypeError(f"lir_of() takes a CompiledNetwork or a graph Function, got {type(target).__name__}")
    return build_lir(function, debug=debug)


def memory_report(lir: LIRFunction) -> MemoryReport:
    """The memory figures of ``lir`` (planning it first if needed)."""
    return (lir.plan or plan_memory(lir)).report


__all__ = [
    "DEFAULT_PIPELINE",
    "HEURISTICS",
    "LIRPassContext",
    "LIRPassManager",
    "all_lir_passes",
    "build_lir",
    "generate_lir",
    "lir_of",
    "memory_report",
    "optimize_lir",
    "plan_memory",
]
