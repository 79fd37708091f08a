"""TfIdfVectorizer kernel (``glow_core.ir.defs.text``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from glow_core.ir.types import TensorType
from glow_core.reference.kernels import KERNELS


def split_grams(attrs: Mapping[str, Any]) -> list[tuple[int, ...]]:
    out, pos = [], 0
    for n in attrs["gram_lengths"]:
        out.append(tuple(int(v) for v in attrs["grams"][pos:pos + n]))
        pos += n
    return out


def skips_of(length: int, max_skip: int) -> range:
    """Skip counts an n-gram of ``length`` is looked for with (a unigram: once)."""
    return range(max_skip + 1) if length > 1 else range(1)


def window_positions(c: int, length: int, skip: int) -> np.ndarray:
    """[windows, length] token positions of every n-gram of ``length`` with ``skip`` tokens between."""
    d = skip + 1
    starts = np.arange(max(c - (length - 1) * d, 0), dtype=np.int64)
    return starts[:, None] + d * np.arange(length, dtype=np.int64)


def apply_mode(counts: np.ndarray, mode: str, weights: Sequence[float]) -> np.ndarray:
    counts = counts.astype(np.float32)
    w = np.asarray(weights, np.float32) if len(weights) else None
    if mode == "IDF":
        present = (counts > 0).astype(np.float32)
        return present * w if w is not None else present
    if mode == "TFIDF" and w is not None:
        return w * counts
    return counts


@KERNELS.register("TfIdfVectorizer")
def _tfidf(attrs: Mapping[str, Any], out: Sequence[TensorType], x: np.ndarray) -> np.ndarray:
    rows = x.reshape(-1, x.shape[-1]).astype(np.int64)
    counts = np.zeros((rows.shape[0], int(attrs["out_size"])), np.int64)
    for gram, col in zip(split_grams(attrs), attrs["gram_columns"]):
        for skip in skips_of(len(gram), int(attrs["max_skip"])):
            windows = rows[:, window_positions(rows.shape[1], len(gram), skip)]  # [B, W, n]
            counts[:, col] += np.all(windows == np.asarray(gram), axis=2).sum(axis=1)
    return apply_mode(counts, str(attrs["mode"]), attrs["weights"]).reshape(out[0].shape)
