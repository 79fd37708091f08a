"""Generators of reductions, arg-reductions, TopK, scans and the softmax family."""

from __future__ import annotations

from typing import Any

import numpy as np

from glow_conformance.gen import Build, Variant, generator
from glow_conformance.gen.common import FLOATS, NUMERIC, PLAIN, arr, simple, specials
from glow_core.ir.types import ElemKind

E = ElemKind

#: family -> (shape, axes, keepdims)
REDUCE_FAMILIES: dict[str, tuple[tuple[int, ...], tuple[int, ...], bool]] = {
    "scalar": ((), (), True),
    "unit": ((1, 1, 1), (0, 2), True),
    "odd": ((3, 5, 7), (1,), False),
    "all-axes": ((3, 5, 7), (0, 1, 2), False),
    "no-axes": ((3, 5), (), True),
    "empty-axis": ((3, 0, 2), (1,), True),
    "large": ((64, 1031), (1,), True),
}

#: kind -> operand domain (products stay near 1, logs positive)
REDUCE_DOMAINS: dict[str, str] = {
    "ReduceSum": "any", "ReduceMax": "any", "ReduceMin": "any", "ReduceProd": "near1", "ReduceMean": "any",
    "ReduceL1": "any", "ReduceL2": "any", "ReduceLogSum": "positive", "ReduceLogSumExp": "any",
    "ReduceSumSquare": "any",
}
_WITH_SPECIALS = ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd")


def _reduce_variants(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    dom = REDUCE_DOMAINS[kind]
    if kind == "ReduceProd" and not elem.is_float:
        dom = "near1" if elem.itemsize > 1 or elem.value.startswith("int") else "small"
    out: dict[str, Build] = {}
    for fam, (shape, axes, kd) in REDUCE_FAMILIES.items():
        if kind == "ReduceLogSum" and fam in ("empty-axis", "no-axes"):
            continue
        out[fam] = simple(elem, [shape], [dom], {"axes": axes, "keepdims": kd})
    if kind in _WITH_SPECIALS:
        def special(rng: np.random.Generator) -> Variant:
            sp = specials(elem)
            clean = np.where(np.isnan(sp), np.zeros((), sp.dtype), sp) if elem.is_float else sp[::-1]
            return Variant([np.ascontiguousarray(np.stack([sp, clean.astype(sp.dtype)]))],
                           {"axes": (1,), "keepdims": False})

        out["special"] = special
    return out


generator(*REDUCE_DOMAINS, elems=PLAIN)(_reduce_variants)


def _ties(elem: ElemKind, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Values with many ties (few distinct values)."""
    vals = arr(elem, (4,), rng)
    return vals[rng.integers(0, 4, size=shape)]


@generator("ArgMax", "ArgMin", elems=NUMERIC)
def _arg_variants(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(shape: tuple[int, ...], axis: int, kd: bool, last: bool, ties: bool) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            x = _ties(elem, shape, rng) if ties else arr(elem, shape, rng)
            return Variant([x], {"axis": axis, "keepdims": kd, "select_last_index": last})

        return b

    return {"unit": build((1, 1), 1, True, False, False), "odd": build((3, 5, 7), 1, False, False, False),
            "ties-first": build((5, 9), 1, True, False, True), "ties-last": build((5, 9), 0, False, True, True),
            "large": build((64, 1031), 1, True, False, False)}


@generator("TopK", elems=NUMERIC)
def _topk_variants(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(shape: tuple[int, ...], k: int, axis: int, largest: bool, ties: bool) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            x = _ties(elem, shape, rng) if ties else arr(elem, shape, rng)
            return Variant([x], {"k": k, "axis": axis, "largest": largest})

        return b

    return {"unit": build((1, 1), 1, 1, True, False), "odd": build((5, 7), 3, 1, True, False),
            "smallest": build((6, 4, 3), 4, 0, False, False), "ties": build((5, 9), 5, 1, True, True),
            "ties-smallest": build((5, 9), 5, 1, False, True), "k0": build((3, 4), 0, 1, True, False),
            "large": build((64, 1031), 10, 1, True, False)}


@generator("CumSum", "CumProd", elems=NUMERIC)
def _scan_variants(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    dom = "near1" if kind == "CumProd" else "any"
    out: dict[str, Build] = {}
    for exclusive in (False, True):
        for reverse in (False, True):
            name = ("exclusive" if exclusive else "inclusive") + ("-reverse" if reverse else "")
            out[name] = simple(elem, [(3, 6)], [dom], {"axis": 1, "exclusive": exclusive, "reverse": reverse})
    return out


@generator("Softmax", "LogSoftmax", "Hardmax", elems=FLOATS)
def _softmax_variants(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    attrs: dict[str, dict[str, Any]] = {"last-axis": {"axes": (2,)}, "middle-axis": {"axes": (1,)},
                                        "coerced-2d": {"axes": (1, 2)}}
    out = {name: simple(elem, [(2, 5, 7)], ["any"], a) for name, a in attrs.items()}
    if kind == "Hardmax":
        out["ties"] = lambda rng: Variant([_ties(elem, (3, 6), rng)], {"axes": (1,)})
    return out
