"""Symbolic dims in the cpu backend: the run's symbol values, each operand's valid extents, padded io.

A function compiled for symbolic dims (``glow_core/pipeline/symbolic.py``) is laid out at the bounds: every
buffer has its bound shape (``TensorType.shape``) and the layout of that shape, and ``TensorType.sym`` says
per axis how many entries a run holds (a ``SymExpr`` of the symbols; None: all of them). So no stride, offset
or buffer size depends on a run; only how much of each buffer holds data does.

- The module has a mutable global ``glow_symbols`` (one i64 per symbol, in :func:`symbols_of`'s order) and
  ``glow_set_symbols(i64*)``, which the runtime calls before each run.
- Each kernel computes its operands' valid extents from that global in its entry block
  (:func:`valid_extents`): ``Operand.valid``. An emitter registered with ``symbolic=True`` reads them
  (it must, where it reduces over a symbolic axis); any other emitter computes over the whole bound shape,
  which the core allows only where every symbolic axis is element-wise for the node (the padding then only
  ever meets padding).
- The runtime (:func:`bind_symbols`, :func:`prefix`) finds the symbols' values from the feeds' shapes, copies
  each feed into the leading corner of its bound-shaped buffer and each output out of its corner.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from llvmlite import ir

from glow_backend_cpu.helpers import I64, VOID, i64
from glow_core.errors import InputError
from glow_core.ir.symbolic import SymExpr, actual_shape, bind_symbols
from glow_core.ir.types import TensorType
from glow_core.lir import LIRFunction

SYMBOLS_GLOBAL = "glow_symbols"
SET_SYMBOLS = "glow_set_symbols"


def symbols_of(lir: LIRFunction) -> list[str]:
    """The symbols any value of ``lir`` names, sorted: the order of ``glow_symbols``."""
    names: set[str] = set()
    for v in list(lir.weights) + [o.value for ins in lir.instrs for o in ins.operands if o.value is not None]:
        for d in v.type.sym or ():
            if d is not None:
                names |= d.symbols
    return sorted(names)


def declare_symbols(module: ir.Module, symbols: Sequence[str]) -> ir.GlobalVariable | None:
    """``glow_symbols`` and ``glow_set_symbols`` in ``module`` (None when there are no symbols)."""
    if not symbols:
        return None
    ty = ir.ArrayType(I64, len(symbols))
    g = ir.GlobalVariable(module, ty, SYMBOLS_GLOBAL)
    g.initializer = ir.Constant(ty, [0] * len(symbols))
    fn = ir.Function(module, ir.FunctionType(VOID, [I64.as_pointer()]), name=SET_SYMBOLS)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    for k in range(len(symbols)):
        b.store(b.load(b.gep(fn.args[0], [i64(k)])), b.gep(g, [i64(0), ir.Constant(ir.IntType(32), k)]))
    b.ret_void()
    return g


class SymbolValues:
    """Loads of ``glow_symbols`` in one kernel's entry block, and expressions of them (each built once)."""

    def __init__(self, builder: ir.IRBuilder, g: ir.GlobalVariable, symbols: Sequence[str]) -> None:
        self.b = builder
        self.g = g
        self.index = {s: k for k, s in enumerate(symbols)}
        self._loaded: dict[str, ir.Value] = {}
        self._exprs: dict[SymExpr, ir.Value] = {}

    def symbol(self, name: str) -> ir.Value:
        v = self._loaded.get(name)
        if v is None:
            k = ir.Constant(ir.IntType(32), self.index[name])
            v = self._loaded[name] = self.b.load(self.b.gep(self.g, [i64(0), k]), name=f"sym.{name}")
        return v

    def expr(self, e: SymExpr) -> ir.Value:
        v = self._exprs.get(e)
        if v is not None:
            return v
        total: ir.Value | None = None
        for mono, coeff in e.terms:
            term: ir.Value | None = None
            for s in mono:
                term = self.symbol(s) if term is None else self.b.mul(term, self.symbol(s))
            term = i64(coeff) if term is None else term if coeff == 1 else self.b.mul(term, i64(coeff))
            total = term if total is None else self.b.add(total, term)
        total = total if total is not None else i64(0)
        self._exprs[e] = total
        return total


def valid_extents(t: TensorType, values: SymbolValues | None) -> tuple[int | ir.Value, ...] | None:
    """Per axis of ``t``: its size, or the i64 a run holds when the axis is symbolic (None: no axis is)."""
    if not t.symbolic or values is None:
        return None
    assert t.sym is not None
    return tuple(d if e is None else values.expr(e) for d, e in zip(t.shape, t.sym))


def prefix(shape: Sequence[int]) -> tuple[slice, ...]:
    """The index of a buffer's leading corner of ``shape``."""
    return tuple(slice(0, int(n)) for n in shape)


def symbol_array(symbols: Sequence[str], env: Mapping[str, Any]) -> np.ndarray:
    """The values for ``glow_set_symbols``, in its order."""
    missing = [s for s in symbols if s not in env]
    if missing:
        raise InputError(f"no input gives the size of symbol(s) {', '.join(missing)}",
                         hint="every symbol must be an axis of an input")
    return np.array([int(env[s]) for s in symbols], dtype=np.int64)


__all__ = ["SET_SYMBOLS", "SYMBOLS_GLOBAL", "SymbolValues", "actual_shape", "bind_symbols", "declare_symbols",
           "prefix", "symbol_array", "symbols_of", "valid_extents"]
