"""Sequence and optional values on the host, between the compiled pieces of a model.

Inside one compiled piece, sequences and optionals are resolved at import time
(``glow_core/importer/structured.py``): flattened into tensors ``s[0]``, ``s[1]``, ...
Between pieces (a loop-carried sequence, an If branch yielding an optional, a
sequence captured by a loop body) the host holds them as Python values:

- a sequence is a :class:`HostSeq`, a list of arrays that knows its element dtype
  (so that an empty one can be declared);
- an optional is a :class:`HostOpt` holding an array, a :class:`HostSeq` or nothing.

A program fed such a value declares its input with the value's ONNX type and compiles
for its signature (the sequence's length and element shapes, whether the optional is
empty): :func:`declare`. A program's structured outputs come back flattened and are
rebuilt by :func:`from_flat`. The caller gets plain lists and None (:func:`to_user`),
as ``onnx.reference`` returns them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import onnx

from glow_core.errors import GlowTypeError, InputError, UnsupportedError
from glow_core.importer.structured import OptShape, SeqShape, flatten_feed, item_name, kind_of, rebuild
from glow_core.importer.subgraphs import node_uses


class HostSeq(list):  # type: ignore[type-arg]
    """An ONNX sequence on the host: its arrays in order, and their dtype (None: not known)."""

    def __init__(self, items: Any = (), elem: np.dtype | None = None) -> None:
        super().__init__(np.asarray(x) for x in items)
        self.elem = np.dtype(elem) if elem is not None else (self[0].dtype if self else None)


@dataclass(frozen=True)
class HostOpt:
    """An ONNX optional on the host; ``inner``: the ONNX type of what it may hold (None: not known)."""

    value: "np.ndarray | HostSeq | None"
    inner: onnx.TypeProto | None = None


def _elem_dtype(tp: onnx.TypeProto | None) -> np.dtype | None:
    """The element dtype of a tensor type or a sequence-of-tensors type."""
    if tp is None:
        return None
    k = kind_of(tp)
    if k == "sequence_type":
        return _elem_dtype(tp.sequence_type.elem_type)
    if k == "tensor_type" and tp.tensor_type.elem_type:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tp.tensor_type.elem_type))
    return None


def from_flat(name: str, how: Any, flat: Mapping[str, np.ndarray], tp: onnx.TypeProto | None) -> Any:
    """The host value of ``name`` from its flattened tensors; ``how`` as :func:`structured.describe` says."""
    if how == "tensor" or how[0] == "ragged":
        return rebuild(name, how, flat)
    if how[0] == "sequence":
        elem = _elem_dtype(tp if tp is not None and kind_of(tp) == "sequence_type" else None)
        return HostSeq((flat[item_name(name, i)] for i in range(how[1])), elem)
    inner_tp = tp.optional_type.elem_type if tp is not None and kind_of(tp) == "optional_type" else None
    if how[1] is None:
        return HostOpt(None, inner_tp)
    return HostOpt(from_flat(name, how[1], flat, inner_tp), inner_tp)


def type_of(name: str, value: Any) -> onnx.TypeProto:
    """The ONNX type a program input holding ``value`` is declared with (shapes left out)."""
    if isinstance(value, HostSeq):
        if value.elem is None:
            raise UnsupportedError(f"value '{name}' is an empty sequence whose element type is not known here",
                                   hint="declare the sequence's element type (SequenceEmpty's dtype, the "
                                        "subgraph input's type)")
        elem = onnx.helper.np_dtype_to_tensor_dtype(value.elem)
        return onnx.helper.make_sequence_type_proto(onnx.helper.make_tensor_type_proto(elem, None))
    if isinstance(value, HostOpt):
        inner = type_of(name, value.value) if value.value is not None else value.inner
        if inner is None:
            raise UnsupportedError(f"value '{name}' is an empty optional whose type is not known here",
                                   hint="declare it (the Optional node's 'type' attribute, the subgraph input's type)")
        return onnx.helper.make_optional_type_proto(inner)
    a = np.asarray(value)
    return onnx.helper.make_tensor_type_proto(onnx.helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))


def coerce(name: str, value: Any, declared: onnx.TypeProto | None) -> Any:
    """``value`` as the kind a subgraph input is declared: a sequence or tensor fed to an optional input
    is wrapped (a loop whose optional carried value becomes a sequence), an optional fed to a tensor or
    sequence input is unwrapped."""
    if declared is None or not declared.WhichOneof("value"):
        return value
    k = kind_of(declared)
    if k == "optional_type" and not isinstance(value, HostOpt):
        return HostOpt(value, declared.optional_type.elem_type)
    if k != "optional_type" and isinstance(value, HostOpt):
        if value.value is None:
            raise GlowTypeError(f"value '{name}' is an empty optional, where a {k.replace('_type', '')} is declared")
        return value.value
    return value


def declare(name: str, value: Any) -> tuple[onnx.ValueInfoProto, Any, dict[str, np.ndarray]]:
    """(the input's declaration, its signature for the importer, its flattened tensors)."""
    tp = type_of(name, value)
    vi = onnx.helper.make_value_info(name, tp)
    if isinstance(value, np.ndarray) or not isinstance(value, (HostSeq, HostOpt)):
        a = np.asarray(value)
        return vi, tuple(a.shape), {name: a}
    signature, flat = flatten_feed(name, to_user(value), tp)
    assert isinstance(signature, (SeqShape, OptShape))
    return vi, signature, flat


def to_user(value: Any) -> Any:
    """What a caller gets: a list of arrays for a sequence, None for an empty optional."""
    if isinstance(value, HostOpt):
        return to_user(value.value)
    if isinstance(value, HostSeq):
        return list(value)
    return value



@dataclass(frozen=True)
class Append:
    """A SequenceInsert run on the host after a program's compiled pieces: ``out = seq`` with ``tensor``
    inserted at ``position`` (a name, or "" for the end)."""

    seq: str
    tensor: str
    position: str
    out: str

    def run(self, seq: Any, values: Mapping[str, Any]) -> HostSeq:
        where = f"SequenceInsert '{self.out}'"
        if not isinstance(seq, HostSeq):
            raise GlowTypeError(f"{where}: expects a sequence, got {type(seq).__name__}")
        t = np.asarray(values[self.tensor])
        if seq.elem is not None and t.dtype != seq.elem:
            raise GlowTypeError(f"{where}: inserts a {t.dtype} tensor into a sequence of {seq.elem}")
        n = len(seq)
        p = n if not self.position else int(np.asarray(values[self.position]).reshape(-1)[0])
        if not -n <= p <= n:
            raise InputError(f"{where}: position {p} is outside [-{n}, {n}]")
        p = p + n if p < 0 else p
        return HostSeq(list(seq[:p]) + [t] + list(seq[p:]), seq.elem or t.dtype)


def hoist_appends(template: onnx.ModelProto, declared: Mapping[str, onnx.TypeProto]
                  ) -> tuple[onnx.ModelProto, list[Append]]:
    """Take out of a program the SequenceInsert nodes whose sequence is a formal input declared a sequence,
    read by nothing else, and whose result is only an output of the program (a loop body appending to a
    carried sequence): the host runs them (:class:`Append`), and the compiled pieces, which no longer
    take the sequence, compile once instead of once per length. Their tensor operands become outputs."""
    graph = template.graph
    uses: dict[str, int] = {}
    for node in graph.node:
        for n in node_uses(node):
            uses[n] = uses.get(n, 0) + 1
    outputs = {o.name for o in graph.output}
    appends = [Append(node.input[0], node.input[1], node.input[2] if len(node.input) > 2 else "", node.output[0])
               for node in graph.node
               if node.op_type == "SequenceInsert" and node.domain in ("", "ai.onnx") and len(node.input) >= 2
               and node.input[0] in declared and kind_of(declared[node.input[0]]) == "sequence_type"
               and uses.get(node.input[0]) == 1 and node.input[0] not in outputs
               and node.output[0] in outputs and not uses.get(node.output[0])]
    if not appends:
        return template, []
    hoisted = {a.out for a in appends}
    m = onnx.ModelProto()
    m.CopyFrom(template)
    del m.graph.node[:]
    m.graph.node.extend(n for n in graph.node if not (n.op_type == "SequenceInsert" and n.output[0] in hoisted))
    del m.graph.output[:]
    m.graph.output.extend(o for o in graph.output if o.name not in hoisted)
    kept = {o.name for o in m.graph.output}
    for a in appends:
        for n in (a.tensor, a.position):
            if n and n not in kept:
                m.graph.output.append(onnx.ValueInfoProto(name=n))
                kept.add(n)
    return m, appends
