"""Lowerings of the fused kinds back into the kinds they fuse (see ``glow_core.ir.defs.fused``).

``FusedConv`` -> Conv, Add of the residual, then the activation; ``FusedMatMul`` -> MatMul, Add of
the bias, then the activation. The activation ``relu`` becomes a Relu node and
``clip`` a Clip with constant bounds (both lowered further when needed).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from glow_core.ir.graph import Node, Value
from glow_core.lowering.builder import Builder
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


#: activation name -> emits it on the unfused result
ACTIVATIONS: dict[str, Callable[[Builder, Node, Value], Value]] = {"none": _none, "relu": _relu, "clip": _clip}

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
