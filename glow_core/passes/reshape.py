"""``merge-reshapes``: one Reshape where there were several, none on constants.

- ``Reshape[s2](Reshape[s1](x))``  ->  ``Reshape[s2](x)`` (or ``x`` itself when ``s2`` is its shape):
  a reshape only reinterprets the row-major order, so the middle shape never matters.
  The inner Reshape stays if something else reads it.
- ``Reshape[s](Constant)``         ->  a constant of shape ``s`` (a view of the same bytes).

A Reshape whose result is a function output is rewritten like any other: the
output then reads the merged value, which is equal element for element.
"""

from __future__ import annotations

from collections.abc import Callable

from glow_core.ir.graph import Constant, Function, Node
from glow_core.ir.kinds import KindTable
from glow_core.passes.rewrite import add_constant_like, create_before, erase_if_dead, producer, replace_value
from glow_core.passinfra import PassContext, graph_pass


def _fold_constant(fn: Function, node: Node) -> bool:
    c = node.inputs[0]
    if not isinstance(c, Constant):
        return False
    arr = c.payload.reshape(tuple(node.attrs["shape"]))
    replace_value(fn, node.result, add_constant_like(fn, arr, c, f"{node.name}.folded"))
    erase_if_dead(fn, node)
    return True


def _merge(fn: Function, node: Node) -> bool:
    inner = producer(node.inputs[0], "Reshape")
    if inner is None:
        return False
    x = inner.inputs[0]
    assert x is not None
    shape = tuple(node.attrs["shape"])
    new = x if x.type.shape == shape else create_before(fn, node, "Reshape", [x], {"shape": shape}).result
    replace_value(fn, node.result, new)
    erase_if_dead(fn, node, inner)
    return True


RESHAPE_RULES = KindTable("reshape rules")
RESHAPE_RULES.add("Reshape", (_fold_constant, _merge))

RewriteRule = Callable[[Function, Node], bool]


@graph_pass("merge-reshapes")
def merge_reshapes(fn: Function, ctx: PassContext) -> bool:
    """Merge chains of Reshapes into one and fold Reshapes of constants."""
    changed = False
    for node in list(fn.nodes):
        if node.function is not fn:
            continue
        for rule in RESHAPE_RULES.get(node.kind.name, ()):
            if rule(fn, node):
                changed = True
                break
    if changed:
        fn.erase_unused_constants()
    return changed
