"""Graph surgery for the runtime: the prepared function seen by several backends, and sub-functions.

- :class:`UnionBackend` prepares (optimizes and lowers) one function for a list of backends in
  priority order: a node is lowered only when no backend of the list runs it natively; fusions and
  post-lowering rewrites are those of the first backend (so they never take work away from it).
- :func:`extract` copies a set of nodes into a new Function whose inputs are the tensors it reads
  from outside (model inputs or other partitions' results) and whose outputs are the tensors read
  outside it (or model outputs).
- :func:`segment_memory` estimates what a set of nodes needs on a device.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from glow_core.ir.graph import Constant, Function, Node, Value
from glow_core.ir.kinds import Category
from glow_core.ir.types import ElemKind
from glow_sdk.backend import Backend, CompiledFunction, CompileOptions


class UnionBackend(Backend):
    """What a list of backends runs together (used only to prepare the function, never to compile)."""

    def __init__(self, backends: Sequence[Backend]) -> None:
        self.backends = list(backends)
        self.name = "+".join(b.name for b in self.backends)

    def supported_kinds(self) -> Mapping[str, frozenset[ElemKind]]:
        return self.backends[0].supported_kinds()  # fusion asks this: only the first backend's fusions

    def supports(self, node: Node) -> bool:
        return any(b.supports(node) for b in self.backends)

    def should_lower(self, node: Node) -> bool:
        return not any(b.supports(node) for b in self.backends)

    def transform_post_lowering(self, function: Function) -> bool:
        return bool(self.backends[0].transform_post_lowering(function))

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:  # pragma: no cover
        raise NotImplementedError("UnionBackend only prepares functions")

    def evaluate(self, kind, attrs, inputs, out_types):  # type: ignore[no-untyped-def]
        return self.backends[0].evaluate(kind, attrs, inputs, out_types)


def boundary(function: Function, nodes: Sequence[Node]) -> tuple[list[Value], list[Value]]:
    """(values read from outside ``nodes`` other than constants, values of ``nodes`` read outside or outputs)."""
    inside = {id(n) for n in nodes}
    produced = {id(o) for n in nodes for o in n.outputs}
    ins: list[Value] = []
    seen: set[int] = set()
    for n in nodes:
        for v in n.inputs:
            if v is None or isinstance(v, Constant) or id(v) in produced or id(v) in seen:
                continue
            seen.add(id(v))
            ins.append(v)
    outs: list[Value] = []
    model_outs = {id(v) for v in function.output_values()}
    for n in nodes:
        for o in n.outputs:
            if id(o) in model_outs or any(id(u) not in inside for u in o.user_nodes()):
                outs.append(o)
    return ins, outs


def extract(function: Function, nodes: Sequence[Node], name: str) -> Function:
    """A new Function computing ``nodes`` (in the given topological order); see the module docstring.

    Its inputs and outputs are named after the original values (``Value.name``), so tensors are passed
    between partitions by name. Constants are shared (same payload arrays, not copied).
    """
    ins, outs = boundary(function, nodes)
    sub = Function(name)
    env: dict[int, Value] = {}
    for v in ins:
        env[id(v)] = sub.add_input(v.name, v.type)
    for n in nodes:
        args: list[Value | None] = []
        for v in n.inputs:
            if v is None:
                args.append(None)
            elif id(v) not in env:
                assert isinstance(v, Constant), f"{n.where()}: operand {v.name} is neither inside nor an input"
                env[id(v)] = sub.add_constant(v.payload, v.name, v.type)
                args.append(env[id(v)])
            else:
                args.append(env[id(v)])
        copy = sub.create(n.kind.name, args, dict(n.attrs), name=n.name, origin=n.origin)
        for old, new in zip(n.outputs, copy.outputs):
            env[id(old)] = new
    for o in outs:
        sub.set_output(o.name, env[id(o)])
    return sub


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a partition needs on a device: weights, the activation arena, inputs and outputs."""

    constant_bytes: int
    activation_bytes: int
    io_bytes: int

    @property
    def total(self) -> int:
        return self.constant_bytes + self.activation_bytes + self.io_bytes


def segment_memory(function: Function, nodes: Sequence[Node]) -> MemoryEstimate:
    """Estimate from the graph: distinct constants, the peak of live intermediate results, boundary tensors.

    The activation figure is the peak of the bytes of results alive at once while the nodes run in
    order (what a perfect memory plan reaches); a compiled partition's own memory plan replaces it
    when the device manager loads it (:func:`glow_core.runtime.device_manager.compiled_memory`).
    """
    ins, outs = boundary(function, nodes)
    io_ids = {id(v) for v in ins} | {id(v) for v in outs}
    consts: dict[int, int] = {}
    for n in nodes:
        for v in n.inputs:
            if isinstance(v, Constant):
                consts[id(v)] = v.type.nbytes
    last: dict[int, int] = {}
    for i, n in enumerate(nodes):
        for v in n.inputs:
            if v is not None:
                last[id(v)] = i
    live = peak = 0
    free_at: dict[int, int] = {}
    for i, n in enumerate(nodes):
        for o in n.outputs:
            if id(o) not in io_ids:
                live += o.type.nbytes
                end = last.get(id(o), i)
                free_at[end] = free_at.get(end, 0) + o.type.nbytes
        peak = max(peak, live)
        live -= free_at.pop(i, 0)
    io = sum(v.type.nbytes for v in ins) + sum(v.type.nbytes for v in outs)
    return MemoryEstimate(sum(consts.values()), peak, io)


def _conv_reduction(node: Node) -> int:
    """Multiply-adds per output element of a convolution: the filter's size per output channel."""
    w = node.inputs[1] if len(node.inputs) > 1 else None
    return max(1, w.type.size // max(1, w.type.shape[0])) if w is not None and w.type.rank >= 2 else 1


def _contraction(node: Node) -> int:
    """Multiply-adds per output element of a matrix product: the first operand's last dimension."""
    a = node.inputs[0] if node.inputs else None
    return max(1, a.type.shape[-1]) if a is not None and a.type.rank >= 1 else 1


#: category of the node-kind table -> multiply-adds per output element (kinds in none of them: 0)
REDUCTION_SIZE: dict[Category, Callable[[Node], int]] = {
    Category.CONVOLUTION: _conv_reduction,
    Category.LINEAR_ALGEBRA: _contraction,
}


def node_cost(node: Node) -> int:
    """A rough cost of one node: elements read and written, plus the multiply-adds of convolutions and
    matrix products (by the categories of the node-kind table, :data:`REDUCTION_SIZE`)."""
    elems = sum(v.type.size for v in node.inputs if v is not None) + sum(o.type.size for o in node.outputs)
    rule = next((f for c, f in REDUCTION_SIZE.items() if node.kind.is_(c)), None)
    if rule is None or not node.outputs:
        return elems
    return elems + node.outputs[0].type.size * rule(node)
