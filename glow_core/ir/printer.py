"""Readable text dump and DOT export of a graph function."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from glow_core.ir.graph import Function, NodeOutput, Value
from glow_core.ir.types import TensorType


def _fmt_attr(v: Any) -> str:
    if isinstance(v, tuple):
        return "[" + ",".join(_fmt_attr(x) for x in v) + "]"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, np.ndarray):
        return f"tensor<{v.dtype}{list(v.shape)}>" if v.size > 4 else np.array2string(v.ravel(), separator=",")
    if hasattr(v, "value") and not isinstance(v, (int, str)):
        return str(v.value)
    return str(v)


def format_attrs(attrs: dict[str, Any] | Any) -> str:
    if not attrs:
        return ""
    return " {" + ", ".join(f"{k}={_fmt_attr(v)}" for k, v in attrs.items()) + "}"


def _ref(v: Value | None) -> str:
    return "-" if v is None else f"%{v.name}"


def format_type(t: TensorType, dim_names: Mapping[int, str] | None = None) -> str:
    """``str(t)``, with every dimension found in ``dim_names`` printed as its symbol (``float32[batch,768]``)."""
    if not dim_names:
        return str(t)
    text = str(t)
    head = text[:text.index("[")]
    return head + "[" + ",".join(dim_names.get(d, str(d)) for d in t.shape) + "]"


def format_function(fn: Function, dim_names: Mapping[int, str] | None = None) -> str:
    """The function as text; ``dim_names`` (size -> symbol) prints the sizes of a function imported at probe
    sizes as the symbols they stand for (``glow dump`` of a model with symbolic dims)."""
    def ty(t: TensorType) -> str:
        return format_type(t, dim_names)

    ins = ", ".join(f"%{p.name}: {ty(p.type)}" for p in fn.inputs)
    outs = ", ".join(f"{n}: {ty(v.type)}" for n, v in fn.outputs)
    lines = [f"function {fn.name}({ins}) -> ({outs}) {{"]
    for c in fn.constants:
        lines.append(f"  const %{c.name}: {ty(c.type)}")
    for node in fn.nodes:
        res = ", ".join(f"%{o.name}" for o in node.outputs)
        types = ", ".join(ty(o.type) for o in node.outputs)
        args = ", ".join(_ref(v) for v in node.inputs)
        origin = f"  # {node.origin}" if node.origin and node.origin != node.name else ""
        lines.append(f"  {res} = {node.kind.name}({args}){format_attrs(dict(node.attrs))} : {types}{origin}")
    for name, v in fn.outputs:
        lines.append(f"  return {name} = %{v.name}")
    lines.append("}")
    return "\n".join(lines)


def _q(s: str) -> str:
    """A DOT quoted string; newlines become DOT's ``\\n`` line breaks."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(fn: Function) -> str:
    """Graphviz DOT text: nodes as boxes, inputs/constants as ellipses, edges typed."""
    out = [f"digraph {_q(fn.name)} {{", "  rankdir=TB;", '  node [fontname="Helvetica", fontsize=10];']
    ids: dict[int, str] = {}

    def vid(v: Value) -> str:
        prod = v.producer
        return ids[id(prod)] if prod is not None else ids[id(v)]

    for i, p in enumerate(fn.inputs):
        ids[id(p)] = f"in{i}"
        out.append(f"  in{i} [shape=ellipse, style=filled, fillcolor=lightblue, label={_q(p.name + chr(10) + str(p.type))}];")
    outputs = {id(v) for v in fn.output_values()}
    for i, c in enumerate(fn.constants):
        if c.users or id(c) in outputs:
            ids[id(c)] = f"c{i}"
            out.append(f"  c{i} [shape=ellipse, style=filled, fillcolor=lightgray, label={_q(c.name + chr(10) + str(c.type))}];")
    for i, node in enumerate(fn.nodes):
        ids[id(node)] = f"n{i}"
        out.append(f"  n{i} [shape=box, style=rounded, label={_q(node.kind.name + chr(10) + node.name)}];")
        for v in node.inputs:
            if v is not None and (v.producer is not None or id(v) in ids):
                which = f"#{v.index} " if isinstance(v, NodeOutput) and len(v.node.outputs) > 1 else ""
                out.append(f"  {vid(v)} -> n{i} [label={_q(which + str(v.type))}];")
    for j, (name, v) in enumerate(fn.outputs):
        out.append(f"  out{j} [shape=ellipse, style=filled, fillcolor=palegreen, label={_q(name)}];")
        out.append(f"  {vid(v)} -> out{j};")
    out.append("}")
    return "\n".join(out) + "\n"
