"""Lowerings of the fused kinds back into the kinds they fuse (see ``glow_core.ir.defs.fused``).

``FusedConv`` -> Conv, Add of the residual, then the activation; ``FusedMatMul`` -> MatMul, Add of
the bias, then the activation; ``DequantMatMul`` -> Cast of the weight to float32, Mul by its scale,
then as FusedMatMul. The activation ``relu`` becomes a Relu node and
``clip`` a Clip with constant bounds, ``hardswish`` a HardSwish node, ``hardswish6`` its nodes
(Add 3, Clip 0..6, Mul, Div 6; each lowered further when needed).
``FusedLayerNorm`` -> ReduceMean, Sub, Mul, ReduceMean, Add, Sqrt, Div, Mul,
Add (the exporters' pattern); ``FusedAttention`` -> MatMul, Mul / Div by the
scale, Add of the mask, Softmax over the last axis (masked_rows zero: the
Attention op's masked softmax, zeros for a fully masked row), MatMul.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from glow_core.ir.graph import Node, Value
from glow_core.ir.types import ElemKind
from glow_core.lowering.builder import Builder
from glow_core.lowering.rules.nn_seq import masked_softmax
from glow_core.lowering.table import lowering


def _bound(b: Builder, value: float, like: Value) -> Value | None:
    """A clip bound as a constant of ``like``'s kind (None when it cannot clip anything)."""
    if math.isinf(value):
        return None
    if like.type.elem.is_int:
        info = np.iinfo(like.type.dtype)
        if not info.min < value < info.max:  # beyond the type's range: the bound never applies
            return None
        return b.const(np.asarray(int(value), dtype=like.type.dtype))
    return b.const(np.asarray(value, dtype=like.type.dtype))


def _none(b: Builder, node: Node, y: Value) -> Value:
    return y


def _relu(b: Builder, node: Node, y: Value) -> Value:
    return b.unary("Relu", y)


def _clip(b: Builder, node: Node, y: Value) -> Value:
    lo, hi = _bound(b, node.attrs["clip_min"], y), _bound(b, node.attrs["clip_max"], y)
    if lo is None and hi is None:
        return y
    return b.emit1("Clip", [y, lo, hi])


def _hardswish(b: Builder, node: Node, y: Value) -> Value:
    return b.unary("HardSwish", y)


def _hardswish6(b: Builder, node: Node, y: Value) -> Value:
    def c(v: float) -> Value:
        return b.const(np.asarray(v, dtype=y.type.dtype))
    t = b.emit1("Clip", [b.emit1("Add", [y, c(3.0)]), c(0.0), c(6.0)])
    return b.emit1("Div", [b.emit1("Mul", [y, t]), c(6.0)])


#: activation name -> emits it on the unfused result
ACTIVATIONS: dict[str, Callable[[Builder, Node, Value], Value]] = {
    "none": _none, "relu": _relu, "clip": _clip, "hardswish": _hardswish, "hardswish6": _hardswish6}

_CONV_ATTRS = ("strides", "pads", "dilations", "group")


@lowering("FusedConv")
def _fused_conv(b: Builder, node: Node) -> list[Value]:
    conv = b.emit1("Conv", [b.input(0), b.input(1), b.opt_input(2)],
                   **{k: node.attrs[k] for k in _CONV_ATTRS})
    residual = b.opt_input(3)
    if residual is not None:
        conv = b.add(conv, residual)
    return [ACTIVATIONS[node.attrs["activation"]](b, node, conv)]


@lowering("FusedMatMul")
def _fused_matmul(b: Builder, node: Node) -> list[Value]:
    y = b.emit1("MatMul", [b.input(0), b.input(1)])
    bias = b.opt_input(2)
    if bias is not None:
        y = b.add(y, bias)
    return [ACTIVATIONS[node.attrs["activation"]](b, node, y)]


@lowering("DequantMatMul")
def _dequant_matmul(b: Builder, node: Node) -> list[Value]:
    weight = b.mul(b.emit1("Cast", [b.input(1)], to=ElemKind.FLOAT32), b.input(2))
    y = b.emit1("MatMul", [b.input(0), weight])
    bias = b.opt_input(3)
    if bias is not None:
        y = b.add(y, bias)
    return [ACTIVATIONS[node.attrs["activation"]](b, node, y)]


@lowering("FusedLayerNorm")
def _fused_layernorm(b: Builder, node: Node) -> list[Value]:
    x = b.input(0)
    last = (x.type.rank - 1,)
    d = b.sub(x, b.reduce("ReduceMean", x, last))
    var = b.reduce("ReduceMean", b.mul(d, d), last)
    y = b.mul(b.div(d, b.unary("Sqrt", b.add(var, b.scalar(node.attrs["epsilon"], x)))), b.input(1))
    bias = b.opt_input(2)
    return [b.add(y, bias) if bias is not None else y]


@lowering("FusedAttention")
def _fused_attention(b: Builder, node: Node) -> list[Value]:
    scores = b.emit1("MatMul", [b.input(0), b.input(1)])
    scale = b.scalar(node.attrs["scale"], scores)
    scores = b.mul(scores, scale) if node.attrs["scale_op"] == "mul" else b.div(scores, scale)
    mask = b.opt_input(3)
    if mask is not None:
        scores = b.add(scores, mask)
    if node.attrs["masked_rows"] == "nan":
        probs = b.emit1("Softmax", [scores], axes=(scores.type.rank - 1,))
    else:  # the Attention op's rule: a row whose scores (or whose mask) are all -inf gives zeros
        probs = masked_softmax(b, scores)
        if mask is not None:
            top = b.reduce("ReduceMax", mask, (mask.type.rank - 1,)) if mask.type.rank else mask
            dead = b.emit1("IsInf", [top], detect_positive=False, detect_negative=True)
            probs = b.where(dead, b.scalar(0.0, probs, probs.type.rank), probs)
    return [b.emit1("MatMul", [probs, b.input(2)])]
