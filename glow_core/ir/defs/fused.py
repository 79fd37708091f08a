"""Fused kinds: a convolution or matrix product with its bias and activation in one node.

They are made only by the ``fuse-activations`` pass after lowering, and only
for a backend that declares it supports them; every other backend sees (and
the lowering table turns them back into) the unfused kinds::

    FusedConv(x, W, B, R)    = act(Conv(x, W, B) + R)   (R optional, the residual: the result's type)
    FusedMatMul(A, B, Bias)  = act(MatMul(A, B) + Bias)      (Bias optional; it never changes the shape)

``act`` is chosen by ``activation``:

- ``none``: the identity,
- ``relu``: ``max(y, 0)``,
- ``clip``: ``min(max(y, clip_min), clip_max)`` (an infinite bound does not clip;
  integer results take the bounds exactly, the pass only fuses bounds a float64 holds exactly).

Each is applied to the unfused result in its element kind, so the fused kinds
compute exactly what the separate nodes compute.
"""

from __future__ import annotations

import math

from glow_core.errors import GlowTypeError
from glow_core.ir.defs.common import Attrs, Types, req, same_elem
from glow_core.ir.defs.nn import MATMUL_KINDS, conv_rule, matmul_shape
from glow_core.ir.kinds import AttrType as A
from glow_core.ir.kinds import Category as C
from glow_core.ir.kinds import attr, define_kind
from glow_core.ir.types import FLOAT_KINDS, TensorType, broadcast_shapes

#: the activations a fused kind may apply
ACTIVATIONS = ("none", "relu", "clip")

_ACT_ATTRS = (
    attr("activation", A.STRING, "none", doc=" / ".join(ACTIVATIONS)),
    attr("clip_min", A.FLOAT, -math.inf, doc="lower bound of activation 'clip' (-inf: none)"),
    attr("clip_max", A.FLOAT, math.inf, doc="upper bound of activation 'clip' (+inf: none)"),
)


def check_activation(attrs: Attrs) -> None:
    act = attrs["activation"]
    if act not in ACTIVATIONS:
        raise GlowTypeError(f"activation '{act}' is not one of {', '.join(ACTIVATIONS)}")
    if math.isnan(attrs["clip_min"]) or math.isnan(attrs["clip_max"]):
        raise GlowTypeError("clip bounds must not be NaN (an absent bound is +-inf)")


def _fused_conv_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    check_activation(attrs)
    out = conv_rule(types[:3], attrs)
    residual = types[3] if len(types) > 3 else None
    if residual is not None and residual != out[0]:
        raise GlowTypeError(f"Residual {residual} must have the convolution's result type {out[0]}")
    return out


def _fused_matmul_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    check_activation(attrs)
    a, b = req(types, 0), req(types, 1)
    bias = types[2] if len(types) > 2 else None
    elem = same_elem(types, 0, 1, 2)
    if a.elem not in MATMUL_KINDS:
        raise GlowTypeError(f"FusedMatMul operand has element kind {a.elem.value}")
    shape = matmul_shape(a.shape, b.shape)
    if bias is not None and broadcast_shapes(shape, bias.shape) != shape:
        raise GlowTypeError(f"Bias {list(bias.shape)} does not broadcast to the product's shape {list(shape)}")
    return [TensorType(elem, shape)]


_CONV_ATTRS = (
    attr("strides", A.INTS, doc="one per spatial axis"),
    attr("pads", A.INTS, doc="[begin..., end...] per spatial axis"),
    attr("dilations", A.INTS, doc="one per spatial axis"),
    attr("group", A.INT, 1),
)

define_kind("FusedConv", inputs=("Input", "Filter", "Bias?", "Residual?"), attrs=_CONV_ATTRS + _ACT_ATTRS,
            infer=_fused_conv_rule, categories=(C.CONVOLUTION,), elems=FLOAT_KINDS,
            doc="act(Conv(Input, Filter, Bias) + Residual): Conv's attributes plus activation none/relu/clip; "
                "Residual (optional) has the result's type.")
define_kind("FusedMatMul", inputs=("LHS", "RHS", "Bias?"), attrs=_ACT_ATTRS, infer=_fused_matmul_rule,
            categories=(C.LINEAR_ALGEBRA,), elems=MATMUL_KINDS,
            doc="act(MatMul(LHS, RHS) + Bias): Bias broadcasts to the product without changing its shape.")
