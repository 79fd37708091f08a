"""Fused kinds: a convolution or matrix product with its bias and activation in one node,
a layer normalization over the last axis, a scaled dot-product attention block.

They are made only by the ``fuse-activations`` pass after lowering, and only
for a backend that declares it supports them; every other backend sees (and
the lowering table turns them back into) the unfused kinds::

    FusedConv(x, W, B, R)    = act(Conv(x, W, B) + R)   (R optional, the residual: the result's type)
    FusedMatMul(A, B, Bias)  = act(MatMul(A, B) + Bias)      (Bias optional; it never changes the shape)
    DequantMatMul(A, Wq, S, Bias) = act(MatMul(A, Cast(Wq, float32) * S) + Bias)
        a weight kept compressed: Wq an 8-bit integer matrix [K, N], S its float32 scale
        ([1, N] per column, [K, 1] per row or [1, 1]); made by ``keep-compressed-weights``
        before lowering, from the Cast and Mul with which a weight-only compressed model
        dequantizes its weights

``act`` is chosen by ``activation``:

- ``none``: the identity,
- ``relu``: ``max(y, 0)``,
- ``clip``: ``min(max(y, clip_min), clip_max)`` (an infinite bound does not clip;
  integer results take the bounds exactly, the pass only fuses bounds a float64 holds exactly),
- ``hardswish``: ``y * max(min((y + 3) / 6, 1), 0)``, HardSwish as it is lowered (a true
  division; NaN propagates); float32 results only.
- ``hardswish6``: ``(y * min(max(y + 3, 0), 6)) / 6``, the ReLU6 form of hard swish that exporters
  write as nodes (paddle2onnx's PP-LCNet and MobileNetV3: Add, Clip, Mul, Div), in that order; float32
  results only.

Each is applied to the unfused result in its element kind, so the fused kinds
compute exactly what the separate nodes compute.

The two transformer blocks (made by the same pass from the patterns exporters
write and from the lowering of LayerNormalization)::

    FusedLayerNorm(X, Scale, Bias)  = (X - mean) / sqrt(var + epsilon) * Scale + Bias
        mean and the biased var over the last axis of X; Scale / Bias (optional) vary
        along the last axis only ([L] or [1, ..., L], or one value)
    FusedAttention(Q, KT, V, Mask)  = Softmax(MatMul(Q, KT) (*|/) scale + Mask, last axis) @ V
        Q [..., M, D], KT [..., D, N] (the keys already transposed), V [..., N, Dv] with the
        same leading axes; Mask (optional) broadcasts to the scores [..., M, N] without
        changing their shape; ``scale_op`` mul or div says how ``scale`` applies. A row whose
        every score is -inf gives NaN, as Softmax does (``masked_rows`` nan), or zeros, as the
        Attention op does (``masked_rows`` zero: also a row whose Mask masks every key).

A backend computes them in any summation order (the accumulation tolerances
apply), so they are not bit-identical to the separate nodes.
"""

from __future__ import annotations

import math

from glow_core.errors import GlowTypeError
from glow_core.ir.defs.common import Attrs, Types, req, same_elem
from glow_core.ir.defs.nn import MATMUL_KINDS, conv_rule, matmul_shape
from glow_core.ir.kinds import AttrType as A
from glow_core.ir.kinds import Category as C
from glow_core.ir.kinds import attr, define_kind
from glow_core.ir.types import FLOAT_KINDS, ElemKind, TensorType, broadcast_shapes

#: the activations a fused kind may apply
ACTIVATIONS = ("none", "relu", "clip", "hardswish", "hardswish6")
#: the activations that need a float32 result (the backends compute them as float32 operations)
_FLOAT32_ACTIVATIONS = frozenset({"hardswish", "hardswish6"})

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


def _check_elem(attrs: Attrs, elem: ElemKind) -> None:
    act = attrs["activation"]
    if act in _FLOAT32_ACTIVATIONS and elem is not ElemKind.FLOAT32:
        raise GlowTypeError(f"activation '{act}' needs a float32 result, not {elem.value}")


def _fused_conv_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    check_activation(attrs)
    out = conv_rule(types[:3], attrs)
    _check_elem(attrs, out[0].elem)
    residual = types[3] if len(types) > 3 else None
    if residual is not None and residual != out[0]:
        raise GlowTypeError(f"Residual {residual} must have the convolution's result type {out[0]}")
    return out


def _fused_matmul_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    check_activation(attrs)
    a, b = req(types, 0), req(types, 1)
    bias = types[2] if len(types) > 2 else None
    elem = same_elem(types, 0, 1, 2)
    _check_elem(attrs, elem)
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
            doc="act(Conv(Input, Filter, Bias) + Residual): Conv's attributes plus activation "
                "none/relu/clip/hardswish; Residual (optional) has the result's type.")
define_kind("FusedMatMul", inputs=("LHS", "RHS", "Bias?"), attrs=_ACT_ATTRS, infer=_fused_matmul_rule,
            categories=(C.LINEAR_ALGEBRA,), elems=MATMUL_KINDS,
            doc="act(MatMul(LHS, RHS) + Bias): Bias broadcasts to the product without changing its shape.")


def _row_param(p: TensorType, x: TensorType, name: str, kind: str) -> None:
    """``p`` varies along the last axis of ``x`` only and broadcasts without changing x's shape."""
    last = x.shape[-1]
    if p.rank > x.rank or any(d != 1 for d in p.shape[:-1]) or (p.rank and p.shape[-1] not in (1, last)):
        raise GlowTypeError(f"{kind} {name} {list(p.shape)} must be [{last}], [1, ..., {last}] or one value")


def _fused_layernorm_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x, scale = req(types, 0), req(types, 1)
    bias = types[2] if len(types) > 2 else None
    elem = same_elem(types, 0, 1, 2)
    if x.rank < 1:
        raise GlowTypeError("FusedLayerNorm needs an input of rank >= 1")
    _row_param(scale, x, "Scale", "FusedLayerNorm")
    if bias is not None:
        _row_param(bias, x, "Bias", "FusedLayerNorm")
    if not attrs["epsilon"] >= 0.0:
        raise GlowTypeError(f"FusedLayerNorm epsilon {attrs['epsilon']} must be a number >= 0")
    return [TensorType(elem, x.shape)]


#: how FusedAttention applies its scale to the scores
SCALE_OPS = ("mul", "div")
#: what FusedAttention gives for a row whose every score is -inf: NaN (Softmax) or zeros (Attention)
MASKED_ROWS = ("nan", "zero")


def _fused_attention_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    q, kt, v = req(types, 0), req(types, 1), req(types, 2)
    mask = types[3] if len(types) > 3 else None
    elem = same_elem(types, 0, 1, 2, 3)
    if attrs["scale_op"] not in SCALE_OPS or math.isnan(attrs["scale"]):
        raise GlowTypeError(f"FusedAttention scale_op must be one of {', '.join(SCALE_OPS)}, scale a number")
    if attrs["masked_rows"] not in MASKED_ROWS:
        raise GlowTypeError(f"FusedAttention masked_rows must be one of {', '.join(MASKED_ROWS)}")
    if not (q.rank == kt.rank == v.rank >= 2) or not (q.shape[:-2] == kt.shape[:-2] == v.shape[:-2]):
        raise GlowTypeError(f"FusedAttention Q {list(q.shape)}, KT {list(kt.shape)}, V {list(v.shape)} "
                            "must have the same rank (>= 2) and the same leading axes")
    m, d = q.shape[-2:]
    if kt.shape[-2] != d or v.shape[-2] != kt.shape[-1]:
        raise GlowTypeError(f"FusedAttention Q {list(q.shape)}, KT {list(kt.shape)}, V {list(v.shape)}: "
                            "need Q [..., M, D], KT [..., D, N], V [..., N, Dv]")
    scores = q.shape[:-1] + (kt.shape[-1],)
    if mask is not None and (mask.rank > len(scores) or broadcast_shapes(scores, mask.shape) != scores):
        raise GlowTypeError(f"FusedAttention Mask {list(mask.shape)} does not broadcast to the scores {list(scores)}")
    return [TensorType(elem, q.shape[:-1] + (v.shape[-1],))]


define_kind("FusedLayerNorm", inputs=("Input", "Scale", "Bias?"),
            attrs=(attr("epsilon", A.FLOAT, 1e-5, doc="added to the variance"),),
            infer=_fused_layernorm_rule, categories=(C.NORMALIZATION,), elems=FLOAT_KINDS,
            doc="(Input - mean) / sqrt(var + epsilon) * Scale + Bias over the last axis (biased variance).")
define_kind("FusedAttention", inputs=("Q", "KT", "V", "Mask?"),
            attrs=(attr("scale", A.FLOAT, 1.0, doc="the scores' scale"),
                   attr("scale_op", A.STRING, "mul", doc=" / ".join(SCALE_OPS) + ": scores * scale or scores / scale"),
                   attr("masked_rows", A.STRING, "nan", doc=" / ".join(MASKED_ROWS) + ": a fully masked row's result")),
            infer=_fused_attention_rule, categories=(C.LINEAR_ALGEBRA,), elems=FLOAT_KINDS,
            doc="Softmax(MatMul(Q, KT) (*|/) scale + Mask) @ V over the last axis; same leading axes.")


#: the element kinds of a compressed weight (DequantMatMul's Weight)
COMPRESSED_KINDS = frozenset({ElemKind.INT8, ElemKind.UINT8})


def _dequant_matmul_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    check_activation(attrs)
    a, w, s = req(types, 0), req(types, 1), req(types, 2)
    bias = types[3] if len(types) > 3 else None
    f32 = ElemKind.FLOAT32
    if a.elem is not f32 or s.elem is not f32 or (bias is not None and bias.elem is not f32):
        raise GlowTypeError(f"DequantMatMul computes in float32: LHS {a}, Scale {s}, Bias {bias}")
    if w.elem not in COMPRESSED_KINDS or w.rank != 2:
        raise GlowTypeError(f"DequantMatMul Weight must be an int8 / uint8 matrix [K, N], got {w}")
    K, N = w.shape
    if s.shape not in ((1, N), (K, 1), (1, 1)):
        raise GlowTypeError(f"DequantMatMul Scale {list(s.shape)} must be [1, {N}], [{K}, 1] or [1, 1]")
    shape = matmul_shape(a.shape, w.shape)
    if bias is not None and broadcast_shapes(shape, bias.shape) != shape:
        raise GlowTypeError(f"Bias {list(bias.shape)} does not broadcast to the product's shape {list(shape)}")
    return [TensorType(f32, shape)]


define_kind("DequantMatMul", inputs=("LHS", "Weight", "Scale", "Bias?"), attrs=_ACT_ATTRS, infer=_dequant_matmul_rule,
            categories=(C.LINEAR_ALGEBRA,), elems=COMPRESSED_KINDS | {ElemKind.FLOAT32},
            doc="act(MatMul(LHS, Cast(Weight, float32) * Scale) + Bias): an int8 / uint8 weight [K, N] kept "
                "compressed, Scale [1, N], [K, 1] or [1, 1] (each weight is dequantized exactly as the Cast and "
                "Mul round it).")
