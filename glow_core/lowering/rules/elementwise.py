"""Lowerings of element-wise activations and helpers onto arithmetic primitives."""

from __future__ import annotations

import math

from glow_core.ir.graph import Node, Value
from glow_core.ir.types import ElemKind
from glow_core.lowering.builder import Builder
from glow_core.lowering.table import lowering

_HALF = (ElemKind.FLOAT16, ElemKind.BFLOAT16)


def _arg(b: Builder, i: int = 0) -> Value:
    """Operand ``i``, widened to float32 for half-precision kinds (the kernels compute in float32)."""
    v = b.input(i)
    return b.cast(v, ElemKind.FLOAT32) if v.type.elem in _HALF else v


def _ret(b: Builder, y: Value) -> list[Value]:
    """The result, rounded once back to the node's element kind."""
    return [b.cast(y, b.out_type().elem)]


def _zero(b: Builder, x: Value) -> Value:
    return b.scalar(0, x)


def _one(b: Builder, x: Value) -> Value:
    return b.scalar(1, x)


def expm1(b: Builder, x: Value) -> Value:
    """``exp(x) - 1``, accurate near 0 as numpy's expm1 (the subtraction alone cancels every digit there:
    ``exp(3e-38) - 1`` is 0, and Celu's ``alpha * expm1(x / alpha)`` with alpha ``-1e38`` gave 0 for -3):
    ``x`` where ``exp(x)`` rounds to 1, Kahan's ``(u - 1) * x / log(u)`` with ``u = exp(x)`` for ``|x| < 1``,
    ``u - 1`` elsewhere (no cancellation there; the product ``(u - 1) * x`` could overflow)."""
    u = b.unary("Exp", x)
    d = b.sub(u, _one(b, x))
    kahan = b.div(b.mul(d, x), b.unary("Log", u))
    r = b.where(_less(b, b.unary("Abs", x), _one(b, x)), kahan, d)
    return b.where(b.binary("Equal", u, _one(b, x)), x, r)


def _less(b: Builder, x: Value, y: Value) -> Value:
    return b.binary("Less", x, y)


@lowering("Relu")
def _relu(b: Builder, node: Node) -> list[Value]:
    x = _arg(b)
    return _ret(b, b.maximum(x, _zero(b, x)))


@lowering("LeakyRelu")
def _leaky(b: Builder, node: Node) -> list[Value]:
    x = _arg(b)
    return _ret(b, b.where(_less(b, x, _zero(b, x)), b.mul(x, b.scalar(node.attrs["alpha"], x)), x))


@lowering("PRelu")
def _prelu(b: Builder, node: Node) -> list[Value]:
    x, slope = _arg(b, 0), _arg(b, 1)
    return _ret(b, b.where(_less(b, x, _zero(b, x)), b.mul(x, slope), x))


@lowering("Elu")
def _elu(b: Builder, node: Node) -> list[Value]:
    x = _arg(b)
    neg = b.mul(b.scalar(node.attrs["alpha"], x), expm1(b, x))
    return _ret(b, b.where(_less(b, x, _zero(b, x)), neg, x))  # the spec's "f(x) = x for x >= 0": 0 stays 0


@lowering("Selu")
def _selu(b: Builder, node: Node) -> list[Value]:
    x = _arg(b)
    a, g = node.attrs["alpha"], node.attrs["gamma"]
    # gamma * (alpha * expm1(x)), two roundings as the spec's formula: alpha * gamma folded into one constant
    # overflowed for a huge alpha (inf * 0 = NaN at x = 0, where the answer is 0)
    neg = b.mul(b.scalar(g, x), b.mul(b.scalar(a, x), expm1(b, x)))
    return _ret(b, b.where(_less(b, _zero(b, x), x), b.mul(x, b.scalar(g, x)), neg))


@lowering("Celu")
def _celu(b: Builder, node: Node) -> list[Value]:
    x = _arg(b)
    alpha = b.scalar(node.attrs["alpha"], x)
    neg = b.mul(alpha, expm1(b, b.div(x, alpha)))
    return _ret(b, b.add(b.maximum(x, _zero(b, x)), b.minimum(neg, _zero(b, x))))


@lowering("ThresholdedRelu")
def _trelu(b: Builder, node: Node) -> list[Value]:
    x = _arg(b)
    return _ret(b, b.where(_less(b, b.scalar(node.attrs["alpha"], x), x), x, _zero(b, x)))


@lowering("HardSigmoid")
def _hsig(b: Builder, node: Node) -> list[Value]:
    x = _arg(b)
    y = b.add(b.mul(x, b.scalar(node.attrs["alpha"], x)), b.scalar(node.attrs["beta"], x))
    return _ret(b, b.maximum(b.minimum(y, _one(b, x)), _zero(b, x)))


@lowering("HardSwish")
def _hswish(b: Builder, node: Node) -> list[Value]:
    x = _arg(b)
    y = b.div(b.add(x, b.scalar(3, x)), b.scalar(6, x))
    return _ret(b, b.mul(x, b.maximum(b.minimum(y, _one(b, x)), _zero(b, x))))


def _softplus(b: Builder, x: Value) -> Value:
    # log(1 + exp(x)) = max(x, 0) + log(1 + exp(-|x|)): no overflow for large x
    return b.add(b.maximum(x, _zero(b, x)),
                 b.unary("Log", b.add(_one(b, x), b.unary("Exp", b.unary("Neg", b.unary("Abs", x))))))


@lowering("Softplus")
def _softplus_rule(b: Builder, node: Node) -> list[Value]:
    return _ret(b, _softplus(b, b.input(0)))


@lowering("Softsign")
def _softsign(b: Builder, node: Node) -> list[Value]:
    x = _arg(b)
    return _ret(b, b.div(x, b.add(_one(b, x), b.unary("Abs", x))))


@lowering("Mish")
def _mish(b: Builder, node: Node) -> list[Value]:
    x = _arg(b)
    return _ret(b, b.mul(x, b.unary("Tanh", _softplus(b, x))))


@lowering("Swish")
def _swish(b: Builder, node: Node) -> list[Value]:
    x = _arg(b)
    return _ret(b, b.mul(x, b.unary("Sigmoid", b.mul(x, b.scalar(node.attrs["alpha"], x)))))


@lowering("Gelu")
def _gelu(b: Builder, node: Node) -> list[Value]:
    x = _arg(b)
    half = b.mul(x, b.scalar(0.5, x))
    if node.attrs["approximate"] == "tanh":
        inner = b.mul(b.add(x, b.mul(b.scalar(0.044715, x), b.mul(x, b.mul(x, x)))),
                      b.scalar(math.sqrt(2.0 / math.pi), x))
        return _ret(b, b.mul(half, b.add(_one(b, x), b.unary("Tanh", inner))))
    return _ret(b, b.mul(half, b.add(_one(b, x), b.unary("Erf", b.mul(x, b.scalar(1.0 / math.sqrt(2.0), x))))))


@lowering("Reciprocal")
def _recip(b: Builder, node: Node) -> list[Value]:
    x = _arg(b)
    return _ret(b, b.div(_one(b, x), x))


@lowering("Shrink")
def _shrink(b: Builder, node: Node) -> list[Value]:
    x = _arg(b)
    if not x.type.elem.is_float:
        x = b.cast(x, ElemKind.FLOAT64)  # integers: computed in float64, the final Cast truncates toward zero
    lam, bias = b.scalar(node.attrs["lambd"], x), b.scalar(node.attrs["bias"], x)
    # the spec's first case first: with a negative lambd both hold, and x < -lambd decides (x + bias)
    hi = b.where(_less(b, lam, x), b.sub(x, bias), _zero(b, x))
    return _ret(b, b.where(_less(b, x, b.unary("Neg", lam)), b.add(x, bias), hi))


@lowering("Clip")
def _clip(b: Builder, node: Node) -> list[Value]:
    x = _arg(b)
    y = x
    for i, op in ((1, b.maximum), (2, b.minimum)):
        bound = b.opt_input(i)
        if bound is None:
            continue
        bound = b.reshape(b.cast(bound, x.type.elem), (1,) * x.type.rank)
        clipped = op(y, bound)
        # a NaN bound does not clip
        y = b.where(b.unary("IsNaN", bound), y, clipped) if x.type.elem.is_float else clipped
    return _ret(b, y)
