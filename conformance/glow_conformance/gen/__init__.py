"""Case generators: one table keyed by node kind, producing valid operands and attributes.

A generator declares the element kinds it can make cases for and, for one
element kind, its *variants*: name -> builder. A builder takes a seeded random
generator and returns a :class:`Variant` (operands, attributes, operand types,
which operands are constants). Builders run lazily, when the case runs, so
collecting thousands of cases stays cheap.

Primitives have the shape families of :data:`FAMILIES` (``scalar`` and
size-1 dims, ``broadcast``, ``odd`` sizes, ``large`` tensors, ``special``
values); high-level kinds name their variants after the attribute
combination they exercise. Register with :func:`generator`; every kind of the
node-kind table must have one (the suite's own tests check it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from glow_core.ir.types import ElemKind, TensorType

#: the shape families of the primitive cases
FAMILIES = ("scalar", "unit", "broadcast", "odd", "large", "special")


@dataclass
class Variant:
    """The operands and attributes of one case.

    ``types`` overrides operand types (quantized kinds); operands listed in
    ``consts`` become constants of the function (the rest are inputs);
    ``tolerance`` names a tolerance class instead of the kind's own.
    """

    operands: list[np.ndarray | None]
    attrs: dict[str, Any] = field(default_factory=dict)
    types: list[TensorType | None] | None = None
    consts: tuple[int, ...] = ()
    tolerance: str | None = None


Build = Callable[[np.random.Generator], Variant]
#: (kind, element kind, the element kinds available for other operands and results) -> variants
VariantsFn = Callable[[str, ElemKind, frozenset[ElemKind]], dict[str, Build]]


@dataclass(frozen=True)
class Generator:
    kind: str
    elems: frozenset[ElemKind]
    variants_fn: VariantsFn

    def variants(self, elem: ElemKind, avail: frozenset[ElemKind] = frozenset(ElemKind)) -> dict[str, Build]:
        """Variant name -> builder for cases of element kind ``elem``; ``avail`` bounds what other operands
        and results may use (the target kinds of Cast)."""
        return self.variants_fn(self.kind, elem, avail)


#: kind name -> generator
GENERATORS: dict[str, Generator] = {}


def generator(*kinds: str, elems: frozenset[ElemKind] | set[ElemKind]) -> Callable[[VariantsFn], VariantsFn]:
    """Register ``fn(kind, elem, avail) -> {variant: builder}`` as the generator of ``kinds``.

    ``elems`` is intersected with each kind's own element kinds.
    """

    def deco(fn: VariantsFn) -> VariantsFn:
        from glow_core.ir.kinds import get_kind

        for k in kinds:
            if k in GENERATORS:
                raise ValueError(f"generator of {k} registered twice")
            GENERATORS[k] = Generator(k, frozenset(elems) & get_kind(k).elems, fn)
        return fn

    return deco


def generators() -> dict[str, Generator]:
    """The table, with every family module loaded."""
    from glow_conformance.gen import elementwise, movement, nn, qprim, quant, reduce, seq, typed_quant  # noqa: F401
    from glow_conformance.gen import signal  # noqa: F401  (DFT, STFT)

    return GENERATORS


__all__ = ["FAMILIES", "GENERATORS", "Build", "Generator", "Variant", "generator", "generators"]
