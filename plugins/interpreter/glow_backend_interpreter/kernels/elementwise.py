"""Element-wise kernels."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from glow_backend_interpreter.kernels import KERNELS
from glow_core.ir.types import TensorType

Attrs = Mapping[str, Any]
Types = Sequence[TensorType]


@KERNELS.register("Add")
def _add(attrs: Attrs, out: Types, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.add(a, b, dtype=out[0].dtype)


@KERNELS.register("Relu")
def _relu(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.zeros((), x.dtype))
