"""Generators of the signal and linear-algebra kinds: DFT, STFT (``ir/defs/signal.py``), Det (``ir/defs/linalg.py``)."""

from __future__ import annotations

import numpy as np

from glow_conformance.gen import Build, Variant, generator
from glow_conformance.gen.common import FLOATS, arr
from glow_core.ir.types import ElemKind


@generator("DFT", elems=FLOATS)
def _dft(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(shape: tuple[int, ...], axis: int, length: int, inverse: int, onesided: int) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            return Variant([arr(elem, shape, rng)],
                           {"axis": axis, "length": length, "inverse": inverse, "onesided": onesided})

        return b

    return {"complex": build((2, 8, 2), 1, 8, 0, 0), "real-padded": build((2, 6, 1), 1, 9, 0, 0),
            "onesided": build((3, 7, 1), 1, 7, 0, 1), "inverse-truncated": build((2, 8, 2), 1, 5, 1, 0),
            "real-inverse": build((2, 5, 2), 1, 8, 1, 1), "inner-axis": build((2, 4, 3, 2), 2, 3, 0, 0)}


@generator("STFT", elems=FLOATS)
def _stft(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(window: bool, onesided: int) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            x = arr(elem, (2, 24, 1), rng)
            w = np.hanning(8).astype(elem.dtype) if window else None
            return Variant([x, w], {"frame_step": 3, "frame_length": 8, "onesided": onesided})

        return b

    return {"plain": build(False, 1), "window-twosided": build(True, 0)}


@generator("Det", elems=FLOATS)
def _det(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(shape: tuple[int, ...], swap: bool) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            x = rng.uniform(-2, 2, shape)
            if swap:  # a zero leading pivot forces a row exchange; a repeated row makes one matrix singular
                x[..., 0, 0] = 0
                x[0, 1, :] = x[0, 0, :]
            return Variant([x.astype(elem.dtype)])

        return b

    return {"batch-3x3": build((4, 3, 3), False), "pivoting-singular": build((2, 4, 4), True),
            "one": build((3, 1, 1), False)}
