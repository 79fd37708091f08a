"""SymbolicValue: a small tensor of sizes computed from the run's symbols (``glow_core/ir/defs/symbolic.py``).

Thread 0 evaluates each element's expression from the symbols' values (``EmitContext.symbols``, loaded in
the kernel's entry block from ``glow_symbols``) and stores it converted to the result's element kind.
"""

from __future__ import annotations

from glow_backend_cpu.emit.context import EmitContext, Instr, register_emitter
from glow_backend_cpu.emit.dtypes import convert
from glow_backend_cpu.helpers import i64
from glow_core.errors import UnsupportedError
from glow_core.ir.symbolic import SymExpr
from glow_core.ir.types import ElemKind

ELEMS = frozenset({ElemKind.FLOAT32, ElemKind.FLOAT64, ElemKind.INT32, ElemKind.INT64})


@register_emitter("SymbolicValue", elems=ELEMS, symbolic=True)
def emit_symbolic_value(ctx: EmitContext, instr: Instr) -> None:
    if ctx.symbols is None:
        raise UnsupportedError("SymbolicValue outside a function compiled for symbolic dims")
    b, out = ctx.builder, instr.outs[0]
    with b.if_then(b.icmp_signed("==", ctx.tid, i64(0))):
        for k, text in enumerate(instr.attrs["exprs"]):
            v = convert(b, ctx.symbols.expr(SymExpr.parse(text)), ElemKind.INT64, out.type.elem)
            b.store(v, b.gep(out.ptr, [i64(k)], inbounds=True))
