"""Subgraphs of control-flow nodes (If, Loop, Scan): walking them and the names they capture.

An ONNX subgraph (an attribute of type GRAPH) may use any value of the scopes around it
by name. :func:`captured_names` lists those names; the control-flow executor
(``glow_core.controlflow``) passes their values in, and the importer's If rule reads them
from its scope when it inlines a branch.
"""

from __future__ import annotations

from typing import Iterator

import onnx

#: ONNX ops whose attributes hold subgraphs executed by glow
CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})


def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The subgraphs held by a node's attributes (GRAPH and GRAPHS)."""
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from a.graphs


def all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of ``graph`` and, recursively, of its nodes' subgraphs."""
    stack = [graph]
    while stack:
        g = stack.pop()
        for n in g.node:
            yield n
            stack.extend(subgraphs(n))


def defined_names(graph: onnx.GraphProto) -> set[str]:
    """Names ``graph`` itself defines: its inputs, initializers and node outputs."""
    out = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    out |= {t.values.name for t in graph.sparse_initializer}
    for n in graph.node:
        out.update(o for o in n.output if o)
    return out


def node_uses(node: onnx.NodeProto) -> list[str]:
    """Names a node reads: its operands and what its subgraphs capture from outside them, in order."""
    names = [i for i in node.input if i]
    for g in subgraphs(node):
        names.extend(n for n in captured_names(g) if n not in names)
    return names


def captured_names(graph: onnx.GraphProto) -> list[str]:
    """Names ``graph`` (with its nested subgraphs) reads from the scopes around it, in first-use order."""
    own = defined_names(graph)
    out: list[str] = []
    for n in graph.node:
        for name in node_uses(n):
            if name not in own and name not in out:
                out.append(name)
    for o in graph.output:  # a branch may return an outer value directly
        if o.name not in own and o.name not in out:
            out.append(o.name)
    return out


def has_control_flow(graph: onnx.GraphProto) -> bool:
    """Whether ``graph``'s own nodes include an If, Loop or Scan."""
    return any(n.op_type in CONTROL_FLOW_OPS and n.domain in ("", "ai.onnx") for n in graph.node)
