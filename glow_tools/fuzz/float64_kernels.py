"""Float64 kernels for the float64 rule, for ops whose ``onnx.reference`` kernel computes in float32
whatever its input type (so widening the model would evaluate them in float32 again), or cannot take
float64 at all.

:class:`MeanVarianceNormalization` is its function body with the constants in the input's type (the
schema's body adds a float32 epsilon, which the reference refuses beside a float64 tensor).

:class:`LinearAttention` runs the op's recurrence in float64, with its state
tensor (an output of the op, of the inputs' type) held to the float32 range
after every update: a state element whose exact value is past ``FLOAT32_MAX``
is the infinity, as in any float32 evaluation, while products and sums are
exact. An element of the state that is not past the range is kept exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx.reference.op_run import OpRun

FLOAT32_MAX = float(np.finfo(np.float32).max)


def _heads(x: np.ndarray, heads: int) -> np.ndarray:
    """[B, T, H * D] -> [B, H, T, D] in float64."""
    b, t, hd = x.shape
    return x.astype(np.float64).reshape(b, t, heads, hd // heads).transpose(0, 2, 1, 3)


def _in_float32_range(state: np.ndarray) -> np.ndarray:
    """``state`` with the elements past the float32 range replaced by the infinity of their sign."""
    return np.where(np.abs(state) > FLOAT32_MAX, np.copysign(np.inf, state), state)


class LinearAttention(OpRun):
    """LinearAttention's recurrence in float64 (float64 inputs only; the state held to the float32 range)."""

    op_domain = ""

    def _run(self, query: np.ndarray, key: np.ndarray, value: np.ndarray, past_state: np.ndarray | None = None,
             decay: np.ndarray | None = None, beta: np.ndarray | None = None, **attrs: Any) -> tuple[np.ndarray, ...]:
        if query.dtype != np.float64 or query.ndim != 3:
            raise NotImplementedError("the float64 LinearAttention takes rank-3 float64 inputs only")
        hq, hkv = int(attrs["q_num_heads"]), int(attrs["kv_num_heads"])
        rule = attrs.get("update_rule") or "gated_delta"
        q, k, v = _heads(query, hq), _heads(key, hkv), _heads(value, hkv)
        b, _, t, d_k = q.shape
        d_v = v.shape[-1]
        state = np.zeros((b, hkv, d_k, d_v)) if past_state is None else past_state.astype(np.float64)
        scale = float(attrs.get("scale") or 0.0) or 1.0 / np.sqrt(d_k)
        g = None if decay is None else decay.astype(np.float64).reshape(b, t, hkv, -1).transpose(0, 2, 1, 3)
        be = None if beta is None else beta.astype(np.float64).reshape(b, t, beta.shape[-1], 1).transpose(0, 2, 1, 3)
        out = np.zeros((b, hq, t, d_v))
        for i in range(t):
            if rule in ("gated", "gated_delta") and g is not None:
                state = state * np.exp(g[:, :, i, :])[..., None]
            vi = v[:, :, i, :]
            if rule in ("delta", "gated_delta") and be is not None:
                vi = be[:, :, i, :] * (vi - np.einsum("bhdm,bhd->bhm", state, k[:, :, i, :]))
            state = _in_float32_range(state + k[:, :, i, :, None] * vi[..., None, :])
            read = np.repeat(state, hq // hkv, axis=1)
            out[:, :, i, :] = scale * np.einsum("bhd,bhdm->bhm", q[:, :, i, :], read)
        return out.transpose(0, 2, 1, 3).reshape(b, t, hq * d_v), state


class MeanVarianceNormalization(OpRun):
    """The op's function body with its constants in the input's type. The schema's body adds a float32
    ``Epsilon`` constant to the standard deviation, an ``Add`` of two types for a float64 input, which the
    reference refuses; here every step is the body's (``ReduceMean``, ``Pow`` by 2, ``Sub``, ``Sqrt``, ``Add``,
    ``Div``), in float64, with the float32 constants widened exactly."""

    op_domain = ""

    def _run(self, x: np.ndarray, axes: Any = None) -> tuple[np.ndarray]:
        if x.dtype != np.float64:
            raise NotImplementedError("the float64 MeanVarianceNormalization takes float64 inputs only")
        ax = tuple(int(a) for a in axes) if axes is not None else (0, 2, 3)
        mean = np.mean(x, axis=ax, keepdims=True)
        variance = np.mean(np.power(x, 2.0), axis=ax, keepdims=True) - np.power(mean, 2.0)
        return ((x - mean) / (np.sqrt(variance) + float(np.float32(1e-9))),)


#: the kernels the float64 evaluation adds to ``new_ops``
FLOAT64_KERNELS: list[type[OpRun]] = [LinearAttention, MeanVarianceNormalization]
