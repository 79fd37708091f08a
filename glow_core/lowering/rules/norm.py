"""Lowerings of the normalization kinds and NegativeLogLikelihoodLoss onto primitives.

In: BatchNormalization, InstanceNormalization, GroupNormalization,
LayerNormalization (with its Mean / InvStdDev results), RMSNormalization,
LpNormalization, MeanVarianceNormalization, LRN, NegativeLogLikelihoodLoss.
Out: ReduceSum, element-wise arithmetic, Sqrt / Pow, Cast, Where, Gather
and data movement.

Each rule repeats its interpreter kernel's formula (``kernels/norm.py``) in
the same order: statistics are the two-pass mean and biased variance in the
compute kind (float32 for 16-bit floats, or the node's ``stash`` kind), with
Group- and InstanceNormalization's deviations scaled where squaring them would
overflow (:func:`_normalized`); the scale and shift after a ``stash``
computation happen in the input's kind.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from glow_core.ir.graph import Node, Value
from glow_core.ir.types import ElemKind
from glow_core.lowering.builder import Builder
from glow_core.lowering.rules.reduce import finish, full, mean, widen
from glow_core.lowering.table import lowering


def _per_channel(b: Builder, p: Value, rank: int, elem: ElemKind) -> Value:
    """A [C] parameter in ``elem``, shaped [C, 1, ...] to broadcast against [N, C, spatial...]."""
    return b.reshape(b.cast(p, elem), p.type.shape + (1,) * (rank - 2))


def _moments(b: Builder, a: Value, axes: Sequence[int]) -> tuple[Value, Value, Value]:
    """(mean, a - mean, biased variance) over ``axes``, kept dims (two-pass, as the kernels)."""
    m = mean(b, a, axes)
    d = b.sub(a, m)
    return m, d, mean(b, b.mul(d, d), axes)


#: deviations up to this magnitude are squared as they are; a larger largest one scales its set (overflow)
BIG_DEVIATION = 2.0 ** 50


def _normalized(b: Builder, a: Value, axes: Sequence[int], epsilon: float) -> Value:
    """``(a - mean) / sqrt(var + epsilon)`` over ``axes``, whose variance cannot overflow where the exact one is
    finite: where the largest deviation ``M`` of a set exceeds :data:`BIG_DEVIATION`, the deviations are scaled by
    ``1 / M`` and epsilon by ``1 / M**2`` (elsewhere the scale is 1, which changes no bit)."""
    d = b.sub(a, mean(b, a, axes))
    top = b.reduce("ReduceMax", b.unary("Abs", d), axes, True)
    r = b.where(b.binary("Less", b.scalar(BIG_DEVIATION, top), top), b.div(b.scalar(1.0, top), top),
                b.scalar(1.0, top))
    ds = b.mul(d, r)
    eps = b.mul(b.mul(b.scalar(epsilon, r), r), r)
    return b.div(ds, b.unary("Sqrt", b.add(mean(b, b.mul(ds, ds), axes), eps)))


def _std(b: Builder, var: Value, epsilon: float) -> Value:
    """sqrt(var + epsilon)."""
    return b.unary("Sqrt", b.add(var, b.scalar(epsilon, var)))


def _scale_shift(b: Builder, norm: Value, elem: ElemKind, scale: Value, bias: Value | None) -> Value:
    """Round the normalized tensor to ``elem``, then * scale (+ bias) in ``elem``."""
    y = b.mul(b.cast(norm, elem), scale)
    return b.add(y, bias) if bias is not None else y


# -- BatchNormalization / InstanceNormalization / GroupNormalization ---------------------------------

@lowering("BatchNormalization")
def _batchnorm(b: Builder, node: Node) -> list[Value]:
    x = b.input(0)
    scale, bias, m, var = (b.input(i) for i in range(1, 5))
    # computed in the widest compute kind of the five operands (float64 if any is float64)
    f64 = any(v.type.elem == ElemKind.FLOAT64 for v in node.inputs if v is not None)
    dt = ElemKind.FLOAT64 if f64 else ElemKind.FLOAT32
    r = x.type.rank
    inv = b.div(b.scalar(1.0, dt), _std(b, _per_channel(b, var, r, dt), node.attrs["epsilon"]))
    y = b.mul(b.sub(b.cast(x, dt), _per_channel(b, m, r, dt)), b.mul(_per_channel(b, scale, r, dt), inv))
    return [finish(b, node, b.add(y, _per_channel(b, bias, r, dt)))]


@lowering("InstanceNormalization")
def _instancenorm(b: Builder, node: Node) -> list[Value]:
    x = b.input(0)
    a = widen(b, x)
    r = x.type.rank
    norm = _normalized(b, a, tuple(range(2, r)), node.attrs["epsilon"])
    elem = a.type.elem
    y = b.add(b.mul(norm, _per_channel(b, b.input(1), r, elem)), _per_channel(b, b.input(2), r, elem))
    return [finish(b, node, y)]


@lowering("GroupNormalization")
def _groupnorm(b: Builder, node: Node) -> list[Value]:
    x = b.input(0)
    shape = x.type.shape
    n, c = shape[:2]
    g = node.attrs["num_groups"]
    per_group = (c // g) * math.prod(shape[2:])
    a = b.reshape(b.cast(x, node.attrs["stash"]), (n, g, per_group))
    norm = b.reshape(_normalized(b, a, (2,), node.attrs["epsilon"]), shape)
    r, elem = x.type.rank, x.type.elem
    return [_scale_shift(b, norm, elem, _per_channel(b, b.input(1), r, elem), _per_channel(b, b.input(2), r, elem))]


# -- LayerNormalization / RMSNormalization ------------------------------------------------------------

@lowering("LayerNormalization")
def _layernorm(b: Builder, node: Node) -> list[Value]:
    x = b.input(0)
    axes = tuple(range(node.attrs["axis"], x.type.rank))
    a = b.cast(x, node.attrs["stash"])
    m, d, var = _moments(b, a, axes)
    inv = b.div(b.scalar(1.0, a), _std(b, var, node.attrs["epsilon"]))
    y = _scale_shift(b, b.mul(d, inv), x.type.elem, b.input(1), b.opt_input(2))
    return [y, finish(b, node, m, 1), finish(b, node, inv, 2)]


@lowering("RMSNormalization")
def _rmsnorm(b: Builder, node: Node) -> list[Value]:
    x = b.input(0)
    axes = tuple(range(node.attrs["axis"], x.type.rank))
    a = b.cast(x, node.attrs["stash"])
    rms = _std(b, mean(b, b.mul(a, a), axes), node.attrs["epsilon"])
    return [_scale_shift(b, b.div(a, rms), x.type.elem, b.input(1), None)]


# -- LpNormalization / MeanVarianceNormalization / LRN ------------------------------------------------

@lowering("LpNormalization")
def _lpnorm(b: Builder, node: Node) -> list[Value]:
    a = widen(b, b.input(0))
    axes = (node.attrs["axis"],)
    if node.attrs["p"] == 1:
        norm = b.reduce("ReduceSum", b.unary("Abs", a), axes)
    else:
        norm = b.unary("Sqrt", b.reduce("ReduceSum", b.mul(a, a), axes))
    zero = b.binary("Equal", norm, b.scalar(0, norm))
    safe = b.where(zero, b.scalar(1, norm), norm)
    return [finish(b, node, b.where(zero, b.scalar(0, a), b.div(a, safe)))]


@lowering("MeanVarianceNormalization")
def _mvn(b: Builder, node: Node) -> list[Value]:
    a = widen(b, b.input(0))
    _, d, var = _moments(b, a, tuple(node.attrs["axes"]))
    std = b.add(b.unary("Sqrt", var), b.scalar(node.attrs["epsilon"], var))
    return [finish(b, node, b.div(d, std))]


@lowering("LRN")
def _lrn(b: Builder, node: Node) -> list[Value]:
    a = widen(b, b.input(0))
    size = node.attrs["size"]
    shape = a.type.shape
    c = shape[1]
    sq = b.mul(a, a)
    # zero-pad the channel axis by (size-1)//2 before and size//2 after, then add the `size` windows;
    # a tap more than c-1 channels away only ever reads padding, so each pad is cut to c-1: at most
    # 2c-1 taps, whatever the size attribute says (the sum is the same: the taps left out add zeros)
    lo, hi = min((size - 1) // 2, c - 1), min(size // 2, c - 1)
    parts = []
    for pad in (lo, None, hi):
        if pad is None:
            parts.append(sq)
        elif pad:
            parts.append(full(b, 0, a, shape[:1] + (pad,) + shape[2:]))
    padded = b.concat(parts, 1)
    window = b.slice(padded, 1, 0, c)
    for off in range(1, lo + hi + 1):
        window = b.add(window, b.slice(padded, 1, off, c))
    attrs = node.attrs
    base = b.add(b.scalar(attrs["bias"], a), b.mul(b.scalar(attrs["alpha"] / size, a), window))
    denom = b.binary("Pow", base, b.scalar(attrs["beta"], a))
    return [finish(b, node, b.div(a, denom))]


# -- NegativeLogLikelihoodLoss --------------------------------------------------------------------------

@lowering("NegativeLogLikelihoodLoss")
def _nll(b: Builder, node: Node) -> list[Value]:
    x, target, weight = b.input(0), b.input(1), b.opt_input(2)
    a = widen(b, x)
    shape = a.type.shape
    n, c = shape[:2]
    d = math.prod(shape[2:])
    t = b.cast(target, ElemKind.INT64)
    counted: Value | None = None
    if node.attrs["has_ignore_index"]:
        counted = b.unary("Not", b.binary("Equal", t, b.scalar(node.attrs["ignore_index"], t)))
        t = b.where(counted, t, b.scalar(0, t))
    # Input[n, t, d...] read from the flattened input at n*C*D + t*D + d; a target outside [0, C)
    # reads past the end, so the Gather fails at run time as the kernel does
    base = (np.arange(n, dtype=np.int64)[:, None] * (c * d) + np.arange(d, dtype=np.int64)[None, :])
    flat_idx = b.add(b.const(base.reshape(t.type.shape)), b.mul(t, b.scalar(d, t)))
    valid = b.emit1("And", [b.binary("LessOrEqual", b.scalar(0, t), t), b.binary("Less", t, b.scalar(c, t))])
    flat_idx = b.where(valid, flat_idx, b.scalar(n * c * d, t))
    picked = b.emit1("Gather", [b.reshape(a, (n * c * d,)), flat_idx], axis=0)
    loss = b.unary("Neg", picked)
    w: Value | None = None
    if weight is not None:
        w = b.emit1("Gather", [b.cast(weight, a.type.elem), t], axis=0)
        if counted is not None:
            w = b.where(counted, w, b.scalar(0, w))
        loss = b.mul(loss, w)
    if counted is not None:
        loss = b.where(counted, loss, b.scalar(0, loss))
        if w is None:
            w = b.cast(counted, a.type.elem)
    reduction = node.attrs["reduction"]
    if reduction != "none":
        all_axes = tuple(range(t.type.rank))
        loss = b.reduce("ReduceSum", loss, all_axes, False)
        if reduction == "mean":
            total = b.reduce("ReduceSum", w, all_axes, False) if w is not None else b.scalar(n * d, loss)
            loss = b.div(loss, total)
    return [finish(b, node, loss)]
