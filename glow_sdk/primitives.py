"""The mandatory primitive set: what every backend must run.

The *kinds* are the ones with the ``PRIMITIVE`` category in the node-kind table
(its single definition); every other kind has a lowering onto them. The
*element kinds* a backend must accept for each primitive are those of
:data:`MANDATORY_ELEMS` the kind is defined for, narrowed for the compute-heavy
categories (:data:`CATEGORY_MANDATORY_ELEMS`): float32 arithmetic, the int32 /
int64 index and shape arithmetic lowering emits, and bool masks.

A backend may declare more (other element kinds, high-level kinds it runs
natively); the conformance suite then tests those too, as non-mandatory cases.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from glow_core.ir.kinds import Category, all_kinds, get_kind, kinds_in
from glow_core.ir.types import ElemKind

E = ElemKind

#: element kinds every primitive must accept, where the kind is defined for them
MANDATORY_ELEMS: frozenset[ElemKind] = frozenset({E.FLOAT32, E.INT32, E.INT64, E.BOOL})

#: categories whose primitives are mandatory for fewer element kinds (first match wins); the quantized
#: primitives (IntConv, IntMatMul, Requantize) are optional: a backend declares them to run int8 models natively
CATEGORY_MANDATORY_ELEMS: Mapping[Category, frozenset[ElemKind]] = MappingProxyType({
    Category.QUANTIZATION: frozenset(),
    Category.LINEAR_ALGEBRA: frozenset({E.FLOAT32}),
    Category.CONVOLUTION: frozenset({E.FLOAT32}),
    Category.POOLING: frozenset({E.FLOAT32}),
})


def primitive_kinds() -> frozenset[str]:
    """Names of the primitive kinds (the ``PRIMITIVE`` category of the kind table)."""
    return kinds_in(Category.PRIMITIVE)


def mandatory_elems(kind: str) -> frozenset[ElemKind]:
    """The element kinds a backend must accept for primitive ``kind`` (empty for non-primitives)."""
    spec = get_kind(kind)
    if not spec.is_(Category.PRIMITIVE):
        return frozenset()
    want = MANDATORY_ELEMS
    for cat, elems in CATEGORY_MANDATORY_ELEMS.items():
        if spec.is_(cat):
            want = elems
            break
    return frozenset(want & spec.elems)


def mandatory_primitives() -> dict[str, frozenset[ElemKind]]:
    """Primitive kind -> the element kinds a backend must accept for it, sorted by kind (optional ones left out)."""
    return {k: e for k in sorted(primitive_kinds()) if (e := mandatory_elems(k))}


def optional_primitives() -> frozenset[str]:
    """The primitives no backend must accept (the quantized ones): without them, models using them fail to
    compile on that backend, with the unsupported nodes named."""
    return frozenset(k for k in primitive_kinds() if not mandatory_elems(k))


def high_level_kinds() -> list[str]:
    """Every kind that is not a primitive (each has a lowering onto the primitives), sorted."""
    prims = primitive_kinds()
    return sorted(k for k in all_kinds() if k not in prims)


__all__ = [
    "CATEGORY_MANDATORY_ELEMS", "MANDATORY_ELEMS", "high_level_kinds", "mandatory_elems", "mandatory_primitives",
    "optional_primitives", "primitive_kinds",
]
