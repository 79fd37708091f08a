"""Small helpers the rewriting passes share: matching constants and users, building replacements.

Every rewrite in the graph optimizer follows one discipline:

- build the replacement nodes *before* the node being replaced (so the
  topological order holds: their operands are all defined earlier),
- keep the replaced node's ONNX origin on every node it becomes,
- rewire with ``Function.replace_all_uses_with`` (which also moves function
  outputs, so a value that was an output stays one and keeps its value),
- erase what became dead right away when it is cheap to know (``dce`` does the
  rest).

A value is *private* to a node when that node is its only reader and it is not
a function output: only then may a pass fold it into the node (otherwise the
other reader, or the caller, would lose it or see it computed twice).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from glow_core.ir.graph import Constant, Function, Node, NodeOutput, Value


def payload(v: Value | None) -> np.ndarray | None:
    """The payload of a constant operand, or None."""
    return v.payload if isinstance(v, Constant) else None


#: elements :func:`splat` compares before it reads a whole constant
_SPLAT_PROBE = 256


def splat(v: Value | None) -> Any | None:
    """The single value every element of a constant holds (numpy scalar), or None."""
    p = payload(v)
    if p is None or p.size == 0:
        return None
    first = p.reshape(-1)[0]
    if p.size == 1:
        return first
    flat = p.reshape(-1)
    if p.dtype.kind == "f" or p.dtype.kind == "V":  # (bfloat16 is 'V')
        # bitwise equality: -0.0 and 0.0 differ, NaNs never compare equal
        flat = flat.view(np.dtype(f"u{p.dtype.itemsize}"))
    # the first elements decide most constants (a weight): the rest is read only when they agree
    for part in (flat[:_SPLAT_PROBE], flat):
        if not bool((part == flat[0]).all()):
            return None
    return first


def producer(v: Value | None, kind: str | None = None) -> Node | None:
    """The node that computes ``v`` (of ``kind`` when given), or None for leaves."""
    if not isinstance(v, NodeOutput):
        return None
    if kind is not None and v.node.kind.name != kind:
        return None
    return v.node


def is_private_to(fn: Function, v: Value, node: Node) -> bool:
    """``node`` is the only reader of ``v`` and ``v`` is not a function output."""
    return all(u is node for u, _ in v.users) and bool(v.users) and not fn.is_output(v)


def create_before(fn: Function, anchor: Node, kind: str, inputs: Sequence[Value | None],
                  attrs: Mapping[str, Any] | None = None, *, origin_of: Node | None = None) -> Node:
    """Create a node right before ``anchor``, keeping the ONNX origin of ``origin_of`` (default ``anchor``)."""
    src = origin_of or anchor
    with fn.inserting_before(anchor):
        return fn.create(kind, list(inputs), dict(attrs or {}), name=f"{src.name}.{kind.lower()}",
                         origin=src.origin or src.name)


def add_constant_like(fn: Function, array: np.ndarray, like: Value, name: str) -> Constant:
    """A new constant holding ``array`` with ``like``'s element type (scale and offset kept)."""
    arr = np.asarray(array, dtype=like.type.dtype, order="C")
    return fn.add_constant(arr, name, like.type.with_shape(arr.shape))


def replace_value(fn: Function, old: Value, new: Value) -> None:
    """Every reader of ``old`` (function outputs included) reads ``new``; the types must be equal."""
    fn.replace_all_uses_with(old, new)


def erase_if_dead(fn: Function, *nodes: Node | None) -> None:
    """Erase each node (in order) whose results nobody reads any more."""
    for n in nodes:
        if n is not None and n.function is fn and not n.has_users() and not any(fn.is_output(o) for o in n.outputs):
            fn.erase_node(n)


def inverse_perm(perm: Sequence[int]) -> tuple[int, ...]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def is_identity_perm(perm: Sequence[int]) -> bool:
    return tuple(perm) == tuple(range(len(perm)))


def padded_shape(shape: Sequence[int], rank: int) -> tuple[int, ...]:
    """``shape`` with leading 1s up to ``rank`` (numpy broadcasting alignment)."""
    return (1,) * (rank - len(shape)) + tuple(shape)


@dataclass(frozen=True)
class Fusion:
    """What a fusion rule found: the fused kind, its operands, the nodes it replaces."""

    kind: str
    inputs: tuple[Value | None, ...]
    attrs: Mapping[str, Any]
    nodes: tuple[Node, ...]  # producer first, the node whose result the fused node replaces last
