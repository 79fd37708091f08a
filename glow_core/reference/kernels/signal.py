"""Signal-processing kernels: DFT and STFT (``glow_core.ir.defs.signal``), with numpy.fft."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from glow_core.ir.types import TensorType
from glow_core.reference.kernels import KERNELS

Attrs = Mapping[str, Any]
Types = Sequence[TensorType]


def as_complex(x: np.ndarray) -> np.ndarray:
    """[..., 1] (real) or [..., 2] (real, imaginary) -> complex [...]: complex128 for float64, else complex64.

    numpy (>= 2) transforms complex64 in single precision, as onnx.reference does: the ONNX node tests'
    expected values carry that rounding (an exact zero comes out as ~2e-7).
    """
    ctype = np.complex128 if x.dtype == np.float64 else np.complex64
    z = x[..., 0].astype(ctype)
    if x.shape[-1] == 2:
        z = z + 1j * x[..., 1].astype(ctype)
    return z.astype(ctype)


def transform(z: np.ndarray, axis: int, length: int, inverse: bool, onesided: bool) -> np.ndarray:
    """The DFT of complex ``z`` along ``axis`` as ONNX defines it (a real result for the onesided inverse).

    A NaN among the elements a transform reads makes every element of its output NaN, real and imaginary
    parts alike: each term of the spec's sum ``e^(-2 pi j k n / N) x[n]`` is a complex product, and ``0 * NaN``
    is NaN. numpy's FFT adds the zero frequency's parts without multiplying them (an imaginary part of 0 beside
    a NaN real part)."""
    read = length // 2 + 1 if inverse and onesided else length  # (irfft reads the first n // 2 + 1 elements)
    part = np.take(z, np.arange(min(read, z.shape[axis])), axis=axis)
    nan = np.isnan(part).any(axis=axis, keepdims=True)
    if inverse and onesided:
        y = np.fft.irfft(z, n=length, axis=axis)
    elif inverse:
        y = np.fft.ifft(z, n=length, axis=axis)
    else:
        y = np.fft.fft(z, n=length, axis=axis)
        if onesided:
            y = np.take(y, np.arange(length // 2 + 1), axis=axis)
    if nan.any():
        y = np.where(nan, np.array(complex(np.nan, np.nan) if np.iscomplexobj(y) else np.nan, y.dtype), y)
    return y


def as_pairs(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """complex [...] -> [..., 2]; real [...] -> [..., 1]."""
    if np.iscomplexobj(y):
        return np.stack([y.real, y.imag], axis=-1).astype(dtype)
    return y[..., None].astype(dtype)


@KERNELS.register("DFT")
def _dft(attrs: Attrs, out: Types, x: np.ndarray) -> np.ndarray:
    y = transform(as_complex(x), int(attrs["axis"]), int(attrs["length"]), bool(attrs["inverse"]),
                  bool(attrs["onesided"]))
    return as_pairs(y, out[0].dtype)


def frame_indices(frames: int, frame_length: int, frame_step: int) -> np.ndarray:
    """[frames, frame_length] positions in the signal of every frame's samples."""
    return np.arange(frames, dtype=np.int64)[:, None] * frame_step + np.arange(frame_length, dtype=np.int64)


@KERNELS.register("STFT")
def _stft(attrs: Attrs, out: Types, x: np.ndarray, window: np.ndarray | None) -> np.ndarray:
    fl, step = int(attrs["frame_length"]), int(attrs["frame_step"])
    frames = x[:, frame_indices(out[0].shape[1], fl, step), :]  # [batch, frames, fl, c]
    z = as_complex(frames)
    if window is not None:
        z = (z * window.astype(z.real.dtype)).astype(z.dtype)
    y = transform(z, 2, fl, False, bool(attrs["onesided"]))
    return as_pairs(y, out[0].dtype)
