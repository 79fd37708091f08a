"""Folding per-channel affine maps into the convolution before them.

``fold-batchnorm``: ``BatchNormalization(Conv(x, W, B), scale, bias, mean, var)``
at inference is ``Conv(x, W', B')`` with, per output channel ``m``::

    s[m]  = scale[m] / sqrt(var[m] + epsilon)
    W'[m] = W[m] * s[m]
    B'[m] = (B[m] - mean[m]) * s[m] + bias[m]        (B = 0 when the Conv has none)

``fold-conv-arith``: the same for a ``Mul`` / ``Div`` / ``Add`` / ``Sub`` of the
Conv result by a constant that varies at most along the channel axis (the
scale-and-shift layers some exporters write after a batch norm)::

    Conv(x, W, B) * c  ->  Conv(x, W * c, B * c)      Conv(x, W, B) / c  ->  Conv(x, W / c, B / c)
    Conv(x, W, B) + c  ->  Conv(x, W, B + c)          Conv(x, W, B) - c  ->  Conv(x, W, B - c)

The new weights are computed in float64 and cast back to the Conv's element
kind. Both passes refuse (leave the graph alone) when

- the Conv result has another reader, or is a function output (it would have
  to be computed twice),
- the Conv's filter / bias, or the other operands, are not constants,
- the Conv is not floating point, or a folded value is not finite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from glow_core.ir.graph import Constant, Function, Node, Value
from glow_core.ir.kinds import KindTable
from glow_core.passes.rewrite import (
    add_constant_like,
    create_before,
    erase_if_dead,
    is_private_to,
    padded_shape,
    payload,
    producer,
    replace_value,
)
from glow_core.passinfra import PassContext, graph_pass


def foldable_conv(fn: Function, v: Value | None, reader: Node) -> Node | None:
    """The Conv computing ``v`` if its weights are constants and ``reader`` is its only reader."""
    conv = producer(v, "Conv")
    if conv is None or v is None or not is_private_to(fn, v, reader):
        return None
    if not conv.result.type.elem.is_float:
        return None
    if payload(conv.inputs[1]) is None:
        return None
    bias = conv.inputs[2] if len(conv.inputs) > 2 else None
    if bias is not None and payload(bias) is None:
        return None
    return conv


def conv_params64(conv: Node) -> tuple[np.ndarray, np.ndarray]:
    """The Conv's filter and bias (zeros when it has none) in float64."""
    w = payload(conv.inputs[1])
    assert w is not None
    bias = conv.inputs[2] if len(conv.inputs) > 2 else None
    b = payload(bias)
    m = w.shape[0]
    return w.astype(np.float64), (np.zeros(m) if b is None else b.astype(np.float64))


def _all_finite(a: np.ndarray) -> bool:
    """Every element finite, without a float64 copy of a large filter when numpy's isfinite takes the kind."""
    if a.dtype.kind == "f":
        return bool(np.isfinite(a).all())
    return bool(np.isfinite(a.astype(np.float64)).all())


def rebuild_conv(fn: Function, conv: Node, anchor: Node, w64: np.ndarray, b64: np.ndarray) -> Node | None:
    """A copy of ``conv`` with new filter and bias (cast back to its element kind), before ``anchor``.

    None when a folded value is not finite (the fold would change results).
    """
    w_old = conv.inputs[1]
    assert isinstance(w_old, Constant)
    with np.errstate(all="ignore"):
        w_new = w64 if w64.dtype == w_old.type.dtype else w64.astype(w_old.type.dtype)
        b_new = b64.astype(conv.result.type.dtype)
    if not (_all_finite(w_new) and _all_finite(b_new)):
        return None
    wc = add_constant_like(fn, w_new, w_old, f"{conv.name}.folded_filter")
    bc = fn.add_constant(np.ascontiguousarray(b_new), f"{conv.name}.folded_bias")
    return create_before(fn, anchor, "Conv", [conv.inputs[0], wc, bc], conv.attrs, origin_of=conv)


def channel_shape(w: np.ndarray) -> tuple[int, ...]:
    """Shape that broadcasts a per-output-channel vector over a filter [M, C/g, k...]."""
    return (w.shape[0],) + (1,) * (w.ndim - 1)


def _finish(fn: Function, anchor: Node, conv: Node, new_conv: Node) -> None:
    replace_value(fn, anchor.result, new_conv.result)
    erase_if_dead(fn, anchor, conv)


# -- fold-batchnorm ------------------------------------------------------------------------

#: output channels are scaled in blocks of about this many filter elements (float64 scratch that stays in cache)
SCALE_BLOCK = 1 << 16


def scale_filter(w: np.ndarray, s: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """``w * s`` per output channel, computed in float64 and rounded to ``dtype``, a block of channels at a
    time: the result of one float64 product of the whole filter without its float64 copies."""
    out = np.empty(w.shape, dtype)
    step = max(1, SCALE_BLOCK // max(1, w[0].size)) if w.shape[0] else 1
    for m0 in range(0, w.shape[0], step):
        blk = w[m0:m0 + step].astype(np.float64)
        blk *= s[m0:m0 + step].reshape(channel_shape(blk))
        out[m0:m0 + step] = blk
    return out


def fold_one_batchnorm(fn: Function, bn: Node) -> bool:
    conv = foldable_conv(fn, bn.inputs[0], bn)
    params = [payload(v) for v in bn.inputs[1:5]]
    if conv is None or any(p is None for p in params):
        return False
    scale, bias, mean, var = (np.asarray(p, dtype=np.float64) for p in params)  # type: ignore[arg-type]
    w = payload(conv.inputs[1])
    assert w is not None
    b = payload(conv.inputs[2] if len(conv.inputs) > 2 else None)
    b64 = np.zeros(w.shape[0]) if b is None else b.astype(np.float64)
    with np.errstate(all="ignore"):
        s = scale / np.sqrt(var + float(bn.attrs["epsilon"]))
        w_new = scale_filter(w, s, conv.inputs[1].type.dtype)
        new_conv = rebuild_conv(fn, conv, bn, w_new, (b64 - mean) * s + bias)
    if new_conv is None:
        return False
    _finish(fn, bn, conv, new_conv)
    return True


@graph_pass("fold-batchnorm")
def fold_batchnorm(fn: Function, ctx: PassContext) -> bool:
    """Fold BatchNormalization (constant parameters) into the Conv before it."""
    changed = False
    for bn in fn.nodes_of("BatchNormalization"):
        changed |= fold_one_batchnorm(fn, bn)
    if changed:
        fn.erase_unused_constants()
    return changed


# -- fold-conv-arith -------------------------------------------------------------------------

def per_channel(c: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray | None:
    """``c`` as a vector over axis 1 of ``out_shape`` if it varies at most along that axis
    and broadcasting it does not change ``out_shape``."""
    rank = len(out_shape)
    if c.ndim > rank:
        return None
    shape = padded_shape(c.shape, rank)
    for axis, (d, o) in enumerate(zip(shape, out_shape)):
        if d != 1 and (axis != 1 or d != o):
            return None
    full = np.broadcast_to(c.reshape(shape).astype(np.float64), (1, out_shape[1]) + (1,) * (rank - 2))
    return full.reshape(out_shape[1])


#: (w, b, v) -> (w', b') for ``conv_result OP v``
AffineFold = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def _v(w: np.ndarray, v: np.ndarray) -> np.ndarray:
    return v.reshape(channel_shape(w))


#: kind -> (fold when the Conv is the left operand, fold when it is the right one, or None)
ARITH_FOLDS = KindTable("conv arithmetic folds")
ARITH_FOLDS.add("Mul", (lambda w, b, v: (w * _v(w, v), b * v),) * 2)
ARITH_FOLDS.add("Add", (lambda w, b, v: (w, b + v),) * 2)
ARITH_FOLDS.add("Div", (lambda w, b, v: (w / _v(w, v), b / v), None))
ARITH_FOLDS.add("Sub", (lambda w, b, v: (w, b - v), lambda w, b, v: (-w, v - b)))


def fold_one_arith(fn: Function, node: Node) -> bool:
    folds = ARITH_FOLDS[node.kind.name]
    for side in (0, 1):
        fold = folds[side]
        conv = foldable_conv(fn, node.inputs[side], node) if fold is not None else None
        c = payload(node.inputs[1 - side])
        if conv is None or c is None or node.result.type != conv.result.type:
            continue
        v = per_channel(c, conv.result.type.shape)
        if v is None:
            continue
        w, b = conv_params64(conv)
        with np.errstate(all="ignore"):
            w2, b2 = fold(w, b, v)
        new_conv = rebuild_conv(fn, conv, node, w2, b2)
        if new_conv is None:
            return False
        _finish(fn, node, conv, new_conv)
        return True
    return False


@graph_pass("fold-conv-arith")
def fold_conv_arith(fn: Function, ctx: PassContext) -> bool:
    """Fold a per-channel constant Mul/Div/Add/Sub into the Conv before it."""
    changed = False
    for node in list(fn.nodes):
        if node.function is fn and node.kind.name in ARITH_FOLDS:
            changed |= fold_one_arith(fn, node)
    if changed:
        fn.erase_unused_constants()
    return changed
