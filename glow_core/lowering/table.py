"""The lowering table and the ``lower`` pass.

A lowering rewrites one node of a high-level kind into nodes of simpler kinds,
with exactly the same results (up to floating-point summation order). Rules
are registered per kind with :func:`lowering`; a kind with the PRIMITIVE
category never needs one.

Which nodes are lowered is the backend's decision (``Backend.should_lower``:
by default every node it does not support natively). Lowering repeats until
nothing changes, since a rule may emit other high-level kinds.
"""

from __future__ import annotations

from typing import Callable

from glow_core.errors import GlowError, GlowTypeError
from glow_core.ir.graph import Function, Node, Value
from glow_core.ir.kinds import Category, KindTable, all_kinds
from glow_core.lowering.builder import Builder
from glow_core.passinfra import PassContext, graph_pass

LoweringFn = Callable[[Builder, Node], "list[Value] | None"]

#: kind name -> lowering rule
LOWERINGS = KindTable("lowerings")


def lowering(*kinds: str) -> Callable[[LoweringFn], LoweringFn]:
    """Register the lowering rule of one or more kinds (each kind at most once)."""

    def deco(fn: LoweringFn) -> LoweringFn:
        for k in kinds:
            if Category.PRIMITIVE in all_kinds()[k].categories:
                raise GlowError(f"kind {k} is a primitive: it has no lowering")
            LOWERINGS.add(k, fn)
        return fn

    return deco


def lowerings() -> KindTable:
    import glow_core.lowering.rules  # noqa: F401  (registers every rule)

    return LOWERINGS


def primitive_kinds() -> frozenset[str]:
    return frozenset(k for k, spec in all_kinds().items() if Category.PRIMITIVE in spec.categories)


def lower_node(fn: Function, node: Node) -> bool:
    """Lower one node if it has a rule that accepts it; returns whether it did."""
    rule = lowerings().get(node.kind.name)
    if rule is None:
        return False
    b = Builder(fn, node)
    before = set(map(id, fn.nodes))
    results = rule(b, node)
    if results is None:  # the rule declined (e.g. an attribute combination it cannot express)
        for n in reversed([n for n in fn.nodes if id(n) not in before]):
            if not n.has_users():
                fn.erase_node(n)
        return False
    if len(results) != len(node.outputs):
        raise GlowError(f"lowering of {node.where()} gave {len(results)} results for {len(node.outputs)} outputs")
    for old, new in zip(node.outputs, results):
        if old.type != new.type:
            raise GlowTypeError(f"lowering of {node.where()} changed result %{old.name} from {old.type} to {new.type}")
        fn.replace_all_uses_with(old, new)
    fn.erase_node(node)
    return True


def should_lower(node: Node, ctx: PassContext) -> bool:
    if Category.PRIMITIVE in node.kind.categories:
        return False
    if ctx.options.get("lower_all"):
        return True
    if ctx.backend is None:
        return False
    return bool(ctx.backend.should_lower(node))


@graph_pass("lower")
def lower_pass(fn: Function, ctx: PassContext) -> bool:
    """Lower every node the backend does not run natively into simpler kinds (repeats to a fixed point)."""
    changed = False
    for _ in range(16):
        round_changed = False
        for node in list(fn.nodes):
            if node.function is fn and should_lower(node, ctx) and lower_node(fn, node):
                round_changed = True
        if not round_changed:
            break
        changed = True
    return changed
