"""Generators of the signal, linear-algebra and data-dependent kinds: DFT, STFT (``ir/defs/signal.py``), Det
(``ir/defs/linalg.py``), NonMaxSuppression, Unique (``ir/defs/detection.py``), TfIdfVectorizer (``ir/defs/text.py``)."""

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


@generator("NonMaxSuppression", elems=FLOATS)
def _nms(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(center: int, thresholds: bool, k: int) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            start = rng.uniform(0, 4, (2, 12, 2))
            boxes = np.concatenate([start, start + rng.uniform(0.5, 3, (2, 12, 2))], axis=2)
            scores = rng.permutation(np.linspace(0.05, 0.95, 2 * 3 * 12)).reshape(2, 3, 12)  # distinct
            ops: list[np.ndarray | None] = [boxes.astype(elem.dtype), scores.astype(elem.dtype), None, None]
            if thresholds:
                ops[2:] = [np.array([0.3], elem.dtype), np.array([0.25], elem.dtype)]
            return Variant(ops, {"max_per_class": k, "center_point_box": center})

        return b

    return {"corners": build(0, True, 5), "center-no-thresholds": build(1, False, 12), "none-kept": build(0, True, 0)}


@generator("Unique", elems=FLOATS | {ElemKind.INT64, ElemKind.INT32, ElemKind.UINT8})
def _unique(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(shape: tuple[int, ...], axis: int, sorted_: int) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            return Variant([rng.integers(0, 3, shape).astype(elem.dtype)], {"axis": axis, "sorted": sorted_})

        return b

    return {"flat-sorted": build((4, 5), -1, 1), "flat-first-seen": build((17,), -1, 0),
            "rows": build((6, 2), 0, 1), "inner-axis-first-seen": build((2, 5, 2), 1, 0)}


@generator("TfIdfVectorizer", elems={ElemKind.INT32, ElemKind.INT64})
def _tfidf(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(mode: str, weights: tuple[float, ...], skip: int) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            x = rng.integers(0, 4, (3, 9)).astype(elem.dtype)
            return Variant([x], {"grams": (1, 2, 0, 1, 3, 3, 2, 0, 1), "gram_lengths": (1, 1, 2, 2, 3),
                                 "gram_columns": (0, 1, 2, 3, 4), "max_skip": skip, "out_size": 6, "mode": mode,
                                 "weights": weights})

        return b

    return {"tf-skips": build("TF", (), 2), "idf-weights": build("IDF", (0.5, 1, 2, 3, 4, 5), 1),
            "tfidf": build("TFIDF", (0.5, 1, 2, 3, 4, 5), 0)}
