"""Symbolic dimensions: a size that is a polynomial in named symbols (``sequence``, ``past+1``, ``12*sequence``).

A network compiled for symbolic dims (``glow_core/pipeline/symbolic.py``) is laid out at each symbol's
*bound* (the largest size it plans for); a value's type then records, per axis, the expression of the size a
run actually has (:attr:`glow_core.ir.types.TensorType.sym`). The entries of an axis beyond that size are
padding: arbitrary bytes that kernels either compute over and discard (element-wise work) or skip
(reductions over the axis read the run's size).

:func:`derive` finds a dim's expression from the sizes it took in two imports of the model at different
symbol values (a probe of distinct primes and the bound); :class:`SymExpr` evaluates it for a run.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from glow_core.errors import InputError

#: a monomial: the sorted names of the symbols it multiplies (``()`` is the constant 1)
Monomial = tuple[str, ...]

#: the largest constant term :func:`derive` tries beside a symbolic term (``sequence + 1``, ``past - 1``)
MAX_OFFSET = 16


@dataclass(frozen=True)
class SymExpr:
    """An integer polynomial over symbol names: ``terms`` maps monomials to their coefficients."""

    terms: tuple[tuple[Monomial, int], ...]

    @staticmethod
    def of(terms: Mapping[Monomial, int]) -> "SymExpr":
        return SymExpr(tuple(sorted((tuple(sorted(m)), int(c)) for m, c in terms.items() if c != 0)))

    @staticmethod
    def symbol(name: str) -> "SymExpr":
        return SymExpr.of({(name,): 1})

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset(s for m, _ in self.terms for s in m)

    @property
    def is_constant(self) -> bool:
        return all(not m for m, _ in self.terms)

    def evaluate(self, env: Mapping[str, int]) -> int:
        total = 0
        for mono, coeff in self.terms:
            v = coeff
            for s in mono:
                v *= int(env[s])
            total += v
        return total

    @staticmethod
    def parse(text: str) -> "SymExpr":
        """The expression ``str(e)`` printed: terms such as ``12*b*s`` joined by `` + `` and `` - `` (spaced,
        so a symbol's name may hold other characters)."""
        terms: dict[Monomial, int] = {}
        tokens = text.split(" ")
        signs = [-1 if tokens[0].startswith("-") else 1] + [-1 if op == "-" else 1 for op in tokens[1::2]]
        if tokens[1::2] and not all(op in "+-" for op in tokens[1::2]):
            raise InputError(f"'{text}' is no size expression", hint="terms like 12*b*s, joined by ' + ' or ' - '")
        for sign, tok in zip(signs, tokens[0::2]):
            parts = tok.lstrip("-").split("*")
            coeff = int(parts[0]) if parts[0].isdigit() else 1
            mono = tuple(sorted(p for p in parts if not p.isdigit()))
            if not all(mono):
                raise InputError(f"'{text}' is no size expression", hint="terms like 12*b*s, joined by ' + '")
            terms[mono] = terms.get(mono, 0) + sign * coeff
        return SymExpr.of(terms)

    def monotone(self) -> bool:
        """True when the value never decreases as a symbol grows (every non-constant coefficient >= 0): a
        buffer sized at the bounds then holds every run's size."""
        return all(c >= 0 for m, c in self.terms if m)

    def __str__(self) -> str:
        out = ""
        for mono, coeff in sorted(self.terms, key=lambda t: (-len(t[0]), t[0])):
            mag = abs(coeff)
            text = str(mag) if not mono else "*".join(mono) if mag == 1 else f"{mag}*{'*'.join(mono)}"
            if not out:
                out = text if coeff > 0 else f"-{text}"
            else:
                out += f" {'+' if coeff > 0 else '-'} {text}"
        return out or "0"


def _monomials(symbols: Sequence[str]) -> list[Monomial]:
    """The monomials :func:`derive` tries: each symbol, then each product of two."""
    ones = [(s,) for s in symbols]
    twos = [tuple(sorted(p)) for p in itertools.combinations_with_replacement(symbols, 2)]
    return ones + twos  # type: ignore[return-value]


def _value(mono: Monomial, env: Mapping[str, int]) -> int:
    v = 1
    for s in mono:
        v *= int(env[s])
    return v


def _candidates(size: int, probe: Mapping[str, int], monos: Sequence[Monomial]) -> Iterable[SymExpr]:
    """Expressions that give ``size`` at ``probe``: ``c*m + d`` and ``m1 + m2 + d`` with a small ``d``."""
    for m in monos:
        mv = _value(m, probe)
        if mv <= 0:
            continue
        q = size // mv
        for c in (q, q + 1, q - 1):
            d = size - c * mv
            if c > 0 and abs(d) <= MAX_OFFSET:
                yield SymExpr.of({m: c, (): d})
    for m1, m2 in itertools.combinations(monos, 2):
        d = size - _value(m1, probe) - _value(m2, probe)
        if abs(d) <= MAX_OFFSET:
            yield SymExpr.of({m1: 1, m2: 1, (): d})


def derive(sizes: Sequence[int], probes: Sequence[Mapping[str, int]]) -> SymExpr | int | None:
    """The dim whose size was ``sizes[k]`` when the symbols had the values ``probes[k]``: an int when it is
    the same at every probe, else the first expression (:func:`_candidates` of the first probe) that gives
    every size; None when none does (the dim is no polynomial this search finds)."""
    if all(s == sizes[0] for s in sizes):
        return int(sizes[0])
    symbols = sorted({s for p in probes for s in p})
    for expr in _candidates(int(sizes[0]), probes[0], _monomials(symbols)):
        if all(expr.evaluate(p) == s for p, s in zip(probes, sizes)):
            return expr
    return None


def bind_symbols(types: Mapping[str, Any], feeds: Mapping[str, Any]) -> dict[str, int]:
    """The symbols' values the feeds' shapes give (an axis sized by a symbol, or by a multiple ``c*s`` of one,
    names it), checked
    against every symbolic axis of every input and against the bounds (the layout's shapes)."""
    env: dict[str, int] = {}
    for name, t in types.items():
        for k, e in enumerate(t.sym or ()):
            if e is None or len(e.terms) != 1 or len(e.terms[0][0]) != 1:
                continue
            (sym,), c = e.terms[0]  # an axis sized ``c*sym`` (a plan in steps of c: sym is the size over c)
            size = int(feeds[name].shape[k])
            if size % c:
                raise InputError(f"input '{name}' has {size} at axis {k}, where this network takes multiples "
                                 f"of {c} ({t})", hint=f"feed a multiple of {c}")
            env.setdefault(sym, size // c)
    named = {s for t in types.values() for e in t.sym or () if e is not None for s in e.symbols}
    if named - set(env):
        raise InputError(f"no input axis gives the size of symbol(s) {', '.join(sorted(named - set(env)))}",
                         hint="every symbol must be an axis of an input")
    for name, t in types.items():
        shape = tuple(feeds[name].shape)
        want = actual_shape(t, env)
        if shape != want:
            raise InputError(f"input '{name}' has shape {list(shape)}, where the symbols' sizes ({env}) give "
                             f"{list(want)} ({t})", hint="feed the shapes the model declares")
        if any(s > d for s, d in zip(shape, t.shape)):
            raise InputError(f"input '{name}' has shape {list(shape)}, beyond the bound {list(t.shape)} this "
                             "network was laid out for", hint="feed a smaller size, or compile with a larger bound")
    return env


def actual_shape(t: Any, env: Mapping[str, int]) -> tuple[int, ...]:
    """The shape a run with the symbols ``env`` gives ``t``."""
    return tuple(d if e is None else e.evaluate(env) for d, e in zip(t.shape, t.sym or (None,) * len(t.shape)))


__all__ = ["MAX_OFFSET", "SymExpr", "actual_shape", "bind_symbols", "derive"]
