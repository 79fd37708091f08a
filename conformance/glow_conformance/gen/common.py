"""Shorthands for writing generators: element-kind sets, random operands, shape families."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from glow_conformance.gen import Build, Variant
from glow_conformance.values import random_array, special_values, type_of
from glow_core.ir.types import ElemKind, TensorType

E = ElemKind
F32, F16, BF16, F64 = E.FLOAT32, E.FLOAT16, E.BFLOAT16, E.FLOAT64
FLOATS = frozenset({F32, F16, BF16, F64})
SIGNED = frozenset({E.INT8, E.INT16, E.INT32, E.INT64})
UNSIGNED = frozenset({E.UINT8, E.UINT16, E.UINT32, E.UINT64})
INTS = SIGNED | UNSIGNED
NUMERIC = FLOATS | INTS
PLAIN = NUMERIC | {E.BOOL}
QUANT = frozenset({E.INT8Q, E.UINT8Q})
ALL = PLAIN | QUANT

#: shapes of the unary shape families
UNARY_SHAPES: dict[str, tuple[int, ...]] = {"scalar": (), "unit": (1, 1, 1), "odd": (3, 5, 7), "large": (64, 1031)}
#: operand shapes of the binary shape families
BINARY_SHAPES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "scalar": ((), ()),
    "unit": ((1, 1), (1,)),
    "broadcast": ((3, 1, 5), (4, 1)),
    "odd": ((5, 7), (5, 7)),
    "large": ((64, 1031), (64, 1031)),
}


def arr(elem: ElemKind, shape: tuple[int, ...], rng: np.random.Generator, domain: str = "any") -> np.ndarray:
    """Random values; quantized kinds take their storage integers over the full range."""
    if elem.is_quantized:
        return random_array(E.INT8 if elem == E.INT8Q else E.UINT8, shape, rng, "full")
    return random_array(elem, shape, rng, domain)


def types_for(operands: Sequence[np.ndarray | None], elem: ElemKind, which: Sequence[int] = (0,)) -> \
        list[TensorType | None] | None:
    """Operand types when ``elem`` is quantized (operands ``which`` get it); None otherwise."""
    if not elem.is_quantized:
        return None
    return [None if a is None else (type_of(elem, a.shape) if i in which else TensorType.of(a))
            for i, a in enumerate(operands)]


def simple(elem: ElemKind, shapes: Sequence[tuple[int, ...]], domains: Sequence[str] = ("any",),
           attrs: dict[str, Any] | None = None, *, tolerance: str | None = None) -> Build:
    """A builder of random operands of ``elem`` with ``shapes`` (``domains`` cycle over them)."""

    def build(rng: np.random.Generator) -> Variant:
        ops: list[np.ndarray | None] = [arr(elem, s, rng, domains[i % len(domains)]) for i, s in enumerate(shapes)]
        return Variant(ops, dict(attrs or {}), types_for(ops, elem, range(len(ops))), tolerance=tolerance)

    return build


def fixed(operands: Sequence[np.ndarray | None], attrs: dict[str, Any] | None = None, **kw: Any) -> Build:
    """A builder returning fixed operands."""
    return lambda rng: Variant(list(operands), dict(attrs or {}), **kw)


def specials(elem: ElemKind, domain: str = "any") -> np.ndarray:
    return special_values(elem, domain)


def const_of(value: Any, elem: ElemKind) -> np.ndarray:
    return np.asarray(value).astype(elem.dtype)


__all__ = ["ALL", "BF16", "BINARY_SHAPES", "F16", "F32", "F64", "FLOATS", "INTS", "NUMERIC", "PLAIN", "QUANT",
           "SIGNED", "UNARY_SHAPES", "UNSIGNED", "arr", "const_of", "fixed", "simple", "specials", "types_for"]
