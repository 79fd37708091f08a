"""Inlining a subgraph attribute (FlexAttention's score_mod / prob_mod, SequenceMap's body) at import time.

The subgraph's nodes are imported into the same function, in a scope where its
inputs name the given values; names from the enclosing graph stay visible
(ONNX's outer-scope references) and every name the subgraph defines is
restored afterwards, so repeated inlining (once per sequence element) never
leaks one copy's values into the next. Control flow that must run at run time
(If, Loop, Scan) is not this: those stay with their own import rules.
"""

from __future__ import annotations

from typing import Any, Sequence

import onnx

from glow_core.errors import GlowTypeError, ModelError, UnsupportedOpsError
from glow_core.importer.context import NodeContext, import_rules

#: nested inlining depth accepted (a subgraph attribute of a node of an inlined subgraph, ...)
MAX_DEPTH = 8
_MISSING = object()


def graph_attr(ctx: NodeContext, name: str) -> onnx.GraphProto | None:
    """The subgraph attribute ``name`` of the node, or None."""
    for a in ctx.node.attribute:
        if a.name == name:
            if a.type != onnx.AttributeProto.GRAPH:
                raise ModelError(f"{ctx.where()}: attribute '{name}' must be a graph")
            return a.g
    return None


def inline(ctx: NodeContext, graph: onnx.GraphProto, inputs: Sequence[Any], what: str) -> list[Any]:
    """Import ``graph`` with its inputs bound to ``inputs``; returns the values of its outputs."""
    importer = ctx.importer
    depth = getattr(importer, "inline_depth", 0)
    if depth >= MAX_DEPTH:
        raise ModelError(f"{ctx.where()}: {what} nests subgraphs more than {MAX_DEPTH} deep")
    if len(graph.input) != len(inputs):
        raise GlowTypeError(f"{ctx.where()}: {what} takes {len(graph.input)} inputs, {len(inputs)} given")
    rules = import_rules()
    missing = sorted({n.op_type for n in graph.node
                      if ("" if n.domain in ("", "ai.onnx") else n.domain, n.op_type) not in rules})
    if missing:
        raise UnsupportedOpsError(f"{ctx.where()}: {what} uses operator(s) with no import rule: {', '.join(missing)}")
    from glow_core.importer.precheck import check_flags

    saved: dict[str, Any] = {}

    def bind(name: str, value: Any) -> None:
        if name not in saved:
            saved[name] = importer.values.get(name, _MISSING)
        importer.values[name] = value

    importer.inline_depth = depth + 1
    try:
        for vi, v in zip(graph.input, inputs):
            bind(vi.name, v)
        for t in graph.initializer:
            bind(t.name, importer._constant_from(t))
        for node in graph.node:
            before = {o: importer.values.get(o, _MISSING) for o in node.output if o}
            for o, old in before.items():
                saved.setdefault(o, old)
            check_flags(node, f"{ctx.where()}: {what}: ONNX node '{node.name or node.output[0]}' ({node.op_type})")
            importer._import_node(node)
        outs = [importer.value(o.name, f"{ctx.where()}: {what} output '{o.name}'") for o in graph.output]
    finally:
        importer.inline_depth = depth
        for name, old in saved.items():
            if old is _MISSING:
                importer.values.pop(name, None)
            else:
                importer.values[name] = old
    return outs
