"""Lowerings of the signal kinds (``glow_core.ir.defs.signal``) onto MatMul, Gather and data movement.

A DFT of fixed length along one axis is a linear map of the input's real and
imaginary parts; its matrices are compile-time constants, computed by applying
the reference transform (``kernels/signal.py``) to unit impulses, so the lowered
graph has exactly the reference's semantics (zero padding, truncation, one-sided
halves, the real inverse). STFT becomes a Gather of the frames, the window
product and a DFT, which lowers in turn.
"""

from __future__ import annotations

import numpy as np

from glow_core import budget
from glow_core.ir.graph import Node, Value
from glow_core.ir.types import ElemKind
from glow_core.lowering.builder import Builder
from glow_core.lowering.table import lowering
from glow_core.reference.kernels.signal import frame_indices, transform


def dft_matrices(n_in: int, length: int, inverse: bool, onesided: bool) -> tuple[np.ndarray, np.ndarray]:
    """(response to real impulses, response to imaginary impulses): complex [n_in, n_out] each."""
    eye = np.eye(n_in, dtype=np.complex128)
    return (transform(eye, 1, length, inverse, onesided),
            transform(1j * eye, 1, length, inverse, onesided))


def _part(b: Builder, x: Value, i: int) -> Value:
    """x[..., i] (x is [..., c])."""
    s = b.slice(x, x.type.rank - 1, i, 1)
    return b.reshape(s, x.type.shape[:-1])


@lowering("DFT")
def _dft(b: Builder, node: Node) -> list[Value]:
    x = b.input(0)
    axis, length = int(b.attrs["axis"]), int(b.attrs["length"])
    inverse, onesided = bool(b.attrs["inverse"]), bool(b.attrs["onesided"])
    out = b.out_type()
    n_in = x.type.shape[axis]
    n_out = out.shape[axis]
    budget.current().check_tensor((4, n_in, n_out), 8, node.where(), "DFT matrices")
    m_re, m_im = dft_matrices(n_in, length, inverse, onesided)
    work = ElemKind.FLOAT64  # sums of n products: float64 keeps the result within an ulp of the exact DFT
    xc = b.cast(x, work)
    rank = x.type.rank - 1  # without the (real, imaginary) axis
    perm = [d for d in range(rank) if d != axis] + [axis]
    back = list(np.argsort(perm))
    parts = [b.transpose(_part(b, xc, i), perm) for i in range(x.type.shape[-1])]
    results = []
    for comp in ("real", "imag")[: out.shape[-1]]:
        acc = None
        for part, m in zip(parts, (m_re, m_im)):
            mat = getattr(m, comp)
            if not mat.any():
                continue
            term = b.emit1("MatMul", [part, b.const(mat, work)])
            acc = term if acc is None else b.add(acc, term)
        if acc is None:  # an all-zero response (e.g. the imaginary part of a length-1 real inverse)
            shape = tuple(parts[0].type.shape[:-1]) + (n_out,)
            acc = b.broadcast(b.scalar(0, work, len(shape)), shape)
        y = b.transpose(acc, back)
        results.append(b.reshape(y, y.type.shape + (1,)))
    return [b.cast(b.concat(results, rank), out.elem)]


@lowering("STFT")
def _stft(b: Builder, node: Node) -> list[Value]:
    x, window = b.input(0), b.opt_input(1)
    fl, step, onesided = int(b.attrs["frame_length"]), int(b.attrs["frame_step"]), int(b.attrs["onesided"])
    frames = b.out_type().shape[1]
    idx = b.const(frame_indices(frames, fl, step))
    framed = b.emit1("Gather", [x, idx], axis=1)  # [batch, frames, fl, c]
    if window is not None:
        framed = b.mul(framed, b.reshape(window, (1, 1, fl, 1)))
    return [b.emit1("DFT", [framed], axis=2, length=fl, inverse=0, onesided=onesided)]
