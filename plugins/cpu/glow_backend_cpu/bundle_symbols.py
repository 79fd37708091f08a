"""Bundles compiled for symbolic dims: the entry's symbol arguments, their checks, and the data moves.

A function compiled for symbolic dims (``symbolic.py``) is laid out at the bounds: each input and output
region has its bound shape, and a run fills the leading corner of it. A bundle of such a function keeps the C
caller away from that layout. Its entry takes each symbol's size as an ``int64_t`` argument after the three
areas (in the order of ``BundleOptions.symbols``: the order the symbols first appear in the model's
inputs) and:

1. returns ``GLOW_BUNDLE_BAD_SYMBOLS`` before touching any memory when a size is below its minimum, above its
   maximum or not a multiple of its step;
2. stores the sizes (each divided by its step: the symbols the function's dims name) in ``glow_symbols``;
3. expands each input in place, from the dense row-major array the caller wrote at the input's offset to the
   bound layout, back to front (every element moves to an offset at or after its own, so no element is
   overwritten before it moves), zeroing the padding (an index input's padding then holds no stale values);
4. runs, then compacts each output in place, front to back, into a dense array at the output's offset.

Rows are the largest contiguous runs both layouts share: the last symbolic axis and the fixed axes after it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from glow_backend_cpu.helpers import I8P, I32, I64, for_range, i64, intrinsic, memset
from glow_core.errors import BackendError
from glow_core.ir.graph import Function
from glow_core.ir.symbolic import SymExpr
from glow_core.ir.types import TensorType
from glow_sdk.backend import BundleSymbol

#: the status the entry returns for symbol sizes out of their bounds or off their step
BAD_SYMBOLS = 4
#: the entry's area parameters (a symbol's C name must differ from them)
AREA_PARAMS = frozenset({"constantWeight", "mutableWeight", "activations"})


@dataclass(frozen=True)
class EntrySymbol:
    """One symbol argument of the entry: the model's ``name``, the ``symbol`` the function's dims name (the size
    divided by ``step``), the sizes it may take, and its C parameter name."""

    name: str
    symbol: str
    min: int
    max: int
    step: int
    c_name: str


def bundle_symbols(spec: Sequence[BundleSymbol], named: Sequence[str], c_names: Sequence[str],
                   taken: set[str]) -> list[EntrySymbol]:
    """The entry's symbol arguments from ``BundleOptions.symbols``; every symbol the function names
    (``named``) must be one of them. ``c_names``: C identifiers of the names (made distinct from ``taken``)."""
    out: list[EntrySymbol] = []
    for s, c in zip(spec, c_names):
        lo, hi, step = int(s.min), int(s.max), int(s.step)
        if not 1 <= lo <= hi or step < 1 or lo % step or hi % step:
            raise BackendError(f"symbol '{s.name}': sizes {lo}..{hi} in steps of {step} are not a usable bound")
        c = f"s_{c}" if c[:1].isdigit() else c
        while c in taken:
            c += "_"
        taken.add(c)
        out.append(EntrySymbol(s.name, s.symbol, lo, hi, step, c))
    missing = sorted(set(named) - {s.symbol for s in out})
    if missing:
        raise BackendError(f"the function's dims name symbol(s) {', '.join(missing)}, which the bundle's "
                           "symbols do not list")
    return out


def io_types(function: Function) -> dict[tuple[str, str], TensorType]:
    """(role, name) -> the type of each input and output of ``function`` (with its symbolic dims)."""
    out: dict[tuple[str, str], TensorType] = {("input", p.name): p.type for p in function.inputs}
    for name, v in function.outputs:
        out[("output", name)] = v.type
    return out


def dims_text(t: TensorType) -> list[int | str]:
    """Each axis's size: an int, or its expression of the symbols (``SymExpr.parse`` reads it back)."""
    return [d if e is None else str(e) for d, e in zip(t.shape, t.sym or (None,) * t.rank)]


def c_expr(e: SymExpr, symbols: Sequence[EntrySymbol]) -> str:
    """``e`` as a C expression of the entry's parameters (a stepped symbol is its size over its step)."""
    by = {s.symbol: (f"({s.c_name})" if s.step == 1 else f"(({s.c_name}) / {s.step})") for s in symbols}
    terms = []
    for mono, coeff in e.terms:
        factors = ([str(coeff)] if coeff != 1 or not mono else []) + [by[m] for m in mono]
        terms.append("*".join(factors))
    return terms[0] if len(terms) == 1 and len(e.terms[0][0]) == 1 and e.terms[0][1] == 1 else \
        "(" + " + ".join(terms or ["0"]) + ")"


# -- code ----------------------------------------------------------------------------------------------------
def _eval(b: ir.IRBuilder, e: SymExpr | None, size: int, env: Mapping[str, ir.Value]) -> ir.Value:
    """The i64 size of one axis in this run (``size`` when the axis is fixed)."""
    if e is None:
        return i64(size)
    total: ir.Value | None = None
    for mono, coeff in e.terms:
        term: ir.Value = i64(coeff)
        for m in mono:
            term = b.mul(term, env[m])
        total = term if total is None else b.add(total, term)
    return total if total is not None else i64(0)


def emit_check(b: ir.IRBuilder, symbols: Sequence[EntrySymbol], args: Sequence[ir.Value]) -> ir.Value:
    """The i1 "some size is out of its bound or off its step"."""
    bad: ir.Value = ir.Constant(ir.IntType(1), 0)
    for s, v in zip(symbols, args):
        bad = b.or_(bad, b.icmp_signed("<", v, i64(s.min)))
        bad = b.or_(bad, b.icmp_signed(">", v, i64(s.max)))
        if s.step > 1:
            bad = b.or_(bad, b.icmp_signed("!=", b.srem(v, i64(s.step)), i64(0)))
    return bad


def emit_set(b: ir.IRBuilder, module: ir.Module, symbols: Sequence[EntrySymbol], args: Sequence[ir.Value],
             order: Sequence[str]) -> dict[str, ir.Value]:
    """Store the run's symbols (sizes over steps) in ``glow_symbols`` (in its ``order``); returns them by name."""
    env = {s.symbol: (v if s.step == 1 else b.sdiv(v, i64(s.step))) for s, v in zip(symbols, args)}
    if order:
        g = module.globals["glow_symbols"]
        for k, name in enumerate(order):
            b.store(env[name], b.gep(g, [i64(0), ir.Constant(I32, k)]))
    return env


@dataclass
class _Rows:
    """An io region as rows: ``count`` rows of ``length`` bytes, row ``r`` dense at ``r * length`` and at
    :meth:`bound_offset` in the bound layout."""

    count: ir.Value
    length: ir.Value
    extents: list[ir.Value]  # the run's sizes of the axes before the row
    strides: list[int]  # their bound strides, bytes

    def bound_offset(self, b: ir.IRBuilder, r: ir.Value) -> ir.Value:
        off: ir.Value = i64(0)
        for extent, stride in zip(reversed(self.extents), reversed(self.strides)):
            off = b.add(off, b.mul(b.urem(r, extent), i64(stride)))
            r = b.udiv(r, extent)
        return off


def _rows(b: ir.IRBuilder, t: TensorType, itemsize: int, env: Mapping[str, ir.Value]) -> _Rows | None:
    """The rows of a region of type ``t`` (None: no symbolic axis, the layouts are one)."""
    sym = t.sym or (None,) * t.rank
    axes = [k for k, e in enumerate(sym) if e is not None]
    if not axes:
        return None
    j = axes[-1]
    inner = math.prod(t.shape[j + 1:]) * itemsize
    extents = [_eval(b, sym[k], t.shape[k], env) for k in range(j)]
    count: ir.Value = i64(1)
    for x in extents:
        count = b.mul(count, x)
    strides = [math.prod(t.shape[k + 1:]) * itemsize for k in range(j)]
    return _Rows(count, b.mul(_eval(b, sym[j], t.shape[j], env), i64(inner)), extents, strides)


def _memmove(b: ir.IRBuilder, dst: ir.Value, src: ir.Value, n: ir.Value) -> None:
    fn = intrinsic(b.module, "llvm.memmove.p0.p0.i64", ir.VoidType(), [I8P, I8P, I64, ir.IntType(1)])
    b.call(fn, [dst, src, n, ir.Constant(ir.IntType(1), 0)])


def emit_expand(b: ir.IRBuilder, base: ir.Value, t: TensorType, itemsize: int, env: Mapping[str, ir.Value]) -> None:
    """Move a dense input at ``base`` to the bound layout, back to front, zeroing the padding after each row."""
    rows = _rows(b, t, itemsize, env)
    if rows is None:
        return
    nxt = b.alloca(I64, name="next_row")
    b.store(i64(math.prod(t.shape) * itemsize), nxt)
    with for_range(b, 0, rows.count, name="expand") as k:
        r = b.sub(b.sub(rows.count, i64(1)), k)
        at = rows.bound_offset(b, r)
        _memmove(b, b.gep(base, [at]), b.gep(base, [b.mul(r, rows.length)]), rows.length)
        end = b.add(at, rows.length)
        memset(b, b.gep(base, [end]), 0, b.sub(b.load(nxt), end))
        b.store(at, nxt)


def emit_compact(b: ir.IRBuilder, base: ir.Value, t: TensorType, itemsize: int, env: Mapping[str, ir.Value]) -> None:
    """Move an output at ``base`` from the bound layout to a dense array, front to back."""
    rows = _rows(b, t, itemsize, env)
    if rows is None:
        return
    with for_range(b, 0, rows.count, name="compact") as r:
        _memmove(b, b.gep(base, [b.mul(r, rows.length)]), b.gep(base, [rows.bound_offset(b, r)]), rows.length)


# -- the header ----------------------------------------------------------------------------------------------
def header_lines(manifest: Mapping[str, Any]) -> list[str]:
    """The symbolic part of the header: each symbol's bounds, and each io's shape and dense size at a run's
    sizes (``NAME_SIZE_<io>_AT(symbols...)``)."""
    up = manifest["name"].upper()
    symbols = [EntrySymbol(s["name"], s["symbol"], s["min"], s["max"], s["step"], s["c_name"])
               for s in manifest["symbols"]]
    params = ", ".join(s.c_name for s in symbols)
    lines = [f"/* symbolic dims: the entry takes their sizes, in this order, after the three areas */",
             f"#define {up}_NUM_SYMBOLS {len(symbols)}"]
    for k, s in enumerate(symbols):
        lines.append(f"/* symbol {k}: \"{_comment(s.name)}\" (parameter {s.c_name}): {s.min}..{s.max}"
                     + (f", a multiple of {s.step}" if s.step > 1 else "") + " */")
        for key, value in (("MIN", s.min), ("MAX", s.max), ("STEP", s.step)):
            lines.append(f"#define {up}_SYMBOL_{s.c_name}_{key} {value}")
    for io in manifest["io"]:
        dims = [str(d) if isinstance(d, int) else c_expr(SymExpr.parse(d), symbols) for d in io["dims"]]
        itemsize = 2 if io["dtype"] == "bfloat16" else np.dtype(io["dtype"]).itemsize
        elems = "*".join([f"(uint64_t){d}" for d in dims] + [str(itemsize)])
        lines.append(f"/* bytes of {io['role']} {io['c_name']} at the run's sizes (dense, C order) */")
        lines.append(f"#define {up}_SIZE_{io['c_name']}_AT({params}) ({elems})")
    return lines


def _comment(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_ :.,=+-]", "?", text)


__all__ = ["AREA_PARAMS", "BAD_SYMBOLS", "EntrySymbol", "bundle_symbols", "c_expr", "dims_text", "emit_check",
           "emit_compact", "emit_expand", "emit_set", "header_lines", "io_types"]
