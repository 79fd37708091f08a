"""A small graph builder for lowerings: emits nodes before the node being lowered.

Lowering rules use it to write decompositions compactly::

    @lowering("Softmax")
    def _softmax(b: Builder, node: Node) -> list[Value]:
        x = b.input(0)
        axes = node.attrs["axes"]
        m = b.reduce("ReduceMax", x, axes, keepdims=True)
        e = b.unary("Exp", b.binary("Sub", x, m))
        return [b.binary("Div", e, b.reduce("ReduceSum", e, axes, keepdims=True))]
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from glow_core.ir.graph import Constant, Function, Node, Value
from glow_core.ir.types import ElemKind, TensorType


class Builder:
    def __init__(self, fn: Function, node: Node) -> None:
        self.fn = fn
        self.node = node
        self.origin = node.origin or node.name
        self.base = node.name

    # -- operands of the node being lowered -----------------------------------
    def input(self, i: int) -> Value:
        v = self.node.inputs[i]
        assert v is not None, f"{self.node.where()}: operand {i} is omitted"
        return v

    def opt_input(self, i: int) -> Value | None:
        return self.node.inputs[i] if i < len(self.node.inputs) else None

    @property
    def attrs(self) -> Any:
        return self.node.attrs

    def out_type(self, i: int = 0) -> TensorType:
        return self.node.outputs[i].type

    # -- emitting --------------------------------------------------------------
    def emit(self, kind: str, inputs: Sequence[Value | None], **attrs: Any) -> list[Value]:
        with self.fn.inserting_before(self.node):
            n = self.fn.create(kind, list(inputs), attrs, name=f"{self.base}.{kind.lower()}", origin=self.origin)
        return list(n.outputs)

    def emit1(self, kind: str, inputs: Sequence[Value | None], **attrs: Any) -> Value:
        return self.emit(kind, inputs, **attrs)[0]

    def const(self, value: Any, elem: ElemKind | None = None) -> Constant:
        arr = np.asarray(value, dtype=elem.dtype if elem is not None else None)
        return self.fn.add_constant(np.asarray(arr, order="C"), f"{self.base}.const")  # (ascontiguousarray makes 0-d 1-d)

    def scalar(self, value: float | int | bool, like: Value | ElemKind, rank: int = 0) -> Constant:
        """A constant of ``like``'s element kind with ``rank`` size-1 dims (broadcasts anywhere)."""
        elem = like if isinstance(like, ElemKind) else like.type.elem
        return self.const(np.full((1,) * rank, value, dtype=elem.dtype))

    # -- shorthands ------------------------------------------------------------
    def unary(self, kind: str, x: Value, **attrs: Any) -> Value:
        return self.emit1(kind, [x], **attrs)

    def binary(self, kind: str, a: Value, b: Value) -> Value:
        return self.emit1(kind, [a, b])

    def add(self, a: Value, b: Value) -> Value:
        return self.binary("Add", a, b)

    def sub(self, a: Value, b: Value) -> Value:
        return self.binary("Sub", a, b)

    def mul(self, a: Value, b: Value) -> Value:
        return self.binary("Mul", a, b)

    def div(self, a: Value, b: Value) -> Value:
        return self.binary("Div", a, b)

    def maximum(self, a: Value, b: Value) -> Value:
        return self.binary("Max", a, b)

    def minimum(self, a: Value, b: Value) -> Value:
        return self.binary("Min", a, b)

    def where(self, cond: Value, a: Value, b: Value) -> Value:
        return self.emit1("Where", [cond, a, b])

    def cast(self, x: Value, elem: ElemKind) -> Value:
        return x if x.type.elem == elem else self.emit1("Cast", [x], to=elem)

    def reshape(self, x: Value, shape: Sequence[int]) -> Value:
        shape = tuple(int(d) for d in shape)
        return x if x.type.shape == shape else self.emit1("Reshape", [x], shape=shape)

    def transpose(self, x: Value, perm: Sequence[int]) -> Value:
        perm = tuple(int(p) for p in perm)
        return x if perm == tuple(range(len(perm))) else self.emit1("Transpose", [x], perm=perm)

    def broadcast(self, x: Value, shape: Sequence[int]) -> Value:
        shape = tuple(int(d) for d in shape)
        return x if x.type.shape == shape else self.emit1("Broadcast", [x], shape=shape)

    def reduce(self, kind: str, x: Value, axes: Sequence[int], keepdims: bool = True) -> Value:
        return self.emit1(kind, [x], axes=tuple(axes), keepdims=int(keepdims))

    def slice(self, x: Value, axis: int, start: int, size: int, step: int = 1) -> Value:
        starts = [0] * x.type.rank
        sizes = list(x.type.shape)
        steps = [1] * x.type.rank
        starts[axis], sizes[axis], steps[axis] = start, size, step
        if starts == [0] * x.type.rank and sizes == list(x.type.shape) and step == 1:
            return x
        return self.emit1("Slice", [x], starts=tuple(starts), sizes=tuple(sizes), steps=tuple(steps))

    def concat(self, xs: Sequence[Value], axis: int) -> Value:
        return xs[0] if len(xs) == 1 else self.emit1("Concat", list(xs), axis=axis)
