"""Import rules of the signal operators: DFT (opsets 17 and 20), STFT, MelWeightMatrix.

``dft_length``, DFT's ``axis`` (an operand since opset 20), STFT's
``frame_step`` / ``frame_length`` and every MelWeightMatrix operand decide
shapes: they are read as compile-time constants (a model input there is bound
by ``glow_core.onnx_backend``). MelWeightMatrix becomes a constant.
"""

from __future__ import annotations

import numpy as np

from glow_core.errors import GlowTypeError, ModelError
from glow_core.importer.context import NodeContext, import_rule, onnx_elem
from glow_core.ir.defs.signal import dft_out_length
from glow_core.ir.graph import Value
from glow_core.ir.types import ElemKind


def _scalar(ctx: NodeContext, i: int, what: str, default: int | None = None) -> int | None:
    v = ctx.const(i, what)
    if v is None:
        return default
    arr = np.asarray(v)
    if arr.size != 1 or arr.dtype.kind not in "iu":
        raise GlowTypeError(f"{ctx.where()}: {what} must be one integer, got {arr.dtype}{list(arr.shape)}")
    return int(arr.reshape(-1)[0])


def _reserve_matrices(ctx: NodeContext, n_in: int, n_out: int) -> None:
    """The lowering's constant matrices (4 of n_in x n_out) count against the memory budget."""
    ctx.reserve((4, n_in, n_out), ElemKind.FLOAT64, "DFT matrices")


@import_rule("DFT")
def _dft(ctx: NodeContext) -> list[Value]:
    x = ctx.req(0)
    rank = x.type.rank
    inverse, onesided = int(ctx.attr("inverse", 0)), int(ctx.attr("onesided", 0))
    if ctx.opset >= 20:
        ctx.check_attrs(["inverse", "onesided"])
        axis = _scalar(ctx, 2, "axis", -2)
    else:
        ctx.check_attrs(["axis", "inverse", "onesided"])
        axis = int(ctx.attr("axis", 1))
    assert axis is not None
    if rank < 2 or x.shape[-1] not in (1, 2):
        raise GlowTypeError(f"{ctx.where()}: input {x.type} must be [..., 1] (real) or [..., 2] (complex)")
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        raise ModelError(f"{ctx.where()}: axis {axis} must name a signal axis: in [{-rank}, -2] or [0, {rank - 2}]")
    axis %= rank
    n = x.shape[axis]
    default = 2 * (n - 1) if inverse and onesided else n
    length = _scalar(ctx, 1, "dft_length", default)
    assert length is not None
    if length < 1:
        raise ModelError(f"{ctx.where()}: dft_length {length} must be positive")
    n_out = dft_out_length(length, bool(inverse), bool(onesided))
    ctx.importer.budget.check_tensor(x.shape[:axis] + (n_out,) + x.shape[axis + 1:], x.type.elem.itemsize * 2,
                                     ctx.where(), "result")
    _reserve_matrices(ctx, n, n_out)
    return ctx.emit("DFT", [x], {"axis": axis, "length": length, "inverse": inverse, "onesided": onesided})


@import_rule("STFT")
def _stft(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["onesided"])
    x = ctx.req(0)
    if x.type.rank != 3 or x.shape[2] not in (1, 2):
        raise GlowTypeError(f"{ctx.where()}: signal {x.type} must be [batch, length, 1 or 2]")
    step = _scalar(ctx, 1, "frame_step")
    window = ctx.input(2)
    if window is not None and window.type.rank != 1:
        raise GlowTypeError(f"{ctx.where()}: window {window.type} must be 1-D (of frame_length); got rank "
                            f"{window.type.rank}")
    fl = _scalar(ctx, 3, "frame_length", window.shape[0] if window is not None else x.shape[1])
    assert step is not None and fl is not None
    if step < 1:
        raise ModelError(f"{ctx.where()}: frame_step {step} must be positive")
    if not 1 <= fl <= x.shape[1]:
        raise ModelError(f"{ctx.where()}: frame_length {fl} must be in [1, {x.shape[1]}] (the signal length)")
    if window is not None and window.shape != (fl,):
        raise GlowTypeError(f"{ctx.where()}: window {window.type} must be 1-D of frame_length {fl}")
    onesided = int(ctx.attr("onesided", 1))
    _reserve_matrices(ctx, fl, dft_out_length(fl, False, bool(onesided)))
    return ctx.emit("STFT", [x, window], {"frame_step": step, "frame_length": fl, "onesided": onesided})


def mel_weight_matrix(bins: int, dft_length: int, rate: int, lower: float, upper: float) -> np.ndarray:
    """[dft_length // 2 + 1, bins] triangular filters as onnx.reference computes them.

    The reference (which decides over the prose) spaces the bins + 2 mel points by (high - low) / (bins + 2)
    and floors the edges to integer spectrum bins; a filter whose rising edge is empty is 1 at its center.
    """
    spectrum = dft_length // 2 + 1
    low = 2595.0 * np.log1p(lower / 700.0) / np.log(10.0)
    high = 2595.0 * np.log1p(upper / 700.0) / np.log(10.0)
    points = np.arange(bins + 2) * ((high - low) / (bins + 2)) + low
    hz = 700.0 * np.expm1(points / 2595.0 * np.log(10.0))
    edges = (((dft_length + 1) * hz) // rate).astype(np.int64)
    if edges.min() < 0 or edges.max() >= spectrum:
        raise ValueError(f"mel filter edges {edges.min()}..{edges.max()} fall outside the {spectrum} spectrum bins")
    out = np.zeros((spectrum, bins), np.float64)
    for i in range(bins):
        lo, center, hi = (int(e) for e in edges[i:i + 3])
        if center == lo:
            out[center, i] = 1.0
        else:
            out[lo:center + 1, i] = (np.arange(lo, center + 1) - lo) / (center - lo)
        if hi > center:
            out[center:hi, i] = (hi - np.arange(center, hi)) / (hi - center)
    return out


@import_rule("MelWeightMatrix")
def _mel_weight_matrix(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["output_datatype"])
    bins, dft_length, rate = (_scalar(ctx, i, w) for i, w in enumerate(("num_mel_bins", "dft_length", "sample_rate")))
    lo_hi = [ctx.const(i, w) for i, w in ((3, "lower_edge_hertz"), (4, "upper_edge_hertz"))]
    if any(v is None for v in (bins, dft_length, rate, *lo_hi)):
        raise GlowTypeError(f"{ctx.where()}: all five operands are required")
    assert bins is not None and dft_length is not None and rate is not None
    lower, upper = (float(np.asarray(v).reshape(-1)[0]) for v in lo_hi)
    if bins < 1 or dft_length < 1 or rate < 1 or not 0 <= lower < upper <= rate / 2:
        raise ModelError(f"{ctx.where()}: need num_mel_bins, dft_length, sample_rate >= 1 and "
                         f"0 <= lower_edge_hertz < upper_edge_hertz <= sample_rate / 2; got {bins}, {dft_length}, "
                         f"{rate}, {lower}, {upper}")
    elem = onnx_elem(int(ctx.attr("output_datatype", 1)), ctx.where())
    ctx.reserve((dft_length // 2 + 1, bins), elem, "mel weight matrix")
    try:
        weights = mel_weight_matrix(bins, dft_length, rate, lower, upper)
    except ValueError as e:
        raise ModelError(f"{ctx.where()}: {e}", hint="lower upper_edge_hertz or raise dft_length") from None
    return [ctx.constant(weights.astype(elem.dtype))]
