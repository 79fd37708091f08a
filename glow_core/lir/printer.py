"""Readable text of an LIR function, with its memory plan when it has one.

Example (see docs/low-level-ir.md)::

    lir main {
      weights:
        %x          input     float32[1,8]   32 bytes
        %w          constant  float32[8,4]   128 bytes
        %y          output    float32[1,4]   16 bytes
      activations: arena 64 bytes, lower bound 64, naive 128
        %mm         float32[1,4]   16 bytes  @0       live [0, 3]
      views:
        %r          float32[4]   = %mm +0
      code:
        0  alloc @out %mm
        1  MatMul @out %mm, @in %x, @in %w
        ...
    }
"""

from __future__ import annotations

from glow_core.ir.printer import format_attrs
from glow_core.lir.instructions import TENSORVIEW
from glow_core.lir.ir import Instr, LIRFunction
from glow_core.lir.memory import intervals


def format_instr(ins: Instr) -> str:
    ops = []
    for op in ins.operands:
        if op.value is None:
            ops.append(f"@{op.dir.value} -")
        elif ins.kind == TENSORVIEW and op is ins.operands[0]:
            ops.append(f"@{op.dir.value} %{op.value.name} : {op.value.type}")
        else:
            ops.append(f"@{op.dir.value} %{op.value.name}")
    origin = f"  # {ins.origin}" if ins.origin and ins.origin != ins.name else ""
    return f"{ins.kind} {', '.join(ops)}{format_attrs(dict(ins.attrs))}{origin}"


def format_lir(lir: LIRFunction, *, code: bool = True) -> str:
    """The LIR as text: weights, activations (with plan offsets and lifetimes), views and code."""
    lines = [f"lir {lir.name} {{", "  weights:"]
    names = [f"%{v.name}" for v in [*lir.weights, *lir.activations, *lir.views]]
    width = min(max((len(n) for n in names), default=4), 40)
    tw = min(max((len(str(v.type)) for v in [*lir.weights, *lir.activations, *lir.views]), default=4), 40)
    for w in lir.weights:
        io = f"  (as '{w.io_name}')" if w.io_name != w.name else ""
        lines.append(f"    {'%' + w.name:<{width}}  {w.role:<8}  {w.type!s:<{tw}}  {w.nbytes:>10,} bytes{io}")
    plan = lir.plan
    if plan is not None:
        r = plan.report
        lines.append(f"  activations: {len(lir.activations)}, arena {r.arena_bytes:,} bytes, "
                     f"lower bound {r.lower_bound_bytes:,}, naive {r.naive_bytes:,}")
    else:
        lines.append(f"  activations: {len(lir.activations)} (no memory plan yet)")
    spans = intervals(lir)
    for a in lir.activations:
        where = f"  @ {plan.offsets[id(a)]:<10,}" if plan is not None and id(a) in plan.offsets else ""
        span = spans.get(id(a))
        live = f"  live [{span[1]}, {span[2]}]" if span else ""
        lines.append(f"    {'%' + a.name:<{width}}  {'arena':<8}  {a.type!s:<{tw}}  {a.nbytes:>10,} bytes{where}{live}")
    if lir.views:
        lines.append("  views:")
        for v in lir.views:
            lines.append(f"    {'%' + v.name:<{width}}  {'view of':<8}  {v.type!s:<{tw}}  %{v.base.name} + {v.offset} bytes")
    if code:
        lines.append("  code:")
        digits = len(str(max(len(lir.instrs) - 1, 0)))
        for k, ins in enumerate(lir.instrs):
            lines.append(f"    {k:>{digits}}  {format_instr(ins)}")
    lines.append("}")
    return "\n".join(lines)
