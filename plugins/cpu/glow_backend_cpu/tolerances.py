"""How close the cpu backend's results are to the interpreter's: one table, per node kind.

The cpu backend computes every element-wise kind and every data movement with
the same IEEE operations as the interpreter (float16 / bfloat16 in float32,
rounded once), so those are exact. The rest differ for a stated reason:

======================  ========================================  =================================================
class                   float32 tolerance                         why
======================  ========================================  =================================================
``exact``               bit for bit (denormals may flush)         same correctly rounded operations
``math``                rtol 1e-5, atol 1e-6                      vectorized ``exp`` polynomial (about 1 ulp) and
                                                                  libm calls vs numpy's own SIMD functions (a few ulps)
``accumulate``          rtol 1e-4 of the largest ``|value|``      sums in another order: vector lanes, blocks and
                                                                  FMA instead of numpy's pairwise sums / BLAS
``softmax``             rtol 1e-4, atol 1e-6                      ``exp`` and a sum in another order
``product``             rtol 2e-4                                 products of many factors in another order
``model``               rtol 1e-3, atol 1e-5                      a whole network (the model tests' bound)
======================  ========================================  =================================================

float64 results use the interpreter's float64 bounds (``glow_sdk.testing``);
integers and booleans are always exact.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from glow_core.ir.types import ElemKind
from glow_sdk.testing import EXACT, Tolerance, tolerance_for

E = ElemKind

#: class -> float32 tolerance
CLASSES: Mapping[str, Tolerance] = MappingProxyType({
    "exact": EXACT,
    "math": Tolerance(rtol=1e-5, atol=1e-6),
    "accumulate": Tolerance(rtol=1e-4, atol=1e-6, scaled=True),
    "softmax": Tolerance(rtol=1e-4, atol=1e-6),
    "product": Tolerance(rtol=2e-4, atol=1e-6),
    "model": Tolerance(rtol=1e-3, atol=1e-5),
})

_MATH = ("Exp", "Log", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
         "Tanh", "Erf", "Sigmoid", "Pow")
_ACCUMULATE = ("ReduceSum", "MatMul", "FusedMatMul", "Gemm", "Conv", "FusedConv", "AvgPool", "FusedLayerNorm",
               "FusedAttention")

#: node kind -> tolerance class (kinds not listed: exact)
KIND_CLASSES: Mapping[str, str] = MappingProxyType({
    **{k: "math" for k in _MATH},
    **{k: "accumulate" for k in _ACCUMULATE},
    "Softmax": "softmax",
    "ReduceProd": "product",
})


def tolerance(kind: str, elem: ElemKind) -> Tolerance:
    """The tolerance for a ``kind`` result of element kind ``elem`` (cpu vs interpreter)."""
    cls = KIND_CLASSES.get(kind, "exact")
    if elem is E.FLOAT32:
        return CLASSES[cls]
    if not elem.is_float:
        return EXACT
    if cls == "exact":
        return EXACT
    # other float kinds: the SDK's bounds for the matching class
    sdk = {"math": "transcendental", "accumulate": "accumulate", "softmax": "composite",
           "product": "product", "model": "model"}[cls]
    return tolerance_for(kind, elem, sdk)


__all__ = ["CLASSES", "KIND_CLASSES", "tolerance"]
