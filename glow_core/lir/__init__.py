"""The low-level IR (LIR) data types: instructions on memory regions and the static memory plan.

This package is the data a backend consumes (covered by the SDK API version,
see ``glow_sdk.version``): instruction kinds, ``LIRFunction`` and its values,
the verifier, the printer and the memory plan's types. It imports only
``glow_core.errors`` and ``glow_core.ir``.

The LIR *compiler* (IRGen, the LIR passes, scheduling, memory planning,
``build_lir``) is ``glow_core.lircompiler``, in the passes layer. Backends do not
import it: they receive it as the ``build_lir`` service of ``CompileOptions``::

    def compile(self, function, options):
        lir = options.build_lir(function, debug=options.debug)   # IRGen -> IR passes -> memory plan
        print(format_lir(lir))                                   # the code, with arena offsets
        print(lir.plan.report.format())                          # arena, lower bound, naive bytes

See docs/low-level-ir.md and glow_core/lir/README.md.
"""

from __future__ import annotations

from glow_core.lir.instructions import Dir, Effect, InstrKind, instr_kind
from glow_core.lir.ir import ALIGNMENT, Activation, Instr, LIRFunction, LValue, Operand, View, Weight
from glow_core.lir.memory import MemoryPlan, MemoryReport, check_plan
from glow_core.lir.printer import format_lir
from glow_core.lir.verify import verify_lir

__all__ = [
    "ALIGNMENT",
    "Activation",
    "Dir",
    "Effect",
    "Instr",
    "InstrKind",
    "LIRFunction",
    "LValue",
    "MemoryPlan",
    "MemoryReport",
    "Operand",
    "View",
    "Weight",
    "check_plan",
    "format_lir",
    "instr_kind",
    "verify_lir",
]
