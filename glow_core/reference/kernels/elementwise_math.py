"""Unary element-wise kernels: math functions, activations and predicates.

Float16 and bfloat16 inputs are computed in float32 and rounded back once;
float32 and float64 in their own precision, except Erf and Gelu (float64, then
rounded). Integer inputs (Abs, Neg, Sign, Relu, Shrink) keep their dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from glow_core.ir.types import TensorType
from glow_core.reference.kernels import KERNELS
from glow_core.reference.kernels.elementwise import is_float, widen

Attrs = Mapping[str, Any]
Types = Sequence[TensorType]
Unary = Callable[[np.ndarray, Attrs], np.ndarray]

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function in float64, within a few ulps (numpy has no erf).

    |x| <= 2: erf(x) = 2/sqrt(pi) * exp(-x^2) * sum_n (2x^2)^n x / (1*3*...*(2n+1)), a series of
    positive terms (no cancellation), summed until the terms stop counting;
    |x| > 2: erf(x) = 1 - erfc(x), erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...)))),
    the continued fraction evaluated backward from a fixed depth (80 terms: exact to double
    precision for x >= 2, and erfc(x) < 5e-3 there).
    """
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    out = np.empty_like(a)
    small = a <= 2.0
    xs = a[small]
    if xs.size:
        term = xs.copy()
        total = xs.copy()
        two_x2 = 2.0 * xs * xs
        for n in range(1, 200):
            term = term * two_x2 / (2 * n + 1)
            total += term
            if bool(np.all(term <= total * 1e-17)):
                break
        out[small] = _TWO_OVER_SQRT_PI * np.exp(-xs * xs) * total
    xl = a[~small]  # also NaN: the comparison above is false
    if xl.size:
        t = xl.copy()
        for k in range(80, 0, -1):
            t = xl + (k / 2.0) / t
        out[~small] = 1.0 - np.exp(-xl * xl) * _INV_SQRT_PI / t
    return np.copysign(out, x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))  # never overflows
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(np.zeros((), x.dtype), x)


def _scalar(v: float, like: np.ndarray) -> np.ndarray:
    """An attribute value in the computation dtype (so float32 math stays float32)."""
    return np.asarray(v, dtype=like.dtype if is_float(like.dtype) else np.float64)


def _leaky_relu(x: np.ndarray, a: Attrs) -> np.ndarray:
    return np.where(x >= 0, x, x * _scalar(a["alpha"], x))


def _elu(x: np.ndarray, a: Attrs) -> np.ndarray:
    return np.where(x < 0, _scalar(a["alpha"], x) * np.expm1(x), x)  # "f(x) = x for x >= 0" (an infinite alpha)


def _celu(x: np.ndarray, a: Attrs) -> np.ndarray:
    alpha = _scalar(a["alpha"], x)
    zero = np.zeros((), x.dtype)
    return np.maximum(zero, x) + np.minimum(zero, alpha * np.expm1(x / alpha))


def _selu(x: np.ndarray, a: Attrs) -> np.ndarray:
    alpha, gamma = _scalar(a["alpha"], x), _scalar(a["gamma"], x)
    return np.where(x > 0, gamma * x, gamma * (alpha * np.expm1(x)))


def _hard_sigmoid(x: np.ndarray, a: Attrs) -> np.ndarray:
    y = _scalar(a["alpha"], x) * x + _scalar(a["beta"], x)
    return np.minimum(np.maximum(y, np.zeros((), x.dtype)), np.ones((), x.dtype))


def _hard_swish(x: np.ndarray, a: Attrs) -> np.ndarray:
    y = (x + _scalar(3.0, x)) / _scalar(6.0, x)  # = x / 6 + 0.5, without the cancellation near -3
    return x * np.minimum(np.maximum(y, np.zeros((), x.dtype)), np.ones((), x.dtype))


def _thresholded_relu(x: np.ndarray, a: Attrs) -> np.ndarray:
    return np.where(x > _scalar(a["alpha"], x), x, np.zeros((), x.dtype))


def _gelu(x: np.ndarray, a: Attrs) -> np.ndarray:
    if a["approximate"] == "tanh":
        c = _scalar(math.sqrt(2.0 / math.pi), x)
        return _scalar(0.5, x) * x * (1 + np.tanh(c * (x + _scalar(0.044715, x) * x * x * x)))
    x64 = x.astype(np.float64)
    return 0.5 * x64 * (1.0 + erf(x64 / math.sqrt(2.0)))


def _shrink(x: np.ndarray, a: Attrs) -> np.ndarray:
    # integers: computed in float64, the caller's astype truncates toward zero (as a C cast)
    xf = x if is_float(x.dtype) else x.astype(np.float64)
    lambd, bias = _scalar(a["lambd"], xf), _scalar(a["bias"], xf)
    zero = np.zeros((), xf.dtype)
    return np.where(xf < -lambd, xf + bias, np.where(xf > lambd, xf - bias, zero))


def _is_inf(x: np.ndarray, a: Attrs) -> np.ndarray:
    pos = (x == np.inf) if a["detect_positive"] else np.zeros(x.shape, bool)
    neg = (x == -np.inf) if a["detect_negative"] else np.zeros(x.shape, bool)
    return pos | neg


def _plain(fn: Callable[[np.ndarray], np.ndarray]) -> Unary:
    return lambda x, a: fn(x)


_UNARY: dict[str, Unary] = {
    "Abs": _plain(np.abs),
    "Neg": _plain(np.negative),
    "Sign": _plain(np.sign),
    "Ceil": _plain(np.ceil),
    "Floor": _plain(np.floor),
    "Round": _plain(np.rint),  # halves to even
    "Sqrt": _plain(np.sqrt),
    "Reciprocal": _plain(np.reciprocal),
    "Exp": _plain(np.exp),
    "Log": _plain(np.log),
    "Erf": _plain(erf),
    "Sin": _plain(np.sin),
    "Cos": _plain(np.cos),
    "Tan": _plain(np.tan),
    "Asin": _plain(np.arcsin),
    "Acos": _plain(np.arccos),
    "Atan": _plain(np.arctan),
    "Sinh": _plain(np.sinh),
    "Cosh": _plain(np.cosh),
    "Asinh": _plain(np.arcsinh),
    "Acosh": _plain(np.arccosh),
    "Atanh": _plain(np.arctanh),
    "Tanh": _plain(np.tanh),
    "Sigmoid": _plain(_sigmoid),
    "Not": _plain(np.logical_not),
    "BitwiseNot": _plain(np.invert),
    "Relu": lambda x, a: np.maximum(x, np.zeros((), x.dtype)),
    "Softplus": _plain(_softplus),
    "Softsign": lambda x, a: x / (1 + np.abs(x)),
    "Mish": lambda x, a: x * np.tanh(_softplus(x)),
    "HardSwish": _hard_swish,
    "LeakyRelu": _leaky_relu,
    "Elu": _elu,
    "Celu": _celu,
    "Selu": _selu,
    "HardSigmoid": _hard_sigmoid,
    "ThresholdedRelu": _thresholded_relu,
    "Swish": lambda x, a: x * _sigmoid(_scalar(a["alpha"], x) * x),
    "Gelu": _gelu,
    "Shrink": _shrink,
    "IsNaN": _plain(np.isnan),
    "IsInf": _is_inf,
}


def _unary_kernel(fn: Unary) -> Callable[..., np.ndarray]:
    def kernel(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
        return np.asarray(fn(widen(x), attrs)).astype(out[0].dtype, copy=False)

    return kernel


for _kind, _fn in _UNARY.items():
    KERNELS.add(_kind, _unary_kernel(_fn))
