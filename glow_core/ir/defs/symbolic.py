"""SymbolicValue: a small tensor of sizes computed from a run's symbols (glow_core/ir/symbolic.py).

A network compiled for symbolic dims (docs/dynamic-shapes.md) may compute values from sizes (a mean's
divisor, ``x * seq``): where the importer folded them into a constant at one size, the symbolic compile
replaces the constant by this node, whose elements are ``SymExpr``s of the symbols evaluated at each run.
``values`` holds them at the bound (what the node evaluates to where no run's sizes are known).
"""

from __future__ import annotations

from glow_core.errors import GlowTypeError
from glow_core.ir.defs.common import Attrs, Types
from glow_core.ir.kinds import AttrType as A
from glow_core.ir.kinds import attr, define_kind
from glow_core.ir.symbolic import SymExpr
from glow_core.ir.types import FLOAT_KINDS, ElemKind, TensorType

#: kinds that exist only in functions compiled for symbolic dims (nothing to lower onto: a backend without
#: them is not given such a function)
SYMBOLIC_ONLY_KINDS = frozenset({"SymbolicValue"})
#: the element kinds a SymbolicValue may have
SYMBOLIC_VALUE_KINDS = frozenset(FLOAT_KINDS | {ElemKind.INT32, ElemKind.INT64})


def _rule(types: Types, attrs: Attrs) -> list[TensorType]:
    shape = tuple(int(d) for d in attrs["shape"])
    n = 1
    for d in shape:
        n *= d
    if len(attrs["exprs"]) != n or len(attrs["values"]) != n:
        raise GlowTypeError(f"SymbolicValue of shape {list(shape)} needs {n} expressions and values")
    for text in attrs["exprs"]:
        SymExpr.parse(text)  # (an InputError names a malformed one)
    return [TensorType(attrs["to"], shape)]


define_kind("SymbolicValue", inputs=(), attrs=(
    attr("exprs", A.STRINGS, doc="each element's SymExpr, row-major (str(SymExpr))"),
    attr("values", A.FLOATS, doc="each element's value at the bounds"),
    attr("shape", A.INTS, doc="the result's shape"),
    attr("to", A.ELEM, doc="the result's element kind")),
    infer=_rule, elems=SYMBOLIC_VALUE_KINDS,
    doc="A tensor of sizes computed from the run's symbols: each element an expression of them, cast to `to`.")
