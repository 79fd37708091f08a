"""Generators of the element-wise kinds: arithmetic, comparison, logic, bitwise, math functions,
Where, Cast, BitCast, and the high-level activations."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from glow_conformance.gen import Build, Variant, generator
from glow_conformance.gen.common import (
    ALL,
    BINARY_SHAPES,
    FLOATS,
    INTS,
    NUMERIC,
    PLAIN,
    SIGNED,
    UNARY_SHAPES,
    arr,
    simple,
    specials,
)
from glow_conformance.values import random_array, with_specials
from glow_core.ir.types import FLOAT8_KINDS, LOW_PRECISION_KINDS, SMALL_FLOAT_KINDS, SMALL_INT_KINDS, ElemKind

E = ElemKind

# -- unary primitives ------------------------------------------------------------------------

#: kind -> domain of its operand (floats; integers use "any" unless listed in INT_UNARY_DOMAINS)
UNARY_DOMAINS: dict[str, str] = {
    "Abs": "any", "Neg": "any", "Sign": "any", "Floor": "halves", "Ceil": "halves", "Round": "halves",
    "Exp": "exp", "Log": "positive", "Sqrt": "nonneg", "Erf": "small", "Tanh": "any", "Sigmoid": "exp",
    "Sin": "exp", "Cos": "exp", "Tan": "tan", "Asin": "unit", "Acos": "unit", "Atan": "any", "Sinh": "small",
    "Cosh": "small", "Asinh": "any", "Acosh": "ge1", "Atanh": "unit", "IsNaN": "any", "IsInf": "any",
    "Not": "any", "BitwiseNot": "full",
}


def _unary_variants(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    dom = UNARY_DOMAINS[kind]
    out: dict[str, Build] = {fam: simple(elem, [shape], [dom]) for fam, shape in UNARY_SHAPES.items()}
    out["special"] = lambda rng: Variant([specials(elem)])
    if kind in ("IsNaN", "IsInf"):  # random values with edge cases sprinkled in
        out["odd"] = lambda rng: Variant([with_specials(arr(elem, (3, 5, 7), rng), elem, rng)])
    if kind == "IsInf":
        for attrs in ({"detect_positive": False}, {"detect_negative": False}):
            name = "special-" + ("negative" if "detect_positive" in attrs else "positive") + "-only"
            out[name] = _fixed_build([specials(elem)], attrs)
    return out


#: operand element kinds where the kind's own set also holds its result kinds
_UNARY_OPERANDS = {"IsNaN": FLOATS, "IsInf": FLOATS}
for _kind in UNARY_DOMAINS:
    generator(_kind, elems=_UNARY_OPERANDS.get(_kind, PLAIN))(_unary_variants)


# -- binary primitives -----------------------------------------------------------------------

#: kind -> (domain of LHS, domain of RHS)
BINARY_DOMAINS: dict[str, tuple[str, str]] = {
    "Add": ("any", "any"), "Sub": ("any", "any"), "Mul": ("any", "any"), "Div": ("any", "nonzero"),
    "Max": ("any", "any"), "Min": ("any", "any"), "Mod": ("any", "nonzero"), "Pow": ("positive", "small"),
    "And": ("any", "any"), "Or": ("any", "any"), "Xor": ("any", "any"),
    "BitwiseAnd": ("full", "full"), "BitwiseOr": ("full", "full"), "BitwiseXor": ("full", "full"),
    "Equal": ("any", "any"), "Less": ("any", "any"), "LessOrEqual": ("any", "any"),
}
_COMPARISONS = ("Equal", "Less", "LessOrEqual")


def _pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of values: ``a`` down, ``b`` across (broadcast)."""
    return np.ascontiguousarray(a[:, None]), np.ascontiguousarray(b[None, :])


def _binary_build(kind: str, elem: ElemKind, shapes: tuple[tuple[int, ...], tuple[int, ...]],
                  attrs: dict[str, Any]) -> Build:
    da, db = BINARY_DOMAINS[kind]
    if kind == "Pow" and not elem.is_float:
        da = "near1" if elem in SIGNED else "small"

    def build(rng: np.random.Generator) -> Variant:
        a = arr(elem, shapes[0], rng, da)
        b = arr(elem, shapes[1], rng, db)
        if kind in _COMPARISONS and a.shape == b.shape and a.size:  # make some elements equal
            same = rng.random(a.shape) < 0.3
            b = np.where(same, a, b).astype(a.dtype)
        return Variant([a, b], dict(attrs))

    return build


def _binary_special(kind: str, elem: ElemKind, attrs: dict[str, Any]) -> Build:
    db = BINARY_DOMAINS[kind][1]

    def build(rng: np.random.Generator) -> Variant:
        a = specials(elem)
        b = specials(elem, "nonzero" if db == "nonzero" and not elem.is_float else "any")  # IEEE: x / 0 is defined
        if kind == "Pow" and not elem.is_float:
            b = np.array([0, 1, 2, 3], dtype=elem.dtype)
        x, y = _pairs(a, b)
        return Variant([x, y], dict(attrs))

    return build


def _binary_variants(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    attr_sets: list[tuple[str, dict[str, Any]]] = [("", {})]
    if kind == "Mod":
        attr_sets = [("", {"fmod": False}), ("-fmod", {"fmod": True})]
    out: dict[str, Build] = {}
    for suffix, attrs in attr_sets:
        for fam, shapes in BINARY_SHAPES.items():
            out[fam + suffix] = _binary_build(kind, elem, shapes, attrs)
        out["special" + suffix] = _binary_special(kind, elem, attrs)
    return out


_BINARY_OPERANDS = {"Less": NUMERIC, "LessOrEqual": NUMERIC}
for _kind in BINARY_DOMAINS:
    generator(_kind, elems=_BINARY_OPERANDS.get(_kind, PLAIN))(_binary_variants)


def _bits(elem: ElemKind) -> int:
    return elem.itemsize * 8


@generator("BitShift", elems=INTS)
def _bitshift_variants(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(direction: str, shapes: tuple[tuple[int, ...], tuple[int, ...]], special: bool) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            if special:
                x = specials(elem)
                amounts = np.array([0, 1, _bits(elem) - 1, _bits(elem), _bits(elem) + 5], dtype=elem.dtype)
                xa, ya = _pairs(x, amounts)
                return Variant([xa, ya], {"direction": direction})
            x = random_array(elem, shapes[0], rng, "full")
            amounts = rng.integers(0, _bits(elem), size=shapes[1]).astype(elem.dtype)
            return Variant([x, amounts], {"direction": direction})

        return b

    out: dict[str, Build] = {}
    for direction in ("LEFT", "RIGHT"):
        d = direction.lower()
        for fam, shapes in BINARY_SHAPES.items():
            out[f"{fam}-{d}"] = build(direction, shapes, False)
        out[f"special-{d}"] = build(direction, ((), ()), True)
    return out


@generator("Where", elems=PLAIN)
def _where_variants(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    shapes = {"scalar": ((), (), ()), "unit": ((1, 1), (1,), (1, 1)), "broadcast": ((4, 1), (3, 1, 5), (5,)),
              "odd": ((5, 7), (5, 7), (5, 7)), "large": ((64, 1031), (64, 1031), (64, 1031))}

    def build(sh: tuple[tuple[int, ...], ...]) -> Build:
        return lambda rng: Variant([random_array(E.BOOL, sh[0], rng), arr(elem, sh[1], rng), arr(elem, sh[2], rng)])

    out = {fam: build(sh) for fam, sh in shapes.items()}

    def special(rng: np.random.Generator) -> Variant:
        s = specials(elem)
        cond = np.arange(s.size) % 2 == 0
        return Variant([cond, s, s[::-1].copy()])

    out["special"] = special
    return out


# -- Cast / BitCast --------------------------------------------------------------------------

def _cast_source(src: ElemKind, dst: ElemKind, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Values of ``src`` whose cast to ``dst`` is defined (no NaN, infinity or out-of-range float -> int)."""
    if src.is_float and dst in INTS:
        info = np.iinfo(dst.dtype)
        lo, hi = max(float(info.min), -1000.0), min(float(info.max), 1000.0)
        return rng.uniform(lo, hi, shape).astype(src.dtype)
    if src in INTS:
        return random_array(src, shape, rng, "full")
    return arr(src, shape, rng, "any")


def _cast_special(src: ElemKind, dst: ElemKind) -> np.ndarray | None:
    if src.is_float and dst in INTS:
        vals = [0.0, -0.0, 0.5, -0.5, 0.999, 1.0, 2.5, 100.75] + ([-0.999, -1.0, -2.5, -100.75] if dst in SIGNED
                                                                    else [])
        return np.array(vals).astype(src.dtype)
    return specials(src)


def _cast_build(src: ElemKind, dst: ElemKind, shape: tuple[int, ...]) -> Build:
    return lambda rng: Variant([_cast_source(src, dst, shape, rng)], {"to": dst})


def _fixed_build(operands: list[np.ndarray | None], attrs: dict[str, Any]) -> Build:
    return lambda rng: Variant(list(operands), dict(attrs))


def _all_codes(elem: ElemKind) -> np.ndarray:
    """Every value of a float8 / float4 / int4 / int2 kind (one per code)."""
    n = {E.FLOAT4E2M1: 16, E.INT4: 16, E.UINT4: 16, E.INT2: 4, E.UINT2: 4}.get(elem, 256)
    codes = np.arange(n, dtype=np.uint8)
    if elem in SMALL_INT_KINDS:
        return codes.astype(np.int8).astype(elem.dtype) if elem in (E.UINT4, E.UINT2) else \
            np.where(codes >= n // 2, codes.astype(np.int16) - n, codes).astype(np.int8).astype(elem.dtype)
    return codes.view(elem.dtype)


def _low_precision_variants(elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    """Casts from every code of a low-precision kind; casts of floats (random, beyond the range, specials)
    and integers to the low-precision kinds, both ``saturate`` modes for float8."""
    out: dict[str, Build] = {}
    if elem in LOW_PRECISION_KINDS:
        for dst in sorted(avail & (FLOATS | {E.INT8, E.INT32, E.BOOL}), key=lambda e: e.value):
            out[f"to-{dst.value}-codes"] = _fixed_build([_all_codes(elem)], {"to": dst})
        return out
    for dst in sorted(avail & LOW_PRECISION_KINDS, key=lambda e: e.value):
        if elem in FLOATS and dst is E.FLOAT8E8M0:
            for mode in ("up", "down", "nearest"):
                out[f"to-{dst.value}-{mode}-odd"] = (
                    lambda rng, m=mode: Variant([(rng.standard_normal((3, 5, 7)) * 10.0 ** rng.integers(
                        -6, 6, (3, 5, 7))).astype(elem.dtype)], {"to": E.FLOAT8E8M0, "round_mode": m}))
                out[f"to-{dst.value}-{mode}-special"] = _fixed_build([specials(elem)],
                                                                     {"to": dst, "round_mode": mode})
        elif elem in FLOATS:
            big = 2.0 * float(ml_dtypes.finfo(dst.dtype).max) if dst in SMALL_FLOAT_KINDS else 20.0
            for sat in ((0, 1) if dst in FLOAT8_KINDS else (1,)):
                out[f"to-{dst.value}-sat{sat}-odd"] = (
                    lambda rng, d=dst, b=big, s=sat: Variant(
                        [rng.uniform(-b, b, (3, 5, 7)).astype(elem.dtype)], {"to": d, "saturate": s}))
                out[f"to-{dst.value}-sat{sat}-special"] = _fixed_build([specials(elem)], {"to": dst, "saturate": sat})
        elif elem in INTS | {E.BOOL}:
            out[f"to-{dst.value}-odd"] = lambda rng, d=dst: Variant([arr(elem, (3, 5, 7), rng, "any")], {"to": d})
    return out


@generator("Cast", elems=PLAIN | LOW_PRECISION_KINDS)
def _cast_variants(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    out: dict[str, Build] = _low_precision_variants(elem, avail)
    if elem in LOW_PRECISION_KINDS:
        return out
    for dst in sorted(avail & PLAIN, key=lambda e: e.value):
        to = f"to-{dst.value}"
        for fam, shape in (("scalar", ()), ("odd", (3, 5, 7)), ("large", (64, 1031))):
            out[f"{to}-{fam}"] = _cast_build(elem, dst, shape)
        sp = _cast_special(elem, dst)
        if sp is not None:
            out[f"{to}-special"] = _fixed_build([sp], {"to": dst})
    return out


@generator("BitCast", elems=NUMERIC)
def _bitcast_variants(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    out: dict[str, Build] = {}
    for dst in sorted(avail & NUMERIC, key=lambda e: e.value):
        if dst.itemsize != elem.itemsize:
            continue
        to = f"to-{dst.value}"
        for fam, shape in (("scalar", ()), ("odd", (3, 5, 7)), ("large", (64, 1031))):
            dom = "any" if elem.is_float else "full"
            out[f"{to}-{fam}"] = simple(elem, [shape], [dom], {"to": dst})
        if elem.is_float and not dst.is_float:  # the bits of every special value, NaN included
            out[f"{to}-special"] = _fixed_build([specials(elem)], {"to": dst})
    return out


# -- high-level element-wise kinds ---------------------------------------------------------------

#: kind -> (domain, variants of non-default attributes)
ACTIVATIONS: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "Relu": ("any", []),
    "LeakyRelu": ("any", [{"alpha": 0.3}]),
    "Elu": ("any", [{"alpha": 0.5}]),
    "Celu": ("any", [{"alpha": 2.0}]),
    "Selu": ("any", [{"alpha": 1.5, "gamma": 2.0}]),
    "HardSigmoid": ("any", [{"alpha": 0.3, "beta": 0.4}]),
    "HardSwish": ("any", []),
    "Mish": ("any", []),
    "Softplus": ("any", []),
    "Softsign": ("any", []),
    "Swish": ("any", [{"alpha": 1.7}]),
    "Gelu": ("any", [{"approximate": "tanh"}]),
    "Shrink": ("any", [{"lambd": 1.5, "bias": 0.5}]),
    "ThresholdedRelu": ("any", [{"alpha": 2.0}]),
    "Reciprocal": ("nonzero", []),
}


@generator(*ACTIVATIONS, elems=NUMERIC)
def _activation_variants(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    dom, attr_sets = ACTIVATIONS[kind]
    out: dict[str, Build] = {"basic": simple(elem, [(3, 5, 7)], [dom]), "scalar": simple(elem, [()], [dom])}
    for i, attrs in enumerate(attr_sets):
        out[f"attrs{i + 1}"] = simple(elem, [(4, 6)], [dom], attrs)
    return out


@generator("Clip", elems=NUMERIC)
def _clip_variants(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    lo, hi = (np.asarray(-2).astype(elem.dtype), np.asarray(3).astype(elem.dtype))

    def build(with_lo: bool, with_hi: bool) -> Build:
        return lambda rng: Variant([arr(elem, (3, 5, 7), rng), lo if with_lo else None, hi if with_hi else None])

    return {"both": build(True, True), "min-only": build(True, False), "max-only": build(False, True),
            "none": build(False, False)}


@generator("PRelu", elems=NUMERIC)
def _prelu_variants(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"per-channel": simple(elem, [(2, 3, 4, 5), (3, 1, 1)], ["any", "small"]),
            "same-shape": simple(elem, [(3, 5), (3, 5)], ["any", "small"])}


@generator("Identity", "Dropout", elems=ALL)
def _noop_variants(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"basic": simple(elem, [(3, 5, 7)]), "scalar": simple(elem, [()])}
