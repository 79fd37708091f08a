"""Signal-processing kinds: DFT and STFT.

Complex tensors follow ONNX: a trailing axis of 2 holds (real, imaginary); a
trailing axis of 1 is a real signal. Every shape-deciding value is a
normalized attribute (the importer reads ONNX's ``dft_length``, ``axis`` and
``frame_step`` operands as compile-time constants).
"""

from __future__ import annotations

from glow_core.errors import GlowTypeError
from glow_core.ir.defs.common import Attrs, Types, check_elems, req
from glow_core.ir.kinds import AttrType as A
from glow_core.ir.kinds import Category as C
from glow_core.ir.kinds import attr, define_kind
from glow_core.ir.types import FLOAT_KINDS, TensorType


def dft_out_length(length: int, inverse: bool, onesided: bool) -> int:
    """Entries along the transformed axis: half the spectrum for a forward one-sided DFT."""
    return length // 2 + 1 if onesided and not inverse else length


def _dft_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    check_elems(x, FLOAT_KINDS, "DFT input")
    axis, length = int(attrs["axis"]), int(attrs["length"])
    inverse, onesided = bool(attrs["inverse"]), bool(attrs["onesided"])
    if x.rank < 2 or x.shape[-1] not in (1, 2):
        raise GlowTypeError(f"input {x} must be [..., 1] (real) or [..., 2] (complex)")
    if not 0 <= axis < x.rank - 1:
        raise GlowTypeError(f"axis {axis} must name a signal axis, in [0, {x.rank - 1})")
    if length < 1:
        raise GlowTypeError(f"length {length} must be positive")
    shape = list(x.shape)
    shape[axis] = dft_out_length(length, inverse, onesided)
    shape[-1] = 1 if inverse and onesided else 2
    return [x.with_shape(shape)]


define_kind("DFT", inputs=("Input",),
            attrs=(attr("axis", A.INT, doc="the transformed axis (not the last)"),
                   attr("length", A.INT, doc="DFT length: the axis is zero-padded or truncated to it"),
                   attr("inverse", A.INT, 0), attr("onesided", A.INT, 0)),
            infer=_dft_rule, categories=(C.LINEAR_ALGEBRA,), elems=FLOAT_KINDS,
            doc="ONNX DFT along axis: forward exp(-2 pi i jk/n); inverse exp(+2 pi i jk/n) / n; onesided forward "
                "keeps n//2+1 bins; onesided inverse is the real inverse of a half spectrum (result [..., 1]).")


def stft_frames(signal_length: int, frame_length: int, frame_step: int) -> int:
    return 1 + (signal_length - frame_length) // frame_step


def _stft_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x, w = req(types, 0), types[1]
    check_elems(x, FLOAT_KINDS, "STFT signal")
    step, fl = int(attrs["frame_step"]), int(attrs["frame_length"])
    if x.rank != 3 or x.shape[2] not in (1, 2):
        raise GlowTypeError(f"signal {x} must be [batch, length, 1 or 2]")
    if step < 1 or not 1 <= fl <= x.shape[1]:
        raise GlowTypeError(f"frame_step {step} must be >= 1 and frame_length {fl} in [1, {x.shape[1]}]")
    if w is not None and (w.shape != (fl,) or w.elem != x.elem):
        raise GlowTypeError(f"window {w} must be [{fl}] of {x.elem.value}")
    bins = dft_out_length(fl, False, bool(attrs["onesided"]))
    return [x.with_shape((x.shape[0], stft_frames(x.shape[1], fl, step), bins, 2))]


define_kind("STFT", inputs=("Signal", "Window?"),
            attrs=(attr("frame_step", A.INT), attr("frame_length", A.INT), attr("onesided", A.INT, 1)),
            infer=_stft_rule, categories=(C.LINEAR_ALGEBRA,), elems=FLOAT_KINDS,
            doc="Frames Signal[:, f*frame_step : f*frame_step+frame_length] (whole frames only), times Window, "
                "then a DFT of frame_length per frame (onesided: frame_length//2+1 bins).")
