"""Kernels of the fused kinds (FusedConv, FusedMatMul): the unfused kernels run back to back.

Each step runs the kernel of the kind it replaces on the previous step's
result, so a fused node gives bit for bit what the separate nodes give.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from glow_core.ir.types import TensorType
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


#: activation name -> applies it to the unfused result
ACTIVATION_KERNELS: dict[str, Callable[[Attrs, Types, np.ndarray], np.ndarray]] = {
    "none": _none,
    "relu": _relu,
    "clip": _clip,
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
