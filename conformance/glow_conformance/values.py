"""Operand values: random arrays in a domain, and the special values of each element kind.

A *domain* says which values an operand may take for its results to be
well-defined and comparable: ``any`` (moderate values of either sign),
``positive``, ``nonneg``, ``unit`` (the open interval (-1, 1)), ``ge1``,
``nonzero``, ``near1`` (products), ``small`` (exponents), ``halves`` (ties of
rounding), ``full`` (the whole range of an integer kind, for bitwise ops).

Special values (:func:`special_values`) are the edge cases of a kind: signed
zeros, denormals, the largest and smallest normals, infinities and NaN for
floats; extremes and their neighbours for integers.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from glow_core.ir.types import ElemKind, TensorType
from glow_sdk.testing import finfo

E = ElemKind

#: (low, high) of float values per domain
FLOAT_DOMAINS: dict[str, tuple[float, float]] = {
    "any": (-8.0, 8.0),
    "positive": (0.05, 20.0),
    "nonneg": (0.0, 20.0),
    "unit": (-0.98, 0.98),
    "ge1": (1.0, 20.0),
    "nonzero": (0.25, 8.0),  # with a random sign
    "near1": (0.95, 1.05),
    "small": (-3.0, 3.0),
    "halves": (-6.0, 6.0),  # rounded to multiples of 0.5
    "full": (-8.0, 8.0),
    "tan": (-1.4, 1.4),
    "exp": (-10.0, 10.0),
}

#: (low, high) of integer values per domain (clipped to the kind's range)
INT_DOMAINS: dict[str, tuple[int, int]] = {
    "any": (-100, 100),
    "positive": (1, 100),
    "nonneg": (0, 100),
    "unit": (-1, 1),
    "ge1": (1, 100),
    "nonzero": (1, 100),  # with a random sign for signed kinds
    "near1": (-2, 2),
    "small": (0, 5),
    "halves": (-100, 100),
    "full": (-(2**63), 2**63 - 1),
    "tan": (-100, 100),
    "exp": (-100, 100),
}


def dtype_of(elem: ElemKind) -> np.dtype:
    return elem.dtype


def type_of(elem: ElemKind, shape: tuple[int, ...]) -> TensorType:
    """A tensor type; quantized kinds get a fixed scale and offset."""
    if elem.is_quantized:
        return TensorType(elem, shape, 0.25, 3 if elem == E.INT8Q else 128)
    return TensorType(elem, shape)


def random_array(elem: ElemKind, shape: tuple[int, ...], rng: np.random.Generator, domain: str = "any") -> np.ndarray:
    """Random values of ``elem`` in ``domain``."""
    dt = elem.dtype
    if elem == E.BOOL:
        return rng.random(shape) < 0.5
    if elem.is_float:
        lo, hi = FLOAT_DOMAINS[domain]
        x = rng.uniform(lo, hi, shape)
        if domain == "nonzero":
            x = x * np.where(rng.random(shape) < 0.5, -1.0, 1.0)
        if domain == "halves":
            x = np.round(x * 2) / 2
        return np.asarray(x).astype(dt)
    info = np.iinfo(dt)
    if domain == "full":
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt)
    lo_i, hi_i = INT_DOMAINS[domain]
    lo_i, hi_i = max(lo_i, int(info.min)), min(hi_i, int(info.max))
    if dt.itemsize == 1 and domain == "any":  # keep 8-bit sums and products mostly in range
        lo_i, hi_i = max(lo_i, -60), min(hi_i, 60)
    ints = rng.integers(lo_i, hi_i, size=shape, endpoint=True)
    if domain == "nonzero" and info.min < 0:
        ints = ints * np.where(rng.random(shape) < 0.5, -1, 1)
    return ints.astype(dt)


def _float_specials(dt: np.dtype) -> list[float]:
    fi = finfo(dt)
    tiny = float(fi.tiny)
    denorm = float(fi.smallest_subnormal)
    big = float(fi.max)
    return [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 1.5, 3.0, denorm, -denorm, tiny, -tiny, big, -big, float(fi.eps),
            np.inf, -np.inf, np.nan, 1e-3, 100.0]


def special_values(elem: ElemKind, domain: str = "any") -> np.ndarray:
    """The special values of ``elem`` (1-D). Integer extremes; for floats every IEEE edge case.

    ``nonzero`` and the integer domains leave out the values that make a
    result undefined (zero divisors, ``INT_MIN / -1``).
    """
    dt = elem.dtype
    if elem == E.BOOL:
        return np.array([False, True])
    if elem.is_float:
        vals = _float_specials(dt)
        if domain == "nonzero":
            vals = [v for v in vals if v != 0]
        return np.array(vals, dtype=np.float64).astype(dt)
    info = np.iinfo(dt)
    lo, hi = int(info.min), int(info.max)
    vals = [0, 1, 2, 7, hi, hi - 1, hi // 2 + 1]
    if lo < 0:
        vals += [-1, -2, -7, lo, lo + 1, lo // 2 - 1]
    if domain == "nonzero":
        vals = [v for v in vals if v not in (0, -1)]
    return np.array(vals, dtype=object).astype(dt)


def with_specials(a: np.ndarray, elem: ElemKind, rng: np.random.Generator, domain: str = "any") -> np.ndarray:
    """``a`` with about a quarter of its elements replaced by special values."""
    if a.size == 0:
        return a
    sp = special_values(elem, domain)
    out = a.copy().reshape(-1)
    pick = rng.random(out.size) < 0.25
    out[pick] = sp[rng.integers(0, sp.size, size=int(pick.sum()))]
    return out.reshape(a.shape)


Maker = Callable[[np.random.Generator], np.ndarray]

__all__ = ["FLOAT_DOMAINS", "INT_DOMAINS", "random_array", "special_values", "type_of", "with_specials"]
