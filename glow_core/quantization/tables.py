"""Activations inside an int8 island: element-wise float functions of one quantized value as 256-entry tables.

An activation glow has no integer kernel for (Sigmoid, Tanh, HardSwish, GELU in its ``Gelu``, erf and
tanh forms, SiLU written as ``Mul(x, Sigmoid(x))``, ...) is a function of its input alone. Once that input
is an 8-bit quantized value ``q``, the activation's quantized result is a function of ``q``'s code alone:
256 possible inputs. The conversion (:func:`convert_table`, tried for every element-wise node the
ordinary converters decline) therefore replaces the float chain by ``QLookup(q, table)`` with

    table[q - qmin] = quantize_out(f(dequantize_in(q)))

evaluated once, at conversion, with the reference kernels (the executable spec: Dequantize, each float
node of the chain in the graph's order and element types, Quantize), so the table is exact: the float
chain run on the dequantized codes, rounded once into the result's calibrated type. The result joins the
island, so the Concat / Add / Split / next convolution that read it stay on the integers.

A chain is the element-wise nodes between one island value and the node converted (the *root*), reading
nothing else than that value, each other and scalar constants; it must hold at least one non-linear
activation (:data:`TRIGGERS`), or several nodes that are not all clips (HardSigmoid lowered into Mul,
Add, Max, Min; a lone clip is a QClip, usually folded into its producer's range). A node whose every
reader would take it into its own table (``Sigmoid`` in ``x * Sigmoid(x)``; the ``Add(x, 3)`` of a
HardSwish written ``x * Clip(x + 3, 0, 6) / 6``), directly or through readers taken in themselves, is
not converted itself, even when its kind has a converter (:func:`absorbed`): the table covers it,
and the float node dies. A chain whose result only float kinds read (a scaling before a Softmax, a
graph output) stays float: a table there would only add a rounding.

:func:`evaluate_table` is shared with the ``lut-islands`` pass (``lut.py``), which catches the islands
that only form after the quantization passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from glow_core.ir.defs.quant import qbounds
from glow_core.ir.graph import Constant, Node, NodeOutput, Value
from glow_core.ir.kinds import Category, kinds_in
from glow_core.ir.types import ElemKind, TensorType
from glow_core.quantization.calibration import params_for_range
from glow_core.quantization.qpasses import MOVEMENT
from glow_core.reference import run_kernel

if TYPE_CHECKING:
    from glow_core.quantization.convert import Converter

#: the most float nodes one table replaces
MAX_CHAIN = 32
#: kinds a chain of which alone is better left to QClip (saturation usually implies them: no pass at all)
CLIPS = frozenset({"Relu", "Clip", "Max", "Min"})
#: non-linear element-wise kinds that make a chain worth a table (Relu / Clip have QClip; PRelu's slope is a tensor)
TRIGGERS = frozenset((kinds_in(Category.ACTIVATION) & kinds_in(Category.ELEMENTWISE)) - {"Relu", "Clip", "PRelu"}) \
    | {"Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Pow", "Div", "Sin", "Cos", "Abs"}


def evaluate_float(source: TensorType, nodes: Sequence[Node], first: Value, root: Value, where: str) -> np.ndarray:
    """``f(dequantize_in(q))`` in float32 for every code ``q`` of ``source`` (256 values).

    ``first`` is the float value that the dequantized codes stand for, ``nodes`` the chain in topological
    order (each reading ``first``, earlier nodes and scalar constants), ``root`` the chain's result.
    """
    lo, hi = qbounds(source.elem)
    codes = np.arange(lo, hi + 1).astype(source.dtype)
    n = codes.size
    flt = TensorType(ElemKind.FLOAT32, (n,))
    values: dict[int, np.ndarray] = {
        id(first): run_kernel("Dequantize", {"in_params": (source.scale, source.offset)}, [codes], [flt], where)[0]}
    for node in nodes:
        args = [np.asarray(x.payload).reshape(1) if isinstance(x, Constant) else values[id(x)] if x is not None
                else None for x in node.inputs]
        types = [TensorType(o.type.elem, (n,), o.type.scale, o.type.offset) for o in node.outputs]
        values[id(node.outputs[0])] = run_kernel(node.kind.name, node.attrs, args, types, where)[0]
    return np.asarray(values[id(root)], np.float32)


def evaluate_table(source: TensorType, nodes: Sequence[Node], first: Value, root: Value, out: TensorType,
                   where: str) -> np.ndarray:
    """``quantize_out(f(dequantize_in(q)))`` for every code ``q`` of ``source`` (256 entries, ``out``'s dtype);
    see :func:`evaluate_float`."""
    real = evaluate_float(source, nodes, first, root, where)
    attrs = {"elem": out.elem, "scale": out.scale, "offset": out.offset}
    return run_kernel("Quantize", attrs, [real], [out.with_shape((real.size,))], where)[0]


class Chain:
    """The float element-wise nodes computing one value from a single island value (topological order)."""

    def __init__(self, c: Converter, shape: tuple[int, ...]) -> None:
        self.c, self.shape = c, shape
        self.nodes: list[Node] = []
        self.source: Value | None = None

    def take(self, v: Value | None) -> bool:
        """Whether ``v`` can feed the chain (adding its producers); False ends the search."""
        if v is None:
            return True
        if isinstance(v, Constant):
            return v.type.size == 1
        if v.type.shape != self.shape:
            return False
        if self.c.in_island(v):
            if self.source is not None and self.source is not v:
                return False
            self.source = v
            return v.type.elem == ElemKind.FLOAT32
        node = v.node if isinstance(v, NodeOutput) else None
        if node is None or not tableable(self.c, node):
            return False
        if node in self.nodes:
            return True
        if len(self.nodes) >= MAX_CHAIN or not all(self.take(x) for x in node.inputs):
            return False
        self.nodes.append(node)  # after its operands: topological
        return True

    @property
    def worth_a_table(self) -> bool:
        """A non-linear activation, or several nodes that are not all clips (which fold into ranges for free)."""
        names = [n.kind.name for n in self.nodes]
        return self.source is not None and (any(k in TRIGGERS for k in names)
                                            or (len(names) > 1 and any(k not in CLIPS for k in names)))


def tableable(c: Converter, node: Node) -> bool:
    """An element-wise float node of one result that the config does not keep float."""
    kind = node.kind
    if (not kind.is_(Category.ELEMENTWISE) or kind.is_(Category.QUANTIZATION) or len(node.outputs) != 1
            or node.function is not c.fn):
        return False
    names = {node.name, node.origin, node.outputs[0].name}
    return kind.name not in c.cfg.keep_float_kinds and not names & c.cfg.keep_float_names


def _chain(c: Converter, node: Node) -> Chain | None:
    """The chain of float element-wise nodes ending at ``node`` from one island value, or None."""
    out = node.outputs[0] if len(node.outputs) == 1 else None
    if out is None or not tableable(c, node):
        return None
    chain = Chain(c, out.type.shape)
    return chain if chain.take(out) and chain.source is not None else None


def chain_of(c: Converter, node: Node) -> Chain | None:
    """The chain rooted at ``node``, when it is one worth a table with calibrated input and result."""
    chain = _chain(c, node)
    out = node.outputs[0]
    if (chain is None or not chain.worth_a_table or out.type.elem != ElemKind.FLOAT32 or c.qtype(out) is None
            or c.qtype(chain.source) is None):  # type: ignore[arg-type]
        return None
    return chain


def _absorbed_by(c: Converter, node: Node, source: Value) -> bool:
    """Every reader of ``node`` takes it into a table from ``source``: it is a table's root, or it is itself
    taken in by all its readers."""
    out = node.outputs[0]
    if c.fn.is_output(out) or not out.users:
        return False
    for user, _ in out.users:
        chain = _chain(c, user)
        if chain is None or chain.source is not source:
            return False
        if chain_of(c, user) is None and not _absorbed_by(c, user, source):
            return False
    return True


def absorbed(c: Converter, node: Node) -> bool:
    """``node`` will be computed inside a later node's table (its converter must leave it float)."""
    chain = _chain(c, node)
    return chain is not None and _absorbed_by(c, node, chain.source)  # type: ignore[arg-type]


def _continues_an_island(c: Converter, node: Node) -> bool:
    """Some reader of ``node`` may take its result on the integers (a kind with a converter, data movement,
    another element-wise node): a table read by float kinds alone (Softmax) would only add a rounding."""
    return any(u.kind.name in c.integer_kinds or u.kind.name in MOVEMENT
               or (u.kind.is_(Category.ELEMENTWISE) and not u.kind.is_(Category.QUANTIZATION))
               for u, _ in node.outputs[0].users)


def convert_table(c: Converter, node: Node) -> bool:
    """``node``'s chain as ``QLookup(quantize(source), table)`` (module doc); False leaves it float."""
    chain = chain_of(c, node)
    if chain is None or _absorbed_by(c, node, chain.source) or not _continues_an_island(c, node):  # type: ignore
        return False
    src, out = chain.source, node.outputs[0]
    assert src is not None
    tx = c.qtype(src)
    assert tx is not None
    where = f"table of {node.name}"
    real = evaluate_float(tx, chain.nodes, src, out, where)
    if np.isfinite(real).all():  # the result's range: what the table produces (the input's range clipped it)
        c.ranged[c.alias.get(out.name, out.name)] = params_for_range(float(real.min()), float(real.max()), c.cfg)
    ty = c.qtype(out)
    assert ty is not None
    table = evaluate_table(tx, chain.nodes, src, out, ty.with_shape((256,)), where)
    const = c.fn.add_constant(np.ascontiguousarray(table), f"{node.name}.table", type=ty.with_shape((256,)))
    y = c.emit("QLookup", [c.quantize(src, tx), const])
    for n in chain.nodes[:-1]:
        c.tabled[n.name] = n.kind.name
    c.finish(y)
    return True


def convert_movement(c: Converter, node: Node) -> bool:
    """Data movement of several results (Split) or with index operands (Gather) runs on the island's integers."""
    x = node.inputs[0]
    tx = c.qtype(x) if x is not None else None
    if tx is None or not c.in_island(x) or any(o.type.elem != ElemKind.FLOAT32 for o in node.outputs):
        return False
    q = c.quantize(x, tx)  # type: ignore[arg-type]
    with c.fn.inserting_before(node):
        moved = c.fn.create(node.kind.name, [q, *node.inputs[1:]], dict(node.attrs), name=f"{node.name}.q",
                            origin=node.origin)
    c.finish_all(list(moved.outputs))
    return True
