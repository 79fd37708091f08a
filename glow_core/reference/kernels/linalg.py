"""Linear-algebra kernels beyond MatMul/Gemm: Det (``glow_core.ir.defs.linalg``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from glow_core.ir.types import TensorType
from glow_core.reference.kernels import KERNELS


@KERNELS.register("Det")
def _det(attrs: Mapping[str, Any], out: Sequence[TensorType], x: np.ndarray) -> np.ndarray:
    """LU determinant in float64, rounded once to the result kind."""
    if x.shape[-1] == 0:
        return np.ones(out[0].shape, out[0].dtype)
    return np.asarray(np.linalg.det(x.astype(np.float64))).astype(out[0].dtype)
