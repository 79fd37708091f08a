"""What a session knows of its model before anything is compiled: inputs and outputs, and pruning.

:func:`node_args` describes a graph's inputs and outputs the way onnxruntime does (``NodeArg`` with a
name, a type string such as ``tensor(float)`` and a shape whose symbolic dimensions are strings);
:func:`prune` keeps only the nodes, initializers and inputs a set of outputs needs, so a session
compiles (and runs) only what is asked; :func:`check_feed` compares an array with what an input
declares before any compile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from glow_core.errors import InputError

#: a dimension as onnxruntime reports it: a size, a symbol ("batch"), or None (unknown)
Dim = int | str | None


@dataclass(frozen=True)
class NodeArg:
    """One input or output of the model: ``name``, ``type`` (``"tensor(float)"``), ``shape`` (``["N", 3, 224]``)."""

    name: str
    type: str
    shape: list[Dim]

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


def type_string(tp: onnx.TypeProto) -> str:
    """onnxruntime's name of an ONNX type: ``tensor(float)``, ``seq(tensor(int64))``, ``optional(tensor(bool))``."""
    kind = tp.WhichOneof("value")
    if kind == "sequence_type":
        return f"seq({type_string(tp.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({type_string(tp.optional_type.elem_type)})"
    if kind == "map_type":
        key = onnx.TensorProto.DataType.Name(tp.map_type.key_type).lower()
        return f"map({key},{type_string(tp.map_type.value_type)})"
    elem = tp.tensor_type.elem_type if kind == "tensor_type" else 0
    return f"tensor({onnx.TensorProto.DataType.Name(elem).lower() if elem else 'undefined'})"


def dims_of(tp: onnx.TypeProto) -> list[Dim]:
    """A tensor type's dimensions (``[]`` for a scalar, or for a type with no shape or no tensor)."""
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return []
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tp.tensor_type.shape.dim]


def node_args(values: Sequence[onnx.ValueInfoProto]) -> list[NodeArg]:
    return [NodeArg(v.name, type_string(v.type), dims_of(v.type)) for v in values]


def real_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that are not initializers (IR v3 models list both)."""
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def _subgraph_names(node: onnx.NodeProto) -> set[str]:
    """Every name the subgraphs of ``node`` (If, Loop, Scan) read: outer-scope values they may capture."""
    names: set[str] = set()
    for attr in node.attribute:
        for g in [attr.g] if attr.HasField("g") else list(attr.graphs):
            for inner in g.node:
                names.update(inner.input)
                names |= _subgraph_names(inner)
    return names


def prune(model: onnx.ModelProto, outputs: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``model`` that computes ``outputs`` only (in that order): the nodes, initializers, inputs and
    value infos they need."""
    g = model.graph
    needed = set(outputs)
    kept: list[onnx.NodeProto] = []
    for node in reversed(g.node):
        if any(o in needed for o in node.output):
            kept.append(node)
            needed.update(i for i in node.input if i)
            needed |= _subgraph_names(node)
    produced = {o for n in kept for o in n.output}
    out = onnx.ModelProto()
    out.ir_version, out.producer_name, out.producer_version = model.ir_version, model.producer_name, \
        model.producer_version
    out.domain, out.model_version, out.doc_string = model.domain, model.model_version, model.doc_string
    out.opset_import.extend(model.opset_import)
    out.functions.extend(model.functions)
    out.metadata_props.extend(model.metadata_props)
    pg = out.graph
    pg.name = g.name
    pg.node.extend(reversed(kept))
    pg.initializer.extend(t for t in g.initializer if t.name in needed)
    pg.sparse_initializer.extend(t for t in g.sparse_initializer if t.values.name in needed)
    pg.input.extend(vi for vi in g.input if vi.name in needed)
    by_name = {vi.name: vi for vi in g.output}
    pg.output.extend(by_name[n] for n in dict.fromkeys(outputs))
    pg.value_info.extend(vi for vi in g.value_info if vi.name in produced)
    return out


def numpy_dtype(tp: onnx.TypeProto) -> np.dtype | None:
    """The numpy dtype of a tensor type (None for other types and element types numpy lacks)."""
    if tp.WhichOneof("value") != "tensor_type":
        return None
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tp.tensor_type.elem_type))
    except (KeyError, TypeError, ValueError):
        return None


def check_feed(vi: onnx.ValueInfoProto, value: np.ndarray) -> None:
    """An InputError (naming the input and what the model declares) when ``value``'s dtype, rank or a fixed
    dimension differs from the declaration of input ``vi``."""
    want = numpy_dtype(vi.type)
    if want is not None and value.dtype != want:
        raise InputError(f"input '{vi.name}' has dtype {value.dtype}; the model declares {type_string(vi.type)}",
                         hint=f"convert it with .astype(numpy.{want})")
    dims = dims_of(vi.type)
    if vi.type.tensor_type.HasField("shape") and (
            len(dims) != value.ndim or any(isinstance(d, int) and d != n for d, n in zip(dims, value.shape))):
        shown = "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
        raise InputError(f"input '{vi.name}' has shape {list(value.shape)}; the model declares {shown}",
                         hint="symbolic dimensions (names) take any size; numbers must match")


def check_names(names: Any, known: Sequence[str], what: str) -> list[str]:
    """``names`` as a list of strings, each one of ``known``; else an InputError listing them."""
    if isinstance(names, str) or not isinstance(names, Sequence) or not all(isinstance(n, str) for n in names):
        raise InputError(f"{what} names must be a list of strings, got {names!r}")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(f"unknown {what}(s) {', '.join(repr(n) for n in unknown)}; the model's {what}s are: "
                         + (", ".join(known) or "(none)"))
    return list(names)


__all__ = ["NodeArg", "check_feed", "check_names", "dims_of", "node_args", "prune", "real_inputs", "type_string"]
