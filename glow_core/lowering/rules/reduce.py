"""Lowerings of the reduction, scan and softmax kinds onto primitives.

In: ReduceMean, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp,
ReduceSumSquare, CumSum, CumProd, Softmax, LogSoftmax, Hardmax. Out: the
primitive reductions (ReduceSum, ReduceMax, ArgMax), element-wise arithmetic,
Cast and data movement (Slice, Concat, Broadcast, Reshape, Transpose).

Every rule follows the interpreter kernel (``kernels/reduce.py``): float16 and
bfloat16 are cast to float32 first and the result rounded back once at the
end; integers compute in their own type (wrapping), which makes the integer
scans exact whatever the order of the partial sums/products.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from glow_core.ir.defs.reduce import reduced_shape
from glow_core.ir.graph import Node, Value
from glow_core.ir.types import ElemKind
from glow_core.lowering.builder import Builder
from glow_core.lowering.table import lowering

#: element kinds the kernels compute in float32
NARROW_FLOATS = frozenset({ElemKind.FLOAT16, ElemKind.BFLOAT16})


# -- helpers shared with the normalization rules ----------------------------------------------------

def compute_elem(elem: ElemKind) -> ElemKind:
    """The element kind a kernel computes in: float32 for the 16-bit floats, else the kind itself."""
    return ElemKind.FLOAT32 if elem in NARROW_FLOATS else elem


def widen(b: Builder, x: Value) -> Value:
    """``x`` cast to its compute kind (no node when it already is)."""
    return b.cast(x, compute_elem(x.type.elem))


def count(shape: Sequence[int], axes: Sequence[int]) -> int:
    """Number of elements one reduction over ``axes`` combines."""
    return math.prod(shape[a] for a in axes)


def full(b: Builder, value: float, like: Value | ElemKind, shape: Sequence[int]) -> Value:
    """A tensor of ``shape`` filled with ``value`` (a one-element constant broadcast)."""
    return b.broadcast(b.scalar(value, like, len(shape)), shape)


def squeeze(b: Builder, x: Value, axes: Sequence[int], keepdims: bool) -> Value:
    """Drop the (size-1) reduced ``axes`` of a keepdims result unless ``keepdims``."""
    return x if keepdims else b.reshape(x, reduced_shape(x.type.shape, axes, False))


def mean(b: Builder, x: Value, axes: Sequence[int], keepdims: bool = True) -> Value:
    """Float mean over ``axes``: sum / count (NaN over an empty set, as 0 / 0)."""
    s = b.reduce("ReduceSum", x, axes, keepdims)
    n = count(x.type.shape, axes)
    return s if n == 1 else b.div(s, b.scalar(n, s))


def finish(b: Builder, node: Node, y: Value, i: int = 0) -> Value:
    """Round a result computed in the compute kind back to the node's result kind."""
    return b.cast(y, b.out_type(i).elem)


# -- reductions ------------------------------------------------------------------------------------

Reducer = Callable[[Builder, Value, tuple[int, ...], bool], Value]


def _int_mean(b: Builder, x: Value, axes: tuple[int, ...], kd: bool) -> Value:
    s = b.reduce("ReduceSum", x, axes, kd)  # wraps in the integer kind, as the kernel
    n = count(x.type.shape, axes)
    if n <= 1:
        return s  # one element: itself; an empty set: the sum, 0 (the kernel's integer mean of nothing)
    elem = x.type.elem
    if n <= np.iinfo(elem.dtype).max:
        return b.div(s, b.scalar(n, s))  # integer Div truncates toward zero
    # a count the kind cannot hold (e.g. 200 int8 elements): divide the wrapped sum in 64 bits
    wide = ElemKind.UINT64 if elem.dtype.kind == "u" else ElemKind.INT64
    return b.cast(b.div(b.cast(s, wide), b.scalar(n, wide)), elem)


def _mean(b: Builder, x: Value, axes: tuple[int, ...], kd: bool) -> Value:
    return mean(b, x, axes, kd) if x.type.elem.is_float else _int_mean(b, x, axes, kd)


def _l1(b: Builder, x: Value, axes: tuple[int, ...], kd: bool) -> Value:
    return b.reduce("ReduceSum", b.unary("Abs", x), axes, kd)


def _sum_square(b: Builder, x: Value, axes: tuple[int, ...], kd: bool) -> Value:
    return b.reduce("ReduceSum", b.mul(x, x), axes, kd)


def _l2(b: Builder, x: Value, axes: tuple[int, ...], kd: bool) -> Value:
    s = _sum_square(b, x, axes, kd)
    if x.type.elem.is_float:
        return b.unary("Sqrt", s)
    # integers: the root of the (wrapped) sum in float64, truncated by the final Cast
    return b.unary("Sqrt", b.cast(s, ElemKind.FLOAT64))


def _log_sum(b: Builder, x: Value, axes: tuple[int, ...], kd: bool) -> Value:
    return b.unary("Log", b.reduce("ReduceSum", x, axes, kd))


def _log_sum_exp(b: Builder, x: Value, axes: tuple[int, ...], kd: bool) -> Value:
    # log(sum(exp(x - m))) + m with m the max, or 0 where the max is not finite (all -inf, +inf, NaN)
    m = b.reduce("ReduceMax", x, axes, True)
    finite = b.unary("Not", b.emit1("Or", [b.unary("IsNaN", m), b.unary("IsInf", m)]))
    m = b.where(finite, m, b.scalar(0, m))
    e = b.unary("Exp", b.sub(x, m))
    r = b.add(b.unary("Log", b.reduce("ReduceSum", e, axes, True)), m)
    return squeeze(b, r, axes, kd)


#: kind -> reduction over (input in its compute kind, axes, keepdims), result in the compute kind
REDUCERS: dict[str, Reducer] = {
    "ReduceMean": _mean,
    "ReduceL1": _l1,
    "ReduceL2": _l2,
    "ReduceLogSum": _log_sum,
    "ReduceLogSumExp": _log_sum_exp,
    "ReduceSumSquare": _sum_square,
}


@lowering(*REDUCERS)
def _reduction(b: Builder, node: Node) -> list[Value]:
    fn = REDUCERS[node.kind.name]
    y = fn(b, widen(b, b.input(0)), tuple(node.attrs["axes"]), bool(node.attrs["keepdims"]))
    return [finish(b, node, y)]


# -- CumSum / CumProd: a log-step (Hillis-Steele) scan ------------------------------------------------

def _shift(b: Builder, x: Value, axis: int, by: int, reverse: bool, identity: int) -> Value:
    """``x`` moved ``by`` places along ``axis`` (toward the end, or the start when ``reverse``),
    the vacated places filled with ``identity``."""
    n = x.type.shape[axis]
    by = min(by, n)
    fill_shape = list(x.type.shape)
    fill_shape[axis] = by
    fill = full(b, identity, x, fill_shape)
    if by == n:
        return fill
    if reverse:
        return b.concat([b.slice(x, axis, by, n - by), fill], axis)
    return b.concat([fill, b.slice(x, axis, 0, n - by)], axis)


def _scan_rule(op: str, identity: int) -> Callable[[Builder, Node], list[Value]]:
    def rule(b: Builder, node: Node) -> list[Value]:
        axis, reverse = node.attrs["axis"], bool(node.attrs["reverse"])
        x = widen(b, b.input(0))
        n = x.type.shape[axis]
        if n and node.attrs["exclusive"]:
            x = _shift(b, x, axis, 1, reverse, identity)  # exclusive scan = inclusive scan of the shifted input
        step = 1
        while step < n:  # after the step of size s, element i combines the 2s elements ending at i
            x = b.binary(op, x, _shift(b, x, axis, step, reverse, identity))
            step *= 2
        return [finish(b, node, x)]

    return rule


lowering("CumSum")(_scan_rule("Add", 0))
lowering("CumProd")(_scan_rule("Mul", 1))


# -- softmax family ---------------------------------------------------------------------------------

def _shifted(b: Builder, x: Value, axes: Sequence[int]) -> Value:
    """x - max(x) over axes (numerically stable exponentials)."""
    return b.sub(x, b.reduce("ReduceMax", x, axes, True))


@lowering("Softmax")
def _softmax(b: Builder, node: Node) -> list[Value]:
    axes = tuple(node.attrs["axes"])
    e = b.unary("Exp", _shifted(b, widen(b, b.input(0)), axes))
    return [finish(b, node, b.div(e, b.reduce("ReduceSum", e, axes, True)))]


@lowering("LogSoftmax")
def _log_softmax(b: Builder, node: Node) -> list[Value]:
    axes = tuple(node.attrs["axes"])
    s = _shifted(b, widen(b, b.input(0)), axes)
    lse = b.unary("Log", b.reduce("ReduceSum", b.unary("Exp", s), axes, True))
    return [finish(b, node, b.sub(s, lse))]


@lowering("Hardmax")
def _hardmax(b: Builder, node: Node) -> list[Value]:
    x = b.input(0)
    elem, shape = x.type.elem, x.type.shape
    axes = tuple(node.attrs["axes"])
    k = count(shape, axes)
    if x.type.size == 0 or k == 1:
        # nothing to pick from, or one candidate per row: all zeros / all ones
        return [full(b, 1 if x.type.size else 0, elem, shape)]
    rest = tuple(a for a in range(len(shape)) if a not in axes)
    perm = rest + axes
    moved = b.transpose(x, perm)
    outer = tuple(shape[a] for a in rest)
    flat = b.reshape(moved, outer + (k,))
    # the first maximum in row-major order over the axes (NaN counts as the maximum, as np.argmax)
    first = b.emit1("ArgMax", [flat], axis=len(outer), keepdims=True, select_last_index=False)
    hot = b.emit1("Equal", [first, b.const(np.arange(k, dtype=np.int64))])
    y = b.reshape(b.cast(hot, elem), moved.type.shape)
    return [b.transpose(y, tuple(int(i) for i in np.argsort(perm)))]
