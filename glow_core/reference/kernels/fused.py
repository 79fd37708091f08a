"""Kernels of the fused kinds (FusedConv, FusedMatMul, FusedLayerNorm, FusedAttention): the unfused
kernels run back to back.

Each step runs the kernel of the kind it replaces on the previous step's
result, so a fused node gives bit for bit what the separate nodes give.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from glow_core.ir.types import ElemKind, TensorType
from glow_core.reference.kernels import KERNELS

Attrs = Mapping[str, Any]
Types = Sequence[TensorType]


def _bound(value: float, dtype: np.dtype) -> np.ndarray | None:
    """A clip bound as a one-element array of ``dtype`` (None for an infinite, i.e. absent, bound)."""
    if math.isinf(value):
        return None
    return np.asarray(int(value) if dtype.kind in "iu" else value).astype(dtype)


def _none(attrs: Attrs, out: Types, y: np.ndarray) -> np.ndarray:
    return y


def _relu(attrs: Attrs, out: Types, y: np.ndarray) -> np.ndarray:
    return np.asarray(KERNELS["Relu"]({}, out, y))


def _clip(attrs: Attrs, out: Types, y: np.ndarray) -> np.ndarray:
    dt = out[0].dtype
    return np.asarray(KERNELS["Clip"]({}, out, y, _bound(attrs["clip_min"], dt), _bound(attrs["clip_max"], dt)))


def _hardswish(attrs: Attrs, out: Types, y: np.ndarray) -> np.ndarray:
    return np.asarray(KERNELS["HardSwish"]({}, out, y))


def _hardswish6(attrs: Attrs, out: Types, y: np.ndarray) -> np.ndarray:
    """``(y * min(max(y + 3, 0), 6)) / 6``: the Add, Clip, Mul and Div kernels in turn, in float32."""
    def c(v: float) -> np.ndarray:
        return np.asarray(v, np.float32)
    t = np.asarray(KERNELS["Add"]({}, out, y, c(3.0)))
    t = np.asarray(KERNELS["Clip"]({}, out, t, c(0.0), c(6.0)))
    t = np.asarray(KERNELS["Mul"]({}, out, y, t))
    return np.asarray(KERNELS["Div"]({}, out, t, c(6.0)))


#: activation name -> applies it to the unfused result
ACTIVATION_KERNELS: dict[str, Callable[[Attrs, Types, np.ndarray], np.ndarray]] = {
    "none": _none,
    "relu": _relu,
    "clip": _clip,
    "hardswish": _hardswish,
    "hardswish6": _hardswish6,
}


@KERNELS.register("FusedConv")
def _fused_conv(attrs: Attrs, out: Types, x: np.ndarray, w: np.ndarray, b: np.ndarray | None,
                r: np.ndarray | None = None) -> np.ndarray:
    y = np.asarray(KERNELS["Conv"](attrs, out, x, w, b))
    if r is not None:
        y = np.asarray(KERNELS["Add"]({}, out, y, r))
    return ACTIVATION_KERNELS[attrs["activation"]](attrs, out, y)


@KERNELS.register("FusedMatMul")
def _fused_matmul(attrs: Attrs, out: Types, a: np.ndarray, b: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    y = np.asarray(KERNELS["MatMul"]({}, out, a, b))
    if bias is not None:
        y = np.asarray(KERNELS["Add"]({}, out, y, bias))
    return ACTIVATION_KERNELS[attrs["activation"]](attrs, out, y)


@KERNELS.register("DequantMatMul")
def _dequant_matmul(attrs: Attrs, out: Types, a: np.ndarray, w: np.ndarray, scale: np.ndarray,
                    bias: np.ndarray | None) -> np.ndarray:
    wt = [TensorType(ElemKind.FLOAT32, w.shape)]
    wf = _run("Mul", wt, _run("Cast", wt, w, to=ElemKind.FLOAT32), scale)
    return _fused_matmul(attrs, out, a, wf, bias)


def _run(kind: str, out: Types, *args: np.ndarray | None, **attrs: Any) -> np.ndarray:
    return np.asarray(KERNELS[kind](attrs, out, *args))


@KERNELS.register("FusedLayerNorm")
def _fused_layernorm(attrs: Attrs, out: Types, x: np.ndarray, scale: np.ndarray,
                     bias: np.ndarray | None) -> np.ndarray:
    last = (x.ndim - 1,)
    kd = {"axes": last, "keepdims": 1}
    row = [TensorType(out[0].elem, out[0].shape[:-1] + (1,))]
    d = _run("Sub", out, x, _run("ReduceMean", row, x, **kd))
    var = _run("ReduceMean", row, _run("Mul", out, d, d), **kd)
    std = _run("Sqrt", row, _run("Add", row, var, np.asarray(attrs["epsilon"], dtype=x.dtype)))
    y = _run("Mul", out, _run("Div", out, d, std), scale)
    return _run("Add", out, y, bias) if bias is not None else y


@KERNELS.register("FusedAttention")
def _fused_attention(attrs: Attrs, out: Types, q: np.ndarray, kt: np.ndarray, v: np.ndarray,
                     mask: np.ndarray | None) -> np.ndarray:
    st = [TensorType(out[0].elem, q.shape[:-1] + (kt.shape[-1],))]
    s = _run("MatMul", st, q, kt)
    s = _run("Mul" if attrs["scale_op"] == "mul" else "Div", st, s, np.asarray(attrs["scale"], dtype=s.dtype))
    if mask is not None:
        s = _run("Add", st, s, mask)
    if attrs["masked_rows"] == "nan":
        return _run("MatMul", out, _run("Softmax", st, s, axes=(s.ndim - 1,)), v)
    # the Attention op's rule: a row whose scores (or whose mask) are all -inf gives zeros
    with np.errstate(invalid="ignore", divide="ignore"):
        top = np.max(s, axis=-1, keepdims=True)
        dead = np.isneginf(top)
        e = np.exp(s - np.where(dead, 0, top).astype(s.dtype))
        p = np.where(dead, 0, e / np.where(dead, 1, np.sum(e, axis=-1, keepdims=True))).astype(s.dtype)
        if mask is not None:
            p = np.where(np.isneginf(np.max(mask, axis=-1, keepdims=True) if mask.ndim else mask), 0, p)
    return _run("MatMul", out, p.astype(s.dtype), v)


@KERNELS.register("SymbolicValue")
def _symbolic_value(attrs: Attrs, out: Types) -> np.ndarray:
    """The values at the bounds (a run of a symbolic function rewrites ``values`` with its own sizes)."""
    return np.asarray(attrs["values"], dtype=np.float64).reshape(out[0].shape).astype(out[0].dtype)
