"""Partitions as ONNX: a glow graph-IR function (a partition, high-level or lowered) as a valid ONNX model.

A vendor whose toolchain consumes ONNX plugs in without writing kernels::

    from glow_sdk.export import partition_to_onnx

    def compile(self, function, options):
        model = partition_to_onnx(function)          # onnx.ModelProto, checked (full_check)
        return MyExecutable(function, my_toolchain.compile(model.SerializeToString()))

Every node kind is mapped by one entry of the table ``glow_sdk.onnx_ops.EXPORTERS`` (kind name -> a
function that emits ONNX nodes). A kind with an ONNX operator of the same meaning maps onto it; a glow primitive
without one maps onto several ONNX operators that compute the same thing (signed BitShift, Max / Min
propagating NaN, Python-style Mod of floats, the fused kinds, a Slice with a negative step, ...).
The graph's inputs and outputs keep the names of the function's inputs and outputs; each ONNX node is
named after the glow node it comes from (:func:`glow_node_of` reads it back), so an answer about ONNX
nodes (a supported-operation query) maps back onto glow nodes.

``partition_to_onnx(function, nodes)`` exports part of a function: its inputs are the values those
nodes read from outside the part, its outputs the values used outside it (or returned).
:class:`HostPart` runs the other nodes of a function on the host with the core's reference kernels,
so a toolchain that takes only some nodes of a partition still runs all of it (:func:`split`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from glow_core.errors import InputError, UnsupportedError
from glow_core.ir.graph import Constant, Function, Node, Value
from glow_core.ir.kinds import get_kind
from glow_core.ir.types import ElemKind
from glow_core.reference import run_kernel
from glow_sdk.onnx_ops import EXPORT_RULES, EXPORTERS, NODE_SEPARATOR, ONNX_TYPES, Emitter, ExportError, exporter

#: the ONNX opset (default domain) and IR version of exported models
OPSET = 21
IR_VERSION = 10


def exportable(node: Node) -> bool:
    """Whether :func:`partition_to_onnx` has an ONNX form of ``node`` (its kind and element kinds)."""
    types = [v.type for v in node.inputs if v is not None] + [o.type for o in node.outputs]
    if node.kind.name not in EXPORTERS or not all(t.elem in ONNX_TYPES for t in types):
        return False
    rule = EXPORT_RULES.get(node.kind.name)
    return rule is None or rule(node)


def exportable_kinds() -> dict[str, frozenset[ElemKind]]:
    """Kind name -> the element kinds its exporter may see (every kind of :data:`EXPORTERS`)."""
    return {k: frozenset(get_kind(k).elems) & frozenset(ONNX_TYPES) for k in EXPORTERS}


def value_names(function: Function) -> dict[int, str]:
    """Value id -> its ONNX name: a returned value takes its output's name, every other value its own
    (made unique); the same for every part of one function, so parts exported apart connect by name."""
    names: dict[int, str] = {}
    taken: set[str] = set()

    def give(v: Value, want: str) -> None:
        name, k = want, 1
        while name in taken:
            k += 1
            name = f"{want}_{k}"
        names[id(v)] = name
        taken.add(name)

    for p in function.inputs:
        give(p, p.name)
    for out_name, v in function.outputs:
        if id(v) not in names:
            give(v, out_name)
    for n in function.nodes:
        for o in n.outputs:
            if id(o) not in names:
                give(o, o.name)
    for c in function.constants:
        if id(c) not in names:
            give(c, c.name)
    return names


@dataclass(frozen=True)
class Boundary:
    """What part of a function reads from outside it and gives to outside it."""

    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]


def boundary(function: Function, nodes: Sequence[Node]) -> Boundary:
    """The values ``nodes`` read that are computed outside them (model inputs, other nodes' results; not
    constants), and their results used outside them or returned, both in a stable order."""
    inside = {id(n) for n in nodes}
    produced = {id(o) for n in nodes for o in n.outputs}
    ins: dict[int, Value] = {}
    for n in nodes:
        for v in n.inputs:
            if v is not None and not isinstance(v, Constant) and id(v) not in produced:
                ins.setdefault(id(v), v)
    returned = {id(v) for _, v in function.outputs}
    used_outside = {id(v) for m in function.nodes if id(m) not in inside for v in m.inputs if v is not None}
    outs = [o for n in nodes for o in n.outputs if id(o) in returned or id(o) in used_outside]
    return Boundary(tuple(ins.values()), tuple(outs))


def _info(name: str, v: Value) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, ONNX_TYPES[v.type.elem], list(v.type.shape))


def _check_types(function: Function, values: Sequence[Value]) -> None:
    bad = sorted({v.type.elem.value for v in values if v.type.elem not in ONNX_TYPES})
    if bad:
        raise ExportError(f"{function.name}: element kind(s) {', '.join(bad)} have no ONNX form here",
                          hint="quantized and sub-byte kinds cannot be exported; dequantize first")


def _emit_nodes(e: Emitter, nodes: Sequence[Node]) -> None:
    for n in nodes:
        fn = EXPORTERS.get(n.kind.name)
        if fn is None or not exportable(n):
            elems = "/".join(sorted({v.type.elem.value for v in n.inputs if v is not None}))
            raise ExportError(f"{n.where()}: {n.kind.name}({elems}) has no ONNX form here",
                              hint="run this node elsewhere (glow_sdk.export.split keeps it on the host)")
        e.owner, e.count = n.name, 0
        fn(e, n, [e.name(v) for v in n.inputs], [e.name(o) for o in n.outputs])
        for v in n.inputs:
            _add_constant(e, v)


def _add_constant(e: Emitter, v: Value | None) -> None:
    """A constant operand becomes an initializer (once)."""
    if isinstance(v, Constant) and e.names[id(v)] not in e.weights:
        e.weights.add(e.names[id(v)])
        e.inits.append(numpy_helper.from_array(np.ascontiguousarray(v.payload), e.names[id(v)]))


def partition_to_onnx(function: Function, nodes: Sequence[Node] | None = None, *, name: str | None = None,
                      check: bool = True, weights_as_inputs: int | None = None) -> onnx.ModelProto:
    """``function`` (or only its ``nodes``) as an ONNX model (opset :data:`OPSET`), checked with
    ``onnx.checker.check_model(full_check=True)`` unless ``check`` is false. ExportError names every node
    without an ONNX form. ``weights_as_inputs=N``: constants of more than N elements become graph inputs
    instead of initializers (the structure without the weights, enough for a supported-operation query)."""
    if not isinstance(function, Function):
        raise InputError(f"partition_to_onnx takes a glow graph-IR Function, got {type(function).__name__}",
                         hint="an ONNX model is one already; a compiled network's is net.function")
    part = list(function.nodes) if nodes is None else list(nodes)
    inside = {id(n) for n in function.nodes}
    foreign = [n for n in part if id(n) not in inside]
    if foreign:
        raise InputError(f"{function.name}: {len(foreign)} of the nodes to export are not in the function: "
                         + ", ".join(getattr(n, "name", repr(n)) for n in foreign[:5]))
    names = value_names(function)
    b = boundary(function, part)
    whole = nodes is None
    outputs: list[tuple[str, Value]] = [(names[id(v)], v) for v in b.outputs]
    inputs = list(function.inputs) if whole else list(b.inputs)
    if weights_as_inputs is not None:
        big = {id(v): v for n in part for v in n.inputs
               if isinstance(v, Constant) and v.payload.size > weights_as_inputs}
        inputs += list(big.values())
    _check_types(function, [*inputs, *(v for _, v in outputs)])
    missing = [n for n in part if not exportable(n)]
    if missing:
        listed = "; ".join(f"{n.kind.name} ({n.name})" for n in missing[:8]) + ("; ..." if len(missing) > 8 else "")
        raise ExportError(f"{function.name}: {len(missing)} node(s) have no ONNX form here: {listed}",
                          hint="run them elsewhere (glow_sdk.export.split keeps them on the host)")
    e = Emitter(names, weights={names[id(v)] for v in inputs})
    _emit_nodes(e, part)
    if whole:  # a returned model input or constant (or a value returned twice) gets its output's name
        outputs = [(o, v) for o, v in function.outputs]
        for out_name, v in outputs:
            if names[id(v)] != out_name:
                e.owner, e.count = out_name, 0
                _add_constant(e, v)
                e.op("Identity", [names[id(v)]], out_name)
    graph = helper.make_graph(e.nodes, re.sub(r"\W", "_", name or function.name),
                              [_info(names[id(p)], p) for p in inputs],
                              [_info(n, v) for n, v in outputs], e.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="glow", ir_version=IR_VERSION)
    if check:
        onnx.checker.check_model(model, full_check=True)
    return model


def glow_node_of(onnx_node_name: str) -> str:
    """The name of the glow node an exported ONNX node comes from."""
    return onnx_node_name.split(NODE_SEPARATOR, 1)[0]


@dataclass
class HostPart:
    """Nodes of a function run on the host with the core's reference kernels; reads and gives values by
    their ONNX names (:func:`value_names`), as an exported part does."""

    nodes: list[Node]
    input_names: list[str]
    output_names: list[str]
    names: dict[int, str]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        env: dict[str, np.ndarray] = dict(feeds)

        def get(v: Value | None) -> np.ndarray | None:
            if v is None:
                return None
            return v.payload if isinstance(v, Constant) else env[self.names[id(v)]]

        for n in self.nodes:
            results = run_kernel(n.kind.name, n.attrs, [get(v) for v in n.inputs], [o.type for o in n.outputs],
                                 n.where())
            for o, r in zip(n.outputs, results):
                env[self.names[id(o)]] = r
        return {k: env[k] for k in self.output_names}


@dataclass
class OnnxPart:
    """Nodes of a function exported as one ONNX model, with the names it reads and gives."""

    nodes: list[Node]
    model: onnx.ModelProto
    input_names: list[str]
    output_names: list[str]


def split(function: Function, takes: Callable[[Node], bool]) -> list[OnnxPart | HostPart]:
    """``function``'s nodes in order, in runs: each run of nodes ``takes`` accepts (and that export) as an
    ONNX model, each other run as a :class:`HostPart`. Running the parts in order, passing values by
    name, computes the function: its inputs by their names, its outputs under their output names."""
    names = value_names(function)
    runs: list[tuple[bool, list[Node]]] = []
    for n in function.nodes:
        mine = exportable(n) and takes(n)
        if runs and runs[-1][0] == mine:
            runs[-1][1].append(n)
        else:
            runs.append((mine, [n]))
    parts: list[OnnxPart | HostPart] = []
    for onnx_run, run in runs:
        b = boundary(function, run)
        ins, outs = [names[id(v)] for v in b.inputs], [names[id(v)] for v in b.outputs]
        if onnx_run:
            parts.append(OnnxPart(run, partition_to_onnx(function, run, check=False), ins, outs))
        else:
            parts.append(HostPart(run, ins, outs, names))
    return parts


def run_parts(function: Function, parts: Sequence[Any], feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the parts :func:`split` made of ``function`` in order (each has ``input_names``, ``output_names``
    and ``run(feeds) -> dict``; a vendor wraps its compiled ONNX parts that way) and return the function's
    outputs by name, as fresh arrays of the declared types."""
    names = value_names(function)
    env: dict[str, np.ndarray] = {names[id(p)]: feeds[p.name] for p in function.inputs}
    env.update({names[id(c)]: c.payload for c in function.constants})
    for part in parts:
        env.update(part.run({k: env[k] for k in part.input_names}))
    return {out: np.array(env[names[id(v)]], dtype=v.type.elem.dtype, copy=True).reshape(v.type.shape)
            for out, v in function.outputs}


__all__ = [
    "EXPORTERS", "IR_VERSION", "NODE_SEPARATOR", "ONNX_TYPES", "OPSET", "Boundary", "Emitter", "ExportError",
    "HostPart", "OnnxPart", "UnsupportedError", "boundary", "exportable", "exportable_kinds", "exporter",
    "glow_node_of", "partition_to_onnx", "run_parts", "split", "value_names",
]
