"""``simplify-arith``: remove arithmetic identities; merge chains of constant operations where exact.

Identities (the constant must hold one value in every element, and the kept
operand must already have the result's type, i.e. broadcasting against the
constant changes neither shape nor element kind):

    x * 1, 1 * x, x / 1, x ** 1, x + 0, 0 + x, x - 0      ->  x
    Where(true, a, b) -> a,  Where(false, a, b) -> b      (a constant condition)
    And(x, true), Or(x, false), Xor(x, false)              ->  x

Each is exact on every input, NaN and infinities included, with one care for
floats: ``x + (+0.0)`` turns -0.0 into +0.0, so a float Add is removed only for
the constant -0.0 and a float Sub only for +0.0 (``x - 0.0`` and ``x + -0.0``
keep the sign of every zero); the other zero goes only under ``fast_math``.

Chains of constant operations become one operation (the inner result must be
read by nothing else, and the merged constant may not be larger than the two):

    (x * c1) * c2 -> x * (c1 * c2)          (x + c1) + c2 -> x + (c1 + c2)
    (x - c1) - c2 -> x - (c1 + c2)          (x + c1) - c2 -> x + (c1 - c2), ...
    floats only:  (x * c1) / c2 -> x * (c1 / c2),  (x / c1) / c2 -> x / (c1 * c2), ...

Integers: always; the merged constant is computed with the same wrapping
arithmetic, which is exact (modular arithmetic is associative); integer
division is never merged. Floats: only with the option ``fast_math``
(``ctx.options["fast_math"]``), because each ONNX node's result is rounded to
its element type: ``(x + 1e8) - 1e8`` is 0 for x = 0.3 in float32, and
``(x * 1e20) * 1e-20`` is inf for x = 2e19; reassociated they give x. With the
option, the merged constant is computed in float64 and rounded once; the
rewrite is refused when it is not finite or rounds a non-zero value to 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from glow_core.ir.graph import Function, Node, Value
from glow_core.ir.kinds import KindTable
from glow_core.passes.rewrite import (
    add_constant_like,
    create_before,
    erase_if_dead,
    is_private_to,
    payload,
    producer,
    replace_value,
    splat,
)
from glow_core.passinfra import PassContext, graph_pass


def _is(v: Value | None, value: float | bool) -> bool:
    s = splat(v)
    if s is None:
        return False
    if isinstance(value, bool):
        return bool(s) is value and np.asarray(s).dtype == np.bool_
    with np.errstate(all="ignore"):
        return bool(float(s) == value)


#: kind -> [(operand index of the constant, its identity value, operand index kept)]
IDENTITIES = KindTable("arithmetic identities")
IDENTITIES.add("Mul", [(1, 1, 0), (0, 1, 1)])
IDENTITIES.add("Add", [(1, 0, 0), (0, 0, 1)])
IDENTITIES.add("Sub", [(1, 0, 0)])
IDENTITIES.add("Div", [(1, 1, 0)])
IDENTITIES.add("Pow", [(1, 1, 0)])
IDENTITIES.add("Where", [(0, True, 1), (0, False, 2)])
IDENTITIES.add("And", [(1, True, 0), (0, True, 1)])
IDENTITIES.add("Or", [(1, False, 0), (0, False, 1)])
IDENTITIES.add("Xor", [(1, False, 0), (0, False, 1)])


def fast_math(ctx: PassContext) -> bool:
    """Whether the compile allows reassociating float arithmetic (``options={"fast_math": True}``)."""
    return bool(ctx.options.get("fast_math", False))


def _keeps_signed_zeros(node: Node, const_idx: int, relaxed: bool) -> bool:
    """Whether removing the float Add / Sub of the zero at ``const_idx`` keeps -0.0 (see the module doc)."""
    if relaxed or node.kind.name not in ("Add", "Sub") or not node.result.type.elem.is_float:
        return True
    with np.errstate(all="ignore"):
        negative = bool(np.signbit(float(splat(node.inputs[const_idx]))))
    return negative if node.kind.name == "Add" else not negative


def _identity(fn: Function, node: Node, relaxed: bool = False) -> bool:
    if node.kind.name == "Pow" and node.result.type.elem.is_int and not node.inputs[1].type.elem.is_int:  # type: ignore[union-attr]
        return False  # an integer base to a float power goes through float64 (inexact beyond 2**53)
    for const_idx, value, keep_idx in IDENTITIES.get(node.kind.name, ()):
        keep = node.inputs[keep_idx]
        if keep is None or keep.type != node.result.type or not _is(node.inputs[const_idx], value):
            continue
        if not _keeps_signed_zeros(node, const_idx, relaxed):
            continue
        replace_value(fn, node.result, keep)
        erase_if_dead(fn, node)
        return True
    return False


# -- chains ------------------------------------------------------------------------------------

#: A step ``y = x OP c`` seen as (family, inverse?): family "mul" (Mul, Div) or "add" (Add, Sub);
#: inverse is True for Div / Sub. Only a constant on the right of Div / Sub is a chain step.
_STEPS: dict[str, tuple[str, bool]] = {"Mul": ("mul", False), "Div": ("mul", True),
                                       "Add": ("add", False), "Sub": ("add", True)}
#: family -> (combine two same-direction constants, combine opposite ones: a OP b^-1)
_COMBINE: dict[str, tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any]]] = {
    "mul": (np.multiply, np.divide),
    "add": (np.add, np.subtract),
}
_FORWARD = {"mul": "Mul", "add": "Add"}
_INVERSE = {"mul": "Div", "add": "Sub"}


def _step(node: Node, floats: bool) -> tuple[str, bool, Value, np.ndarray] | None:
    """``node`` as ``x OP c``: (family, inverse, x, c), or None (a float step only when ``floats``)."""
    spec = _STEPS.get(node.kind.name)
    if spec is None:
        return None
    family, inverse = spec
    elem = node.result.type.elem
    if inverse and family == "mul" and not elem.is_float:
        return None  # integer division truncates: never merged
    if not (elem.is_int or (elem.is_float and floats)):
        return None  # float steps round after each node: merged only under fast_math
    a, b = node.inputs
    assert a is not None and b is not None
    cb = payload(b)
    if cb is not None and payload(a) is None:
        return family, inverse, a, cb
    ca = payload(a)
    if ca is not None and not inverse and cb is None:
        return family, inverse, b, ca
    return None


def _combine(family: str, inv_outer: bool, inv_inner: bool, c1: np.ndarray, c2: np.ndarray,
             dtype: np.dtype) -> tuple[bool, np.ndarray] | None:
    """The single step equal to ``(x OP1 c1) OP2 c2``: (inverse?, constant), or None if inexact."""
    same, opposite = _COMBINE[family]
    if inv_inner == inv_outer:
        inverse, calc = inv_inner, (lambda: same(c1, c2))
    elif inv_inner:  # (x / c1) * c2 = x * (c2 / c1)
        inverse, calc = False, (lambda: opposite(c2, c1))
    else:  # (x * c1) / c2 = x * (c1 / c2)
        inverse, calc = False, (lambda: opposite(c1, c2))
    with np.errstate(all="ignore"):
        if dtype.kind in "iu":
            c1, c2 = c1.astype(dtype), c2.astype(dtype)
            return inverse, np.asarray(calc(), dtype=dtype)
        c1, c2 = c1.astype(np.float64), c2.astype(np.float64)
        exact = np.asarray(calc(), dtype=np.float64)
        rounded = exact.astype(dtype)
        back = rounded.astype(np.float64)
    if not np.isfinite(back).all() or ((back == 0) & (exact != 0)).any():
        return None
    return inverse, rounded


def _merge_chain(fn: Function, node: Node, floats: bool = False) -> bool:
    outer = _step(node, floats)
    if outer is None:
        return False
    family, inv_outer, mid, c2 = outer
    inner_node = producer(mid)
    inner = _step(inner_node, floats) if inner_node is not None else None
    if inner_node is None or inner is None or inner[0] != family or not is_private_to(fn, mid, node):
        return False
    _, inv_inner, x, c1 = inner
    if np.broadcast_shapes(c1.shape, c2.shape) != c1.shape and np.broadcast_shapes(c1.shape, c2.shape) != c2.shape:
        return False  # the merged constant would be larger than both
    merged = _combine(family, inv_outer, inv_inner, c1, c2, node.result.type.dtype)
    if merged is None:
        return False
    inverse, arr = merged
    const = add_constant_like(fn, np.ascontiguousarray(arr), node.result, f"{node.name}.merged")
    kind = _INVERSE[family] if inverse else _FORWARD[family]
    new = create_before(fn, node, kind, [x, const])
    if new.result.type != node.result.type:  # pragma: no cover  (broadcast shapes agree by construction)
        erase_if_dead(fn, new)
        return False
    replace_value(fn, node.result, new.result)
    erase_if_dead(fn, node, inner_node)
    return True


@graph_pass("simplify-arith")
def simplify_arith(fn: Function, ctx: PassContext) -> bool:
    """Remove x*1, x+0, x-0, x/1 (and kin) and merge chains of constant Mul/Div or Add/Sub where exact
    (integers; floats only under the option ``fast_math``)."""
    changed = False
    relaxed = fast_math(ctx)
    for node in list(fn.nodes):
        if node.function is not fn:
            continue
        if _identity(fn, node, relaxed) or _merge_chain(fn, node, relaxed):
            changed = True
    if changed:
        fn.erase_unused_constants()
    return changed
