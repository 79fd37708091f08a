"""``eliminate-noops``: remove nodes that return (one of) their operands unchanged.

A table keyed by kind says, for a node of that kind, which operand it returns
unchanged (or None when this node does compute something). The pass rewires
every reader of the node (and any function output) to that operand, so an
output keeps its value; the operand's type must equal the result's.
"""

from __future__ import annotations

from collections.abc import Callable

from glow_core.ir.graph import Function, Node, Value
from glow_core.ir.kinds import Category, KindTable
from glow_core.passes.rewrite import erase_if_dead, is_identity_perm, replace_value
from glow_core.passinfra import PassContext, graph_pass

#: kind -> rule(node) giving the operand the node returns unchanged, or None
NoopRule = Callable[[Node], "Value | None"]
NOOP_RULES = KindTable("no-op rules")


def _first(node: Node) -> Value | None:
    return node.inputs[0]


def _when(pred: Callable[[Node], bool]) -> NoopRule:
    def rule(node: Node) -> Value | None:
        return node.inputs[0] if pred(node) else None

    return rule


def _in_shape(node: Node) -> tuple[int, ...]:
    x = node.inputs[0]
    assert x is not None
    return x.type.shape


def _full_slice(node: Node) -> bool:
    a = node.attrs
    for dim, start, size, step in zip(_in_shape(node), a["starts"], a["sizes"], a["steps"]):
        if size != dim:
            return False
        # a whole axis read forwards; an axis of length <= 1 is whole whatever the step
        if dim > 1 and (start != 0 or step != 1):
            return False
        if dim == 1 and start != 0:
            return False
    return True


def _single_split(node: Node) -> Value | None:
    return node.inputs[0] if len(node.attrs["splits"]) == 1 else None


NOOP_RULES.register("Identity", "Dropout")(_first)
NOOP_RULES.register("Cast")(_when(lambda n: _first(n).type.elem == n.attrs["to"]))  # type: ignore[union-attr]
NOOP_RULES.register("BitCast")(_when(lambda n: _first(n).type.elem == n.attrs["to"]))  # type: ignore[union-attr]
NOOP_RULES.register("Reshape")(_when(lambda n: tuple(n.attrs["shape"]) == _in_shape(n)))
NOOP_RULES.register("Broadcast")(_when(lambda n: tuple(n.attrs["shape"]) == _in_shape(n)))
NOOP_RULES.register("Transpose")(_when(lambda n: is_identity_perm(n.attrs["perm"])))
NOOP_RULES.register("Pad")(_when(lambda n: not any(n.attrs["pads"])))
NOOP_RULES.register("Slice")(_when(_full_slice))
NOOP_RULES.register("Tile")(_when(lambda n: all(r == 1 for r in n.attrs["repeats"])))
NOOP_RULES.register("Concat")(_when(lambda n: len(n.inputs) == 1))
NOOP_RULES.register("Split")(_single_split)


def noop_operand(node: Node) -> Value | None:
    """The operand ``node`` returns unchanged, if it is a no-op (None otherwise)."""
    rule = NOOP_RULES.get(node.kind.name)
    if rule is None and Category.NO_OP in node.kind.categories and len(node.inputs) >= 1:
        rule = _first  # any kind declared NO_OP (inference identity) returns its first operand
    if rule is None or len(node.outputs) != 1:
        return None
    v = rule(node)
    if v is None or v.type != node.outputs[0].type:
        return None
    return v


@graph_pass("eliminate-noops")
def eliminate_noops(fn: Function, ctx: PassContext) -> bool:
    """Remove Identity/Dropout, same-type Cast, same-shape Reshape/Broadcast, identity Transpose,
    zero Pad, whole Slice, Tile by ones, single-operand Concat and single-piece Split."""
    changed = False
    for node in list(fn.nodes):
        if node.function is not fn:
            continue
        v = noop_operand(node)
        if v is None:
            continue
        replace_value(fn, node.outputs[0], v)
        erase_if_dead(fn, node)
        changed = True
    return changed
