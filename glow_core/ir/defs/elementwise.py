"""Element-wise kinds: arithmetic, math, comparison, logic, activations, casts."""

from __future__ import annotations

from glow_core.ir.defs.common import broadcast_rule, like_input
from glow_core.ir.kinds import Category as C
from glow_core.ir.kinds import define_kind
from glow_core.ir.types import NUMERIC_KINDS

_BIN = (C.ELEMENTWISE, C.BINARY)

define_kind("Add", inputs=("LHS", "RHS"), infer=broadcast_rule, categories=_BIN + (C.COMMUTATIVE, C.PRIMITIVE),
            elems=NUMERIC_KINDS, doc="LHS + RHS with numpy broadcasting.")
define_kind("Relu", inputs=("Input",), infer=like_input(0), categories=(C.ELEMENTWISE, C.UNARY, C.ACTIVATION),
            elems=NUMERIC_KINDS, doc="max(Input, 0).")
