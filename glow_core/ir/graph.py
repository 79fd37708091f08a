"""The graph IR: Module > Function > Nodes, Placeholders and Constants.

In the spirit of torch.fx: every value knows its users, and they are kept up to
date automatically when inputs change; ``replace_all_uses_with`` rewires a
value; ``erase_node`` refuses a node whose results are still used; nodes are
kept in a list in topological order with an insertion point; ``verify()``
checks the invariants.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from glow_core.errors import GlowTypeError, GlowVerifyError, GraphError
from glow_core.ir.kinds import NodeKind, get_kind
from glow_core.ir.types import ElemKind, TensorType


class Value:
    """A tensor-valued SSA value: a node result, a Placeholder or a Constant."""

    __slots__ = ("name", "type", "users", "__weakref__")

    def __init__(self, name: str, type: TensorType) -> None:
        self.name = name
        self.type = type
        #: (node, operand index) pairs that read this value
        self.users: list[tuple[Node, int]] = []

    @property
    def producer(self) -> "Node | None":
        return None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def elem(self) -> ElemKind:
        return self.type.elem

    def user_nodes(self) -> list["Node"]:
        seen: dict[int, Node] = {}
        for n, _ in self.users:
            seen.setdefault(id(n), n)
        return list(seen.values())

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


class Placeholder(Value):
    """A function input, bound to caller memory at run time."""

    __slots__ = ()


class Constant(Value):
    """A weight: a value known at compile time. Its payload is read-only."""

    __slots__ = ("payload",)

    def __init__(self, name: str, payload: np.ndarray, type: TensorType | None = None) -> None:
        # a read-only view: the caller's array keeps its own flags (ascontiguousarray makes 0-d arrays 1-d)
        payload = np.asarray(payload, order="C").view()
        payload.setflags(write=False)
        super().__init__(name, type or TensorType.of(payload))
        if payload.dtype != self.type.dtype or payload.shape != self.type.shape:
            raise GlowTypeError(f"constant {name}: payload {payload.dtype}{list(payload.shape)} does not match {self.type}")
        self.payload = payload


class NodeOutput(Value):
    """Result number ``index`` of ``node``."""

    __slots__ = ("node", "index")

    def __init__(self, name: str, type: TensorType, node: "Node", index: int) -> None:
        super().__init__(name, type)
        self.node = node
        self.index = index

    @property
    def producer(self) -> "Node":
        return self.node


class Node:
    """An operation of a kind from the node-kind table."""

    __slots__ = ("kind", "name", "attrs", "origin", "_inputs", "outputs", "function")

    def __init__(self, kind: NodeKind, name: str, attrs: dict[str, Any], origin: str) -> None:
        self.kind = kind
        self.name = name
        self.attrs: Mapping[str, Any] = attrs
        #: the ONNX node this came from, for error messages
        self.origin = origin
        self._inputs: list[Value | None] = []
        self.outputs: list[NodeOutput] = []
        self.function: Function | None = None

    @property
    def op(self) -> str:
        return self.kind.name

    @property
    def inputs(self) -> tuple[Value | None, ...]:
        return tuple(self._inputs)

    @property
    def result(self) -> NodeOutput:
        if len(self.outputs) != 1:
            raise GraphError(f"node {self.where()} has {len(self.outputs)} results; use .outputs")
        return self.outputs[0]

    def input_types(self) -> list[TensorType | None]:
        return [v.type if v is not None else None for v in self._inputs]

    def set_input(self, index: int, value: Value | None) -> None:
        old = self._inputs[index]
        if old is not None:
            old.users.remove((self, index))
        self._inputs[index] = value
        if value is not None:
            value.users.append((self, index))

    def where(self) -> str:
        origin = f" (from ONNX node '{self.origin}')" if self.origin and self.origin != self.name else ""
        return f"{self.kind.name} '{self.name}'{origin}"

    def has_users(self) -> bool:
        return any(o.users for o in self.outputs)

    def __repr__(self) -> str:
        return f"<{self.where()}>"


class Function:
    """A graph: inputs, constants, nodes in topological order, named outputs."""

    def __init__(self, name: str = "main") -> None:
        self.name = name
        self.inputs: list[Placeholder] = []
        self.constants: list[Constant] = []
        self.nodes: list[Node] = []
        #: (output name, value) in order; the same value may appear twice
        self.outputs: list[tuple[str, Value]] = []
        #: ONNX sequence / optional outputs flattened into several (or no) outputs: name -> how they rebuild
        #: ("sequence", n) / ("optional", inner or None); see glow_core/importer/structured.py
        self.structure: dict[str, Any] = {}
        self._names: set[str] = set()
        #: base -> the next suffix to try (names are never released, so the ones below are taken)
        self._next_suffix: dict[str, int] = {}
        self._insert_at: int | None = None  # None: append

    # -- names -------------------------------------------------------------
    def unique_name(self, base: str) -> str:
        """``base``, or ``base_N`` with the smallest free N: amortized O(1) (a per-base counter)."""
        base = base or "v"
        if base not in self._names:
            self._names.add(base)
            return base
        i = self._next_suffix.get(base, 1)
        while f"{base}_{i}" in self._names:
            i += 1
        self._next_suffix[base] = i + 1
        name = f"{base}_{i}"
        self._names.add(name)
        return name

    # -- leaves ------------------------------------------------------------
    def add_input(self, name: str, type: TensorType) -> Placeholder:
        if name in self._names:
            raise GraphError(f"input name '{name}' is already used in function {self.name}")
        self._names.add(name)
        p = Placeholder(name, type)
        self.inputs.append(p)
        return p

    def add_constant(self, payload: np.ndarray, name: str = "const", type: TensorType | None = None) -> Constant:
        c = Constant(self.unique_name(name), payload, type)
        self.constants.append(c)
        return c

    def set_output(self, name: str, value: Value) -> None:
        self._check_owned(value, "output")
        self.outputs.append((name, value))

    def output_values(self) -> list[Value]:
        return [v for _, v in self.outputs]

    def is_output(self, value: Value) -> bool:
        return any(v is value for _, v in self.outputs)

    # -- nodes -------------------------------------------------------------
    def create(
        self,
        kind: str,
        inputs: Sequence[Value | None],
        attrs: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
        origin: str = "",
    ) -> Node:
        """Create a node at the insertion point, checking its attributes and types."""
        spec = get_kind(kind)
        where = f"{kind} '{name or kind}'" + (f" (from ONNX node '{origin}')" if origin else "")
        spec.check_arity(len(inputs), where)
        fixed = [o for o in spec.inputs if not o.variadic]
        if len(inputs) < len(fixed) and not (spec.inputs and spec.inputs[-1].variadic):
            # trailing optional operands left out: store them as explicit None, so every
            # interpretation sees one entry per declared operand
            inputs = list(inputs) + [None] * (len(fixed) - len(inputs))
        for v in inputs:
            if v is not None:
                self._check_owned(v, f"operand of {where}")
        norm = spec.normalize_attrs(attrs or {}, where)
        in_types = [v.type if v is not None else None for v in inputs]
        if any(t is None for t, o in zip(in_types, spec.inputs) if not o.optional and not o.variadic):
            raise GlowTypeError(f"{where}: a required operand is missing")
        out_types = infer_types(spec, in_types, norm, where)
        node = Node(spec, self.unique_name(name or kind.lower()), norm, origin)
        node.function = self
        for i, v in enumerate(inputs):
            node._inputs.append(None)
            node.set_input(i, v)
        outs = spec.outputs
        for i, t in enumerate(out_types):
            named = i < len(outs) and not spec.variadic_outputs  # a variadic family is numbered
            suffix = "" if len(out_types) == 1 else f".{outs[i] if named else i}"
            node.outputs.append(NodeOutput(node.name + suffix, t, node, i))
        if self._insert_at is None:
            self.nodes.append(node)
        else:
            self.nodes.insert(self._insert_at, node)
            self._insert_at += 1
        return node

    def _index_of(self, node: Node, what: str) -> int:
        if node.function is not self:
            raise GraphError(f"{what}: {node.where()} is not a node of function {self.name} (erased or foreign)")
        return self.nodes.index(node)

    @contextlib.contextmanager
    def inserting_before(self, node: Node) -> Iterator[None]:
        saved = self._insert_at
        self._insert_at = self._index_of(node, "inserting_before")
        try:
            yield
        finally:
            self._insert_at = saved

    @contextlib.contextmanager
    def inserting_after(self, node: Node) -> Iterator[None]:
        saved = self._insert_at
        self._insert_at = self._index_of(node, "inserting_after") + 1
        try:
            yield
        finally:
            self._insert_at = saved

    def replace_all_uses_with(self, old: Value, new: Value) -> int:
        """Make every reader of ``old`` (and every output) read ``new``."""
        if old is new:
            return 0
        self._check_owned(new, "replacement")
        if old.type != new.type:
            raise GraphError(f"replace_all_uses_with: %{old.name}: {old.type} and %{new.name}: {new.type} differ in type")
        count = 0
        for node, idx in list(old.users):
            node.set_input(idx, new)
            count += 1
        for i, (n, v) in enumerate(self.outputs):
            if v is old:
                self.outputs[i] = (n, new)
                count += 1
        return count

    def erase_node(self, node: Node) -> None:
        """Remove a node whose results have no users (refused otherwise)."""
        index = self._index_of(node, "erase_node")
        for o in node.outputs:
            if o.users or self.is_output(o):
                readers = ", ".join(u.where() for u in o.user_nodes()) or "a function output"
                raise GraphError(f"cannot erase {node.where()}: its result %{o.name} is still used by {readers}")
        for i in range(len(node._inputs)):
            node.set_input(i, None)
        del self.nodes[index]
        if self._insert_at is not None and index < self._insert_at:
            self._insert_at -= 1  # keep inserting at the same place
        node.function = None

    def erase_unused_constants(self) -> int:
        out = {id(v) for v in self.output_values()}
        keep = [c for c in self.constants if c.users or id(c) in out]
        removed = len(self.constants) - len(keep)
        self.constants = keep
        return removed

    def _check_owned(self, v: Value, what: str) -> None:
        if isinstance(v, NodeOutput):
            if v.node.function is not self:
                raise GraphError(f"{what}: %{v.name} belongs to another function or was erased")
        elif not isinstance(v, (Placeholder, Constant)):
            raise GraphError(f"{what}: {v!r} is not a graph value")

    # -- queries -----------------------------------------------------------
    def nodes_of(self, kind: str) -> list[Node]:
        return [n for n in self.nodes if n.kind.name == kind]

    def count_by_kind(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.kind.name] = counts.get(n.kind.name, 0) + 1
        return dict(sorted(counts.items()))

    def verify(self) -> None:
        """Check types, topological order, ownership, users and unique names."""
        from glow_core.ir.verify import verify_function

        verify_function(self)

    def dump(self) -> str:
        from glow_core.ir.printer import format_function

        return format_function(self)

    def __repr__(self) -> str:
        return f"<Function {self.name}: {len(self.nodes)} nodes>"


class Module:
    """A compilation unit: one or more functions."""

    def __init__(self) -> None:
        self.functions: dict[str, Function] = {}

    def create_function(self, name: str = "main") -> Function:
        if name in self.functions:
            raise GraphError(f"module already has a function named {name!r}")
        f = Function(name)
        self.functions[name] = f
        return f

    def verify(self) -> None:
        for f in self.functions.values():
            f.verify()


def infer_types(
    spec: NodeKind, in_types: Sequence[TensorType | None], attrs: Mapping[str, Any], where: str
) -> list[TensorType]:
    """Run a kind's type rule and verifier, prefixing errors with ``where``."""
    try:
        out = list(spec.infer(in_types, attrs))
        if spec.verify is not None:
            spec.verify(in_types, attrs, out)
    except GlowTypeError as e:
        shapes = ", ".join(str(t) if t is not None else "-" for t in in_types)
        raise GlowTypeError(f"{where}: {e} (operands: {shapes})", hint=e.hint) from None
    if not spec.variadic_outputs and len(out) != len(spec.outputs):
        raise GlowVerifyError(f"{where}: type rule gave {len(out)} results, kind declares {len(spec.outputs)}")
    return out
