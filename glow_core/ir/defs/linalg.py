"""Linear-algebra kinds beyond MatMul/Gemm: Det."""

from __future__ import annotations

from glow_core.errors import GlowTypeError
from glow_core.ir.defs.common import Attrs, Types, check_elems, req
from glow_core.ir.kinds import Category as C
from glow_core.ir.kinds import define_kind
from glow_core.ir.types import FLOAT_KINDS, TensorType


def _det_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    check_elems(x, FLOAT_KINDS, "Det input")
    if x.rank < 2 or x.shape[-1] != x.shape[-2]:
        raise GlowTypeError(f"input {x} must be [..., M, M] (square matrices)")
    return [x.with_shape(x.shape[:-2])]


define_kind("Det", inputs=("Input",), infer=_det_rule, categories=(C.LINEAR_ALGEBRA,), elems=FLOAT_KINDS,
            doc="Determinant of each innermost M x M matrix (1 for M = 0).")
