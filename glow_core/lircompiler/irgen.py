"""IRGen: an optimized, lowered graph function -> the low-level IR.

- Inputs become ``input`` weights and outputs ``output`` weights (caller
  memory); constants become ``constant`` weights (read-only).
- Every node becomes one compute instruction of its kind (out operands, then
  in operands), except the nodes :func:`~glow_core.lir.instructions.view_offset`
  turns into a ``tensorview`` (Reshape, BitCast, Identity, Dropout,
  contiguous Slice): an alias, no copy.
- Each other node result is an activation, except a function output, which is
  written straight into its output weight (the first output, if the same value
  is returned twice); later readers of that value read the output weight.
- An output that is an input, a constant or a view, or a second output of the
  same value, is filled by a ``copy`` placed as soon as its source exists.
- allocs go right before the first use of an activation and deallocs right
  after the last one (:func:`glow_core.lircompiler.lifetimes.relayout`).

The graph function is only read.
"""

from __future__ import annotations

from glow_core.ir.graph import Function, NodeOutput, Value
from glow_core.lir.instructions import COPY, Dir, view_offset
from glow_core.lir.ir import Instr, LIRFunction, LValue, Operand, Weight
from glow_core.lircompiler.lifetimes import relayout


def generate_lir(fn: Function) -> LIRFunction:
    """Translate a graph function into a (valid, unoptimized) LIR function."""
    lir = LIRFunction(fn.name)
    vmap: dict[int, LValue] = {}
    for p in fn.inputs:
        vmap[id(p)] = lir.add_weight(p.name, p.type, Weight.INPUT)
    outputs = {id(v) for v in fn.output_values()}
    for c in fn.constants:
        if c.users or id(c) in outputs:
            vmap[id(c)] = lir.add_weight(c.name, c.type, Weight.CONSTANT, c.payload)
    out_weights = [(v, lir.add_weight(name, v.type, Weight.OUTPUT)) for name, v in fn.outputs]

    views = {id(n): off for n in fn.nodes if (off := view_offset(n)) is not None}
    direct: dict[int, Weight] = {}  # node results written straight into an output weight
    for v, w in out_weights:
        if isinstance(v, NodeOutput) and id(v.node) not in views and id(v) not in direct:
            direct[id(v)] = w
    pending: dict[int, list[Weight]] = {}  # value -> output weights to copy it into
    for v, w in out_weights:
        if direct.get(id(v)) is not w:
            pending.setdefault(id(v), []).append(w)

    work: list[Instr] = []

    def emit_copies(v: Value) -> None:
        for w in pending.pop(id(v), []):
            work.append(Instr(COPY, [Operand(w, Dir.OUT), Operand(vmap[id(v)], Dir.IN)], name=f"copy.{w.name}"))

    for leaf in [*fn.inputs, *fn.constants]:
        emit_copies(leaf)
    for node in fn.nodes:
        offset = views.get(id(node))
        if offset is not None:
            res = node.outputs[0]
            src = node.inputs[0]
            assert src is not None
            vmap[id(res)] = lir.new_view(res.name, res.type, vmap[id(src)], offset)
        else:
            outs: list[Operand] = []
            for o in node.outputs:
                target: LValue = direct.get(id(o)) or lir.new_activation(o.name, o.type)
                vmap[id(o)] = target
                outs.append(Operand(target, Dir.OUT))
            ins = [Operand(None if v is None else vmap[id(v)], Dir.IN) for v in node.inputs]
            work.append(Instr(node.kind.name, outs + ins, dict(node.attrs), n_out=len(outs),
                              name=node.name, origin=node.origin))
        for o in node.outputs:
            emit_copies(o)
    relayout(lir, work)
    return lir
