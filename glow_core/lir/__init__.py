"""The low-level IR (LIR): instructions on memory regions, the IR optimizer and the static memory plan.

Typical use (what a backend's ``compile`` does)::

    from glow_core.lir import build_lir, format_lir
    lir = build_lir(function)          # IRGen -> IR passes -> memory plan
    print(format_lir(lir))             # the code, with arena offsets
    print(lir.plan.report.format())    # arena, lower bound, naive bytes

See docs/low-level-ir.md and glow_core/lir/README.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from glow_core.ir.graph import Function
from glow_core.lir.instructions import Dir, Effect, InstrKind, instr_kind
from glow_core.lir.ir import ALIGNMENT, Activation, Instr, LIRFunction, LValue, Operand, View, Weight
from glow_core.lir.irgen import generate_lir
from glow_core.lir.memory import MemoryPlan, MemoryReport, plan_memory
from glow_core.lir.passes import DEFAULT_PIPELINE, LIRPassContext, LIRPassManager, Step, all_lir_passes
from glow_core.lir.printer import format_lir
from glow_core.lir.verify import verify_lir


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
    lir = getattr(exe, "lir", None)
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
    "ALIGNMENT",
    "DEFAULT_PIPELINE",
    "Activation",
    "Dir",
    "Effect",
    "Instr",
    "InstrKind",
    "LIRFunction",
    "LIRPassContext",
    "LIRPassManager",
    "LValue",
    "MemoryPlan",
    "MemoryReport",
    "Operand",
    "View",
    "Weight",
    "all_lir_passes",
    "build_lir",
    "format_lir",
    "generate_lir",
    "instr_kind",
    "lir_of",
    "memory_report",
    "optimize_lir",
    "plan_memory",
    "verify_lir",
]
