"""Per-channel ranges of weights: constants read as the filter / right-hand side of linear kinds.

:data:`WEIGHT_OPERANDS` says, per node kind, which operand is the weight and
which of its axes is the output channel. Weights are constants, so their ranges
are exact (min/max per channel; no profile needed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from glow_core.ir.graph import Constant, Function
from glow_core.quantization.calibration import QuantParams, params_for_range
from glow_core.quantization.config import QuantizationConfig

ChannelAxis = Callable[[Mapping[str, Any], int], int]

#: kind -> (weight operand index, output-channel axis from (attrs, weight rank))
WEIGHT_OPERANDS: Mapping[str, tuple[int, ChannelAxis]] = {
    "Conv": (1, lambda attrs, rank: 0),  # Filter [M, C/group, k...]
    "FusedConv": (1, lambda attrs, rank: 0),
    "ConvTranspose": (1, lambda attrs, rank: 1),  # Filter [C, M/group, k...]
    "MatMul": (1, lambda attrs, rank: rank - 1),  # RHS [..., K, N]
    "FusedMatMul": (1, lambda attrs, rank: rank - 1),
    "Gemm": (1, lambda attrs, rank: 0 if attrs.get("trans_b") else 1),  # B [K, N] or [N, K]
}


@dataclass(frozen=True)
class ChannelRanges:
    """Min and max of a weight per output channel along ``axis``; ``users`` are the reading nodes."""

    name: str
    axis: int
    mins: np.ndarray
    maxs: np.ndarray
    users: tuple[str, ...]


@dataclass(frozen=True)
class ChannelParams:
    """One :class:`QuantParams` per output channel of a weight."""

    name: str
    axis: int
    channels: tuple[QuantParams, ...]

    @property
    def scales(self) -> np.ndarray:
        return np.array([c.scale for c in self.channels], np.float32)

    @property
    def offsets(self) -> np.ndarray:
        return np.array([c.offset for c in self.channels], np.int32)


def channel_ranges(weight: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (mins, maxs) of ``weight`` along ``axis``."""
    w = np.moveaxis(np.asarray(weight, np.float64), axis, 0).reshape(weight.shape[axis], -1)
    if w.shape[1] == 0:
        return np.zeros(w.shape[0]), np.zeros(w.shape[0])
    return w.min(axis=1), w.max(axis=1)


def weight_channel_ranges(function: Function) -> dict[str, ChannelRanges]:
    """Per-channel ranges of every float constant that a kind of :data:`WEIGHT_OPERANDS` reads as its weight."""
    found: dict[str, ChannelRanges] = {}
    for node in function.nodes:
        entry = WEIGHT_OPERANDS.get(node.kind.name)
        if entry is None:
            continue
        index, axis_of = entry
        w = node.inputs[index] if index < len(node.inputs) else None
        if not isinstance(w, Constant) or not w.type.elem.is_float or w.payload.ndim == 0:
            continue
        axis = axis_of(node.attrs, w.payload.ndim)
        prev = found.get(w.name)
        if prev is not None:
            if prev.axis == axis:
                found[w.name] = ChannelRanges(w.name, axis, prev.mins, prev.maxs, prev.users + (node.name,))
            continue  # (a weight read along two different axes keeps the first reading)
        mins, maxs = channel_ranges(w.payload, axis)
        found[w.name] = ChannelRanges(w.name, axis, mins, maxs, (node.name,))
    return found


def channel_params(ranges: ChannelRanges, cfg: QuantizationConfig) -> ChannelParams:
    """Parameters per output channel (``cfg.per_channel``) or one set repeated for the whole tensor."""
    if cfg.per_channel:
        chans = tuple(params_for_range(float(lo), float(hi), cfg) for lo, hi in zip(ranges.mins, ranges.maxs))
    else:
        one = params_for_range(float(ranges.mins.min()), float(ranges.maxs.max()), cfg)
        chans = (one,) * len(ranges.mins)
    return ChannelParams(ranges.name, ranges.axis, chans)
