"""Reusable type rules for kind declarations."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from glow_core.errors import GlowTypeError
from glow_core.ir.types import ElemKind, TensorType, broadcast_shapes

Types = Sequence[TensorType | None]
Attrs = Mapping[str, Any]


def req(types: Types, i: int) -> TensorType:
    t = types[i]
    if t is None:
        raise GlowTypeError(f"operand {i} is required")
    return t


def same_elem(types: Types, *idx: int) -> ElemKind:
    """All the given operands have one element kind; return it."""
    present = [types[i] for i in idx if i < len(types) and types[i] is not None]
    elems = {t.elem for t in present if t is not None}
    if len(elems) > 1:
        raise GlowTypeError("operands must have the same element kind, got " + ", ".join(sorted(e.value for e in elems)))
    return present[0].elem if present and present[0] is not None else ElemKind.FLOAT32


def like_input(index: int = 0):  # type: ignore[no-untyped-def]
    """The result has the type of operand ``index``."""

    def rule(types: Types, attrs: Attrs) -> list[TensorType]:
        return [req(types, index)]

    return rule


def broadcast_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    """Element-wise over broadcast operands of one element kind."""
    present = [t for t in types if t is not None]
    elem = same_elem(types, *range(len(types)))
    return [TensorType(elem, broadcast_shapes(*(t.shape for t in present)))]


def broadcast_bool_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    """Comparison: broadcast operands of one element kind, boolean result."""
    t = broadcast_rule(types, attrs)[0]
    return [TensorType(ElemKind.BOOL, t.shape)]


def check_elems(t: TensorType, allowed: frozenset[ElemKind], what: str) -> None:
    if t.elem not in allowed:
        raise GlowTypeError(
            f"{what} has element kind {t.elem.value}; allowed: " + ", ".join(sorted(e.value for e in allowed))
        )
