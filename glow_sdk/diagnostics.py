"""Messages that name the node and the model input behind a run-time failure: an index out of range.

A backend that checks indices at run time (Gather, Scatter, ...) knows at best which graph node
failed; the user thinks in ONNX nodes and model inputs. :func:`index_error_message` turns the graph
node (or, when the backend cannot say, the feeds) into a message naming the ONNX node, its op, the
model input its indices come from and the values out of range. The core calls it for every
:class:`~glow_core.errors.IndexRangeError` a network raises (``CompiledNetwork.run``); a backend may
call it to describe its checks ahead of time (the cpu backend's bundles record them).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from glow_core.ir.graph import Function, Node, Placeholder, Value

#: node kind -> operand holding the indices; the indexed axis is the ``axis`` attribute of operand 0
INDEX_OPERANDS: dict[str, int] = {"Gather": 1, "GatherElements": 1, "GatherND": 1, "ScatterElements": 1,
                                  "ScatterND": 1}
#: kinds whose result holds values of their first operand (an index passes through them unchanged)
_VALUE_KEEPING = frozenset({"Reshape", "Transpose", "Broadcast", "Cast", "Slice", "Tile"})


def where_node(node: Node) -> str:
    """``ONNX node 'emb' (Gather)``, with the graph node when lowering renamed it."""
    onnx_name = node.origin or node.name
    graph = f", graph node '{node.name}'" if node.name != onnx_name else ""
    return f"ONNX node '{onnx_name}' ({node.kind.name}{graph})"


def model_inputs_of(value: Value) -> list[str]:
    """The model inputs (placeholders) ``value`` is computed from, nearest first."""
    found: list[str] = []
    seen: set[int] = set()
    todo = [value]
    while todo:
        v = todo.pop(0)
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, Placeholder):
            found.append(v.name)
        elif v.producer is not None:
            todo += [x for x in v.producer.inputs if x is not None]
    return found


def _direct_input(value: Value) -> Placeholder | None:
    """The model input whose values ``value`` holds unchanged (through reshapes, casts, slices), if any."""
    while not isinstance(value, Placeholder):
        node = value.producer
        if node is None or node.kind.name not in _VALUE_KEEPING or node.inputs[0] is None:
            return None
        value = node.inputs[0]
    return value


def _axis_size(node: Node) -> int | None:
    """The size of the axis the indices of ``node`` index (None for the N-D kinds)."""
    data = node.inputs[0]
    if data is None or node.kind.name.endswith("ND") or not data.type.shape:
        return None
    axis = int(node.attrs.get("axis", 0)) % len(data.type.shape)
    return data.type.shape[axis]


def _bad_values(node: Node, feeds: Mapping[str, np.ndarray]) -> tuple[str, list[int], int] | None:
    """(input, values out of range, axis size) when ``node``'s indices are a fed input with values outside
    ``[-size, size)``."""
    src = _direct_input(node.inputs[INDEX_OPERANDS[node.kind.name]])  # type: ignore[arg-type]
    size = _axis_size(node)
    if src is None or size is None or src.name not in feeds:
        return None
    values = np.asarray(feeds[src.name]).reshape(-1).astype(np.int64)
    bad = values[(values < -size) | (values >= size)]
    return (src.name, sorted(set(bad.tolist()))[:4], size) if bad.size else None


def node_in_message(fn: Function, text: str) -> str:
    """The index node a message starts with (``Gather 'emb': ...``, as the reference kernels' errors do), or ""."""
    for node in fn.nodes:
        if node.kind.name in INDEX_OPERANDS and text.startswith(f"{node.kind.name} '{node.name}'"):
            return node.name
    return ""


def index_error_message(fn: Function, node_name: str = "",
                        feeds: Mapping[str, np.ndarray] | None = None) -> tuple[str, str] | None:
    """(message, hint) for an index out of range in graph node ``node_name`` of ``fn`` ("": unknown, found
    from ``feeds`` when a fed input holds the bad indices); None when neither names a node."""
    index_nodes = [n for n in fn.nodes if n.kind.name in INDEX_OPERANDS]
    named = [n for n in index_nodes if n.name == node_name] if node_name else []
    for node in named or index_nodes:
        found = _bad_values(node, feeds or {})
        if found is None and not named:
            continue
        sources = model_inputs_of(node.inputs[INDEX_OPERANDS[node.kind.name]])  # type: ignore[arg-type]
        fed = f"its indices come from input {', '.join(repr(s) for s in sources)}" if sources \
            else "its indices are computed from constants"
        if found is None:
            return (f"an index is out of range for its axis in {where_node(node)}: {fed}; the result was not "
                    "computed", "check the values of the inputs its indices come from")
        name, values, size = found
        return (f"an index is out of range for its axis in {where_node(node)}: input '{name}' holds "
                f"{', '.join(str(v) for v in values)}, outside [{-size}, {size}) (the axis has {size} entries)",
                f"feed '{name}' values in [0, {size}); glow run: --input-range {name}=0:{size}")
    return None


__all__ = ["INDEX_OPERANDS", "index_error_message", "model_inputs_of", "node_in_message", "where_node"]
