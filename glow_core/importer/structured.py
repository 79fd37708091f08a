"""ONNX sequence and optional values, resolved at import time.

Glow's graph IR is statically typed: every value is one tensor of a fixed type.
An ONNX *sequence* whose length and element positions are known when the model
is imported becomes a Python list of graph values (:class:`SeqValue`); an ONNX
*optional* whose presence is known becomes :class:`OptValue`. The sequence and
optional operators (``rules/sequence.py``) rewrite those lists at import time,
so no graph node ever sees a sequence.

Model inputs and outputs of sequence or optional type are flattened into plain
tensors named after the ONNX value:

- a sequence ``s`` of N tensors is the N inputs (outputs) ``s[0]`` ... ``s[N-1]``;
- an optional ``o`` holding a tensor is the tensor ``o``; holding a sequence, the
  tensors ``o[0]`` ...; an empty optional has no tensor at all.

The length of an input sequence and the presence of an optional input are part
of the input signature, given with ``input_shapes`` as :class:`SeqShape` /
:class:`OptShape` (``glow_core.onnx_backend`` builds them from the values passed).
How each output is rebuilt is recorded in ``Function.structure``
(output name -> :class:`SeqShape`-like description, see :func:`describe`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence, Union

import numpy as np
import onnx

from glow_core import budget
from glow_core.errors import ExecutionError, GlowTypeError, ImportShapeError, InputError, ModelError, UnsupportedError
from glow_core.ir.graph import Value
from glow_core.ir.types import ElemKind

#: most elements an input sequence may have (each is a separate graph input)
MAX_SEQUENCE_INPUT = 4096


@dataclass(frozen=True)
class SeqValue:
    """An ONNX sequence at import time: its element values in order and their element kind."""

    items: tuple[Value, ...]
    elem: ElemKind | None

    def __len__(self) -> int:
        return len(self.items)


@dataclass(frozen=True)
class OptValue:
    """An ONNX optional at import time: a tensor, a sequence, or nothing (``value`` None)."""

    value: "Value | SeqValue | None"
    #: the declared type when empty (an onnx TypeProto), for messages
    type_proto: Any = None


@dataclass(frozen=True)
class RaggedValue:
    """A result of data-dependent size (NonMaxSuppression, Unique): ``padded`` at its largest size along
    ``axis``, of which the first ``count`` (an int64 scalar value) entries are the ONNX value.

    It can only be a model output: the caller trims it (:func:`rebuild`); a node reading it is refused.
    """

    padded: Value
    count: Value
    axis: int
    producer: str


Structured = Union[SeqValue, OptValue, RaggedValue]


@dataclass(frozen=True)
class SeqShape:
    """The input signature of a sequence input: one shape per element."""

    shapes: tuple[tuple[int, ...], ...]

    def __init__(self, shapes: Sequence[Sequence[int]]) -> None:
        object.__setattr__(self, "shapes", tuple(tuple(int(d) for d in s) for s in shapes))


@dataclass(frozen=True)
class OptShape:
    """The input signature of an optional input: None (empty), a shape, or a :class:`SeqShape`."""

    inner: "tuple[int, ...] | SeqShape | None"


def item_name(name: str, i: int) -> str:
    """The flat tensor name of element ``i`` of the sequence ``name``."""
    return f"{name}[{i}]"


def kind_of(tp: onnx.TypeProto) -> str:
    return tp.WhichOneof("value") or "tensor_type"


def count_name(name: str) -> str:
    """The flat output holding the row count of the data-dependent output ``name``."""
    return f"{name}[count]"


def describe(v: "Value | Structured | None") -> Any:
    """How a flattened output rebuilds: "tensor", ("sequence", n), ("optional", inner or None), ("ragged", axis)."""
    if isinstance(v, RaggedValue):
        return ("ragged", v.axis)
    if isinstance(v, SeqValue):
        return ("sequence", len(v.items))
    if isinstance(v, OptValue):
        return ("optional", None if v.value is None else describe(v.value))
    return "tensor"


def flat_outputs(name: str, v: "Value | Structured") -> list[tuple[str, Value]]:
    """The (flat name, tensor) pairs an output value becomes."""
    if isinstance(v, RaggedValue):
        return [(name, v.padded), (count_name(name), v.count)]
    if isinstance(v, SeqValue):
        return [(item_name(name, i), x) for i, x in enumerate(v.items)]
    if isinstance(v, OptValue):
        return [] if v.value is None else flat_outputs(name, v.value)
    return [(name, v)]


def rebuild(name: str, how: Any, outs: Mapping[str, np.ndarray]) -> Any:
    """The ONNX value of output ``name`` from the flat outputs (a list for a sequence, None for empty)."""
    if how == "tensor":
        return outs[name]
    if how[0] == "sequence":
        return [outs[item_name(name, i)] for i in range(how[1])]
    if how[0] == "ragged":
        padded = outs[name]
        n = int(outs[count_name(name)])
        if not 0 <= n <= padded.shape[how[1]]:
            raise ExecutionError(f"output '{name}': count {n} outside [0, {padded.shape[how[1]]}]",
                                 hint="this is a bug in the backend")
        return np.take(padded, np.arange(n), axis=how[1])
    return None if how[1] is None else rebuild(name, how[1], outs)


def flatten_feed(name: str, value: Any, tp: onnx.TypeProto) -> tuple[Any, dict[str, np.ndarray]]:
    """(signature, flat feeds) of the value fed to an input of ONNX type ``tp``.

    A sequence is fed as a list of arrays, an optional as None (empty) or its content.
    """
    k = kind_of(tp)
    if k == "optional_type":
        if value is None:
            return OptShape(None), {}
        inner, flat = flatten_feed(name, value, tp.optional_type.elem_type)
        return OptShape(inner), flat
    if k == "sequence_type":
        if not isinstance(value, (list, tuple)):
            raise InputError(f"input '{name}' is a sequence: pass a list of arrays, got {type(value).__name__}")
        arrays = [np.asarray(x) for x in value]
        return SeqShape([a.shape for a in arrays]), {item_name(name, i): a for i, a in enumerate(arrays)}
    a = np.asarray(value)
    return tuple(a.shape), {name: a}


def elem_of_type(tp: onnx.TypeProto, where: str) -> ElemKind | None:
    """The element kind of a tensor / sequence-of-tensor / optional type (None when not given)."""
    from glow_core.importer.context import onnx_elem

    k = kind_of(tp)
    if k == "tensor_type":
        return onnx_elem(tp.tensor_type.elem_type, where) if tp.tensor_type.elem_type else None
    if k == "sequence_type":
        return elem_of_type(tp.sequence_type.elem_type, where)
    if k == "optional_type":
        return elem_of_type(tp.optional_type.elem_type, where)
    raise UnsupportedError(f"{where}: {k.replace('_type', '')} values are not supported")


def structured_input(importer: Any, vi: onnx.ValueInfoProto, given: Any) -> "Value | Structured":
    """The import-time value of a model input of sequence or optional type, from its signature."""
    where = f"input '{vi.name}'"
    k = kind_of(vi.type)
    if k == "sequence_type":
        if not isinstance(given, SeqShape):
            raise ImportShapeError(f"{where} is a sequence: its length and element shapes must be given",
                                   hint="pass input_shapes={name: SeqShape([shape, ...])}, or feed it through "
                                        "glow_core.onnx_backend, which takes them from the values passed")
        elem = elem_of_type(vi.type.sequence_type.elem_type, where)
        return _sequence_input(importer, vi.name, given, elem, where)
    if k == "optional_type":
        inner_tp = vi.type.optional_type.elem_type
        if not isinstance(given, OptShape):
            raise ImportShapeError(f"{where} is optional: whether it holds a value must be given",
                                   hint="pass input_shapes={name: OptShape(None | shape | SeqShape(...))}")
        if given.inner is None:
            return OptValue(None, inner_tp)
        if kind_of(inner_tp) == "sequence_type":
            if not isinstance(given.inner, SeqShape):
                raise ImportShapeError(f"{where} is an optional sequence, but a tensor shape was given")
            elem = elem_of_type(inner_tp, where)
            return OptValue(_sequence_input(importer, vi.name, given.inner, elem, where))
        if isinstance(given.inner, SeqShape):
            raise ImportShapeError(f"{where} is an optional tensor, but a sequence was given")
        elem = elem_of_type(inner_tp, where)
        if elem is None:
            raise ModelError(f"{where}: the optional's element type is not declared")
        return OptValue(importer.tensor_input(vi.name, elem, tuple(given.inner)))
    raise UnsupportedError(f"{where}: {k.replace('_type', '')} inputs are not supported")


def _sequence_input(importer: Any, name: str, given: SeqShape, elem: ElemKind | None, where: str) -> SeqValue:
    if elem is None:
        raise ModelError(f"{where}: the sequence's element type is not declared")
    if len(given.shapes) > MAX_SEQUENCE_INPUT:
        raise budget.BudgetError(f"{where}: a sequence of {len(given.shapes)} tensors; at most "
                                 f"{MAX_SEQUENCE_INPUT} are supported", hint="pass fewer elements")
    items = tuple(importer.tensor_input(item_name(name, i), elem, s) for i, s in enumerate(given.shapes))
    return SeqValue(items, elem)


def as_sequence(v: Any, where: str) -> SeqValue:
    """``v`` as a sequence (an optional holding one counts), or a clear error."""
    if isinstance(v, OptValue) and isinstance(v.value, SeqValue):
        return v.value
    if isinstance(v, SeqValue):
        return v
    raise GlowTypeError(f"{where}: expects a sequence, got {what_is(v)}")


def what_is(v: Any) -> str:
    if isinstance(v, RaggedValue):
        return f"a result of data-dependent size (of {v.producer})"
    if isinstance(v, SeqValue):
        return f"a sequence of {len(v.items)} tensors"
    if isinstance(v, OptValue):
        return "an empty optional" if v.value is None else f"an optional holding {what_is(v.value)}"
    if isinstance(v, Value):
        return f"a tensor ({v.type})"
    return "nothing"


def type_proto_of(v: "Value | Structured | None") -> onnx.TypeProto | None:
    """The ONNX type of an import-time value (None when not known: an empty optional without a type)."""
    if isinstance(v, SeqValue):
        if v.elem is None:
            return None
        elem = onnx.helper.np_dtype_to_tensor_dtype(v.elem.dtype)
        return onnx.helper.make_sequence_type_proto(onnx.helper.make_tensor_type_proto(elem, None))
    if isinstance(v, OptValue):
        inner = type_proto_of(v.value) if v.value is not None else v.type_proto
        return None if inner is None else onnx.helper.make_optional_type_proto(inner)
    if isinstance(v, Value):
        return onnx.helper.make_tensor_type_proto(onnx.helper.np_dtype_to_tensor_dtype(v.type.dtype),
                                                  list(v.type.shape))
    return None
