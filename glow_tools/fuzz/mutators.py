"""Mutators of a model's structure: attributes, declared shapes and types, names, opsets, nodes.

Each mutator takes the :class:`~glow_tools.fuzz.cases.Mutant` and the case's
random generator, changes the mutant in place and returns a short description
of what it did, or None when it does not apply (the case then draws another
mutator). Every choice comes from the generator: a case is reproducible from
its seed. The table :data:`MODEL_MUTATORS` is merged with the data mutators of
:mod:`glow_tools.fuzz.mutators_data` into :data:`glow_tools.fuzz.MUTATORS`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
import onnx
from onnx import AttributeProto

from glow_tools.fuzz.cases import Mutant, Mutator

T = TypeVar("T")

EXTREME_INTS = (0, -1, 1, 2, 2**31 - 1, -(2**31), 2**32, 10**12, -(10**12), 2**62, 2**63 - 1, -(2**63))
EXTREME_FLOATS = (math.inf, -math.inf, math.nan, -0.0, 0.0, 1e38, -1e38, 3.4028235e38, 1e-45, 1e30, -1.0)
EXTREME_DIMS = (-1, -2, 0, 1, 2**31 - 1, 2**32, 10**12, 2**62, 2**63 - 1, -(2**63))
#: every element type number onnx defines, and some it does not
ELEM_TYPES = tuple(range(0, 27)) + (99, 2**31 - 1)
OP_SWAPS = ("Relu", "Add", "MatMul", "Reshape", "Concat", "Gather", "Identity", "Transpose", "Cast", "Conv",
            "Slice", "Pad", "Where", "Expand", "TopK", "Split", "Loop", "If", "Resize", "Einsum", "NoSuchOp")
DOMAINS = ("ai.onnx.ml", "com.microsoft", "bogus.domain", "ai.onnx.preview.training", "")
INVALID_UTF8 = (b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80", b"\xe2\x82")


def pick(rng: np.random.Generator, items: Sequence[T]) -> T:
    return items[int(rng.integers(len(items)))]


def _nodes(m: Mutant) -> list[onnx.NodeProto]:
    return list(m.model.graph.node)


def _attrs(m: Mutant, types: tuple[int, ...]) -> list[tuple[onnx.NodeProto, AttributeProto]]:
    return [(n, a) for n in m.model.graph.node for a in n.attribute if a.type in types]


def attr_int(m: Mutant, rng: np.random.Generator) -> str | None:
    found = _attrs(m, (AttributeProto.INT, AttributeProto.INTS))
    if not found:
        return None
    node, a = pick(rng, found)
    v = pick(rng, EXTREME_INTS)
    if a.type == AttributeProto.INT:
        a.i = v
        return f"{node.op_type}.{a.name} = {v}"
    if len(a.ints) and rng.random() < 0.8:
        k = int(rng.integers(len(a.ints)))
        a.ints[k] = v
        return f"{node.op_type}.{a.name}[{k}] = {v}"
    if rng.random() < 0.5:
        del a.ints[:]
        return f"{node.op_type}.{a.name} = []"
    a.ints.append(v)
    return f"{node.op_type}.{a.name} += [{v}]"


def attr_float(m: Mutant, rng: np.random.Generator) -> str | None:
    found = _attrs(m, (AttributeProto.FLOAT, AttributeProto.FLOATS))
    if not found:
        return None
    node, a = pick(rng, found)
    v = pick(rng, EXTREME_FLOATS)
    if a.type == AttributeProto.FLOAT:
        a.f = v
        return f"{node.op_type}.{a.name} = {v}"
    if not len(a.floats):
        a.floats.append(v)
        return f"{node.op_type}.{a.name} = [{v}]"
    k = int(rng.integers(len(a.floats)))
    a.floats[k] = v
    return f"{node.op_type}.{a.name}[{k}] = {v}"


def attr_kind(m: Mutant, rng: np.random.Generator) -> str | None:
    """An attribute of another type than declared, a missing one, an unknown one, a string one."""
    nodes = _nodes(m)
    if not nodes:
        return None
    node = pick(rng, nodes)
    what = int(rng.integers(5))
    if what == 0 and len(node.attribute):
        a = node.attribute[int(rng.integers(len(node.attribute)))]
        name = a.name
        node.attribute.remove(a)
        return f"{node.op_type}: attribute {name} removed"
    if what == 1 and len(node.attribute):
        a = node.attribute[int(rng.integers(len(node.attribute)))]
        old = a.type
        new = pick(rng, (AttributeProto.INT, AttributeProto.FLOAT, AttributeProto.STRING, AttributeProto.INTS,
                         AttributeProto.TENSOR, AttributeProto.GRAPH, 0, 99))
        try:
            a.type = new
        except ValueError:  # protobuf refuses an enum value it does not know: UNDEFINED instead
            a.type = 0
        return f"{node.op_type}.{a.name}: type {old} -> {a.type} (value fields unchanged)"
    if what == 2 and len(node.attribute):
        a = node.attribute[int(rng.integers(len(node.attribute)))]
        node.attribute.append(onnx.AttributeProto())
        node.attribute[-1].CopyFrom(a)
        return f"{node.op_type}.{a.name} listed twice"
    if what == 3 and len(node.attribute):
        a = node.attribute[int(rng.integers(len(node.attribute)))]
        a.ref_attr_name = "outer"
        return f"{node.op_type}.{a.name}: ref_attr_name outside a function"
    name = pick(rng, ("axis", "mode", "bogus", "", "perm", "to"))
    value: Any = pick(rng, (2**63 - 1, "nearest", -1, 1.5, [0, 0], b"\x00"))
    node.attribute.append(onnx.helper.make_attribute(name, value) if name else onnx.AttributeProto())
    return f"{node.op_type}: extra attribute {name!r} = {value!r}"


def _value_infos(m: Mutant) -> list[onnx.ValueInfoProto]:
    g = m.model.graph
    return [vi for vi in list(g.input) + list(g.output) + list(g.value_info) if vi.type.HasField("tensor_type")]


def shape_dim(m: Mutant, rng: np.random.Generator) -> str | None:
    """A declared dimension set to an extreme value (input, output or value_info)."""
    found = [(vi, k) for vi in _value_infos(m) for k in range(len(vi.type.tensor_type.shape.dim))]
    if not found:
        return None
    vi, k = pick(rng, found)
    d = vi.type.tensor_type.shape.dim[k]
    if rng.random() < 0.15:
        d.dim_param = pick(rng, ("N", "", "batch size", "\x00"))
        return f"{vi.name} dim {k} = {d.dim_param!r}"
    d.dim_value = pick(rng, EXTREME_DIMS)
    return f"{vi.name} dim {k} = {d.dim_value}"


def shape_rank(m: Mutant, rng: np.random.Generator) -> str | None:
    """A declared shape with one more or one fewer dimension, or none at all."""
    vis = _value_infos(m)
    if not vis:
        return None
    vi = pick(rng, vis)
    shape = vi.type.tensor_type.shape
    what = int(rng.integers(3))
    if what == 0:
        shape.dim.add().dim_value = int(pick(rng, (1, 2, 3)))
        return f"{vi.name}: one more dimension"
    if what == 1 and len(shape.dim):
        del shape.dim[-1]
        return f"{vi.name}: one fewer dimension"
    vi.type.tensor_type.ClearField("shape")
    return f"{vi.name}: no shape"


def dtype_decl(m: Mutant, rng: np.random.Generator) -> str | None:
    """A declared element type (input, output, value_info) changed, data unchanged."""
    vis = _value_infos(m)
    if not vis:
        return None
    vi = pick(rng, vis)
    vi.type.tensor_type.elem_type = pick(rng, ELEM_TYPES)
    return f"{vi.name}: declared elem_type {vi.type.tensor_type.elem_type}"


def _value_names(m: Mutant) -> list[str]:
    g = m.model.graph
    names = [i.name for i in g.input] + [t.name for t in g.initializer] + [o for n in g.node for o in n.output]
    return [n for n in names if n]


def name_duplicate(m: Mutant, rng: np.random.Generator) -> str | None:
    """A node output renamed to an existing value's name (two producers)."""
    nodes = [n for n in m.model.graph.node if len(n.output)]
    names = _value_names(m)
    if not nodes or len(names) < 2:
        return None
    node = pick(rng, nodes)
    k = int(rng.integers(len(node.output)))
    other = pick(rng, [n for n in names if n != node.output[k]] or names)
    node.output[k] = other
    return f"{node.op_type} output {k} renamed to existing {other!r}"


def name_empty(m: Mutant, rng: np.random.Generator) -> str | None:
    g = m.model.graph
    slots: list[tuple[Any, int, str]] = [(n.input, k, n.op_type) for n in g.node for k in range(len(n.input))]
    slots += [(n.output, k, n.op_type) for n in g.node for k in range(len(n.output))]
    if not slots:
        return None
    seq, k, op = pick(rng, slots)
    which = "input" if any(seq is n.input for n in g.node) else "output"
    seq[k] = ""
    return f"{op} {which} {k} = ''"


def name_dangling(m: Mutant, rng: np.random.Generator) -> str | None:
    nodes = [n for n in m.model.graph.node if len(n.input)]
    if not nodes:
        return None
    node = pick(rng, nodes)
    k = int(rng.integers(len(node.input)))
    node.input[k] = pick(rng, ("does_not_exist", node.output[0] if len(node.output) else "x"))
    return f"{node.op_type} input {k} = {node.input[k]!r}"


def _string_fields(m: Mutant) -> list[tuple[Any, str]]:
    g = m.model.graph
    out: list[tuple[Any, str]] = [(vi, "name") for vi in list(g.input) + list(g.output)]
    out += [(t, "name") for t in g.initializer]
    out += [(n, "name") for n in g.node] + [(n, "op_type") for n in g.node]
    out += [(a, "name") for n in g.node for a in n.attribute]
    out += [(a, "s") for n in g.node for a in n.attribute if a.type == AttributeProto.STRING]
    out += [(g, "name"), (m.model, "producer_name"), (g, "doc_string")]
    return out


def name_utf8(m: Mutant, rng: np.random.Generator) -> str | None:
    """A string field (a name, an op type, a string attribute) holding invalid UTF-8 bytes."""
    obj, attr = pick(rng, _string_fields(m))
    bad = pick(rng, INVALID_UTF8)
    marker = "Zq" + "".join(pick(rng, "abcdefghjkmnpqrstuvwxyz") for _ in range(10))
    old = getattr(obj, attr)
    new = (old[:4] + marker) if isinstance(old, str) else marker
    setattr(obj, attr, new.encode() if attr == "s" else new)
    replacement = (bad * len(marker))[: len(marker)]

    def patch(data: bytes, marker: bytes = marker.encode(), replacement: bytes = replacement) -> bytes:
        return data.replace(marker, replacement)

    m.byte_patches.append(patch)
    return f"{type(obj).__name__}.{attr} ({old!r:.40}) gets invalid UTF-8 {bad!r}"


def output_twice(m: Mutant, rng: np.random.Generator) -> str | None:
    g = m.model.graph
    vis = list(g.output) if rng.random() < 0.6 else list(g.input)
    if not vis:
        return None
    vi = pick(rng, vis)
    target = g.output if rng.random() < 0.6 else g.input
    target.add().CopyFrom(vi)
    return f"{vi.name} listed again as a graph {'output' if target is g.output else 'input'}"


def node_output_twice(m: Mutant, rng: np.random.Generator) -> str | None:
    nodes = [n for n in m.model.graph.node if len(n.output)]
    if not nodes:
        return None
    node = pick(rng, nodes)
    node.output.append(node.output[0])
    return f"{node.op_type}: output {node.output[0]!r} listed twice"


def opset(m: Mutant, rng: np.random.Generator) -> str | None:
    what = int(rng.integers(4))
    ops = m.model.opset_import
    if what == 0 and len(ops):
        v = pick(rng, (0, 1, 6, 7, 10, 26, 10**6, -1, 2**63 - 1))
        ops[0].version = v
        return f"opset {ops[0].domain!r} version {v}"
    if what == 1 and len(ops):
        del ops[:]
        return "no opset_import"
    if what == 2 and len(ops):
        ops.add().CopyFrom(ops[0])
        ops[-1].version = pick(rng, (1, 13, 99))
        return f"default opset imported twice ({ops[-1].version})"
    m.model.ir_version = pick(rng, (0, 1, 2, 3, 4, 11, 10**6, -1, 2**63 - 1))
    return f"ir_version {m.model.ir_version}"


def node_domain(m: Mutant, rng: np.random.Generator) -> str | None:
    nodes = _nodes(m)
    if not nodes:
        return None
    node = pick(rng, nodes)
    node.domain = pick(rng, DOMAINS)
    return f"{node.op_type}: domain {node.domain!r}"


def node_graph(m: Mutant, rng: np.random.Generator) -> str | None:
    """A node dropped, duplicated, moved first (order broken), or fed from its own output (a cycle)."""
    g = m.model.graph
    if not len(g.node):
        return None
    k = int(rng.integers(len(g.node)))
    node = g.node[k]
    what = int(rng.integers(4))
    if what == 0:
        op = node.op_type
        del g.node[k]
        return f"node {k} ({op}) dropped"
    if what == 1:
        g.node.add().CopyFrom(node)
        return f"node {k} ({node.op_type}) duplicated"
    if what == 2 and len(node.input) and len(node.output):
        node.input[int(rng.integers(len(node.input)))] = node.output[0]
        return f"node {k} ({node.op_type}) reads its own output"
    copy = onnx.NodeProto()
    copy.CopyFrom(g.node[-1])
    del g.node[-1]
    g.node.insert(0, copy)
    return f"last node ({copy.op_type}) moved first"


def node_arity(m: Mutant, rng: np.random.Generator) -> str | None:
    nodes = _nodes(m)
    if not nodes:
        return None
    node = pick(rng, nodes)
    what = int(rng.integers(4))
    if what == 0 and len(node.input):
        del node.input[-1]
        return f"{node.op_type}: last input dropped"
    if what == 1:
        node.input.append(pick(rng, _value_names(m) or [""]))
        return f"{node.op_type}: extra input {node.input[-1]!r}"
    if what == 2 and len(node.output) > 1:
        del node.output[-1]
        return f"{node.op_type}: last output dropped"
    node.output.append(f"extra_{int(rng.integers(1000))}")
    return f"{node.op_type}: extra output"


def op_swap(m: Mutant, rng: np.random.Generator) -> str | None:
    nodes = _nodes(m)
    if not nodes:
        return None
    node = pick(rng, nodes)
    old = node.op_type
    node.op_type = pick(rng, OP_SWAPS)
    return f"{old} -> {node.op_type} (inputs and attributes kept)"


def initializer_dtype(m: Mutant, rng: np.random.Generator) -> str | None:
    """A tensor's data_type changed, its data fields kept."""
    from glow_tools.fuzz.mutators_data import tensors

    ts = tensors(m)
    if not ts:
        return None
    t = pick(rng, ts)
    t.data_type = pick(rng, ELEM_TYPES)
    return f"tensor {t.name!r}: data_type {t.data_type}"


#: the symbols dim_symbol names a dimension with ('' clears it: an unknown dimension)
DIM_SYMBOLS = ("N", "batch", "sequence", "height", "?", "")


def dim_symbol(m: Mutant, rng: np.random.Generator) -> str | None:
    """A fixed dimension of a graph input (and of the outputs that share its size) made symbolic: a named
    dim_param (sometimes one another input already uses), '?' or unknown; the data fed keeps its shape."""
    g = m.model.graph
    inits = {t.name for t in g.initializer}
    found = [(vi, k) for vi in g.input if vi.name not in inits and vi.type.HasField("tensor_type")
             for k, d in enumerate(vi.type.tensor_type.shape.dim) if d.HasField("dim_value")]
    if not found:
        return None
    vi, k = pick(rng, found)
    used = sorted({d.dim_param for v in g.input for d in v.type.tensor_type.shape.dim if d.dim_param})
    name = pick(rng, used) if used and rng.random() < 0.3 else pick(rng, DIM_SYMBOLS)
    d = vi.type.tensor_type.shape.dim[k]
    d.Clear()
    if name:
        d.dim_param = name
    return f"{vi.name} dim {k} -> {name!r}" if name else f"{vi.name} dim {k} -> unknown"


MODEL_MUTATORS: dict[str, Mutator] = {
    "dim_symbol": dim_symbol,
    "attr_int": attr_int,
    "attr_float": attr_float,
    "attr_kind": attr_kind,
    "shape_dim": shape_dim,
    "shape_rank": shape_rank,
    "dtype_decl": dtype_decl,
    "name_duplicate": name_duplicate,
    "name_empty": name_empty,
    "name_dangling": name_dangling,
    "name_utf8": name_utf8,
    "output_twice": output_twice,
    "node_output_twice": node_output_twice,
    "opset": opset,
    "node_domain": node_domain,
    "node_graph": node_graph,
    "node_arity": node_arity,
    "op_swap": op_swap,
    "tensor_dtype": initializer_dtype,
}
