"""Lowering of TfIdfVectorizer (``glow_core.ir.defs.text``) onto Gather, Equal, reductions and MatMul.

Per n-gram length and skip: Gather the token windows with a constant position
table, compare them with the pool's n-grams of that length, count the windows
where all tokens match, and move the counts to their output columns with a
constant 0/1 matrix (exact integer MatMul); the mode is element-wise.
"""

from __future__ import annotations

import numpy as np

from glow_core.ir.graph import Node, Value
from glow_core.ir.types import ElemKind
from glow_core.lowering.builder import Builder
from glow_core.lowering.table import lowering
from glow_core.reference.kernels.text import skips_of, split_grams, window_positions

I64, F32 = ElemKind.INT64, ElemKind.FLOAT32


def _counts(b: Builder, rows: Value, grams: list[tuple[int, ...]], cols: list[int], length: int, skip: int,
            out_size: int) -> Value | None:
    """[B, out_size] int64 counts of the n-grams of ``length`` found with ``skip``, or None if none fit."""
    nrows, c = rows.type.shape
    pos = window_positions(c, length, skip)
    if pos.shape[0] == 0:
        return None
    wins = b.emit1("Gather", [rows, b.const(pos)], axis=1)                             # [B, W, n]
    pool = np.array(grams, np.int64).reshape(1, 1, len(grams), length)
    hit = b.binary("Equal", b.reshape(wins, (nrows, pos.shape[0], 1, length)), b.const(pool))
    match = b.reduce("ReduceMin", hit, [3], keepdims=False)                             # [B, W, G]
    per_gram = b.reduce("ReduceSum", b.cast(match, I64), [1], keepdims=False)          # [B, G]
    onehot = np.zeros((len(grams), out_size), np.int64)
    onehot[np.arange(len(grams)), cols] = 1
    return b.emit1("MatMul", [per_gram, b.const(onehot)])


@lowering("TfIdfVectorizer")
def _tfidf(b: Builder, node: Node) -> list[Value]:
    x = b.input(0)
    out = b.out_type()
    out_size, max_skip = int(b.attrs["out_size"]), int(b.attrs["max_skip"])
    nrows = x.type.shape[0] if x.type.rank == 2 else 1
    rows = b.cast(b.reshape(x, (nrows, x.type.shape[-1])), I64)
    grams = split_grams(b.attrs)
    by_length: dict[int, tuple[list[tuple[int, ...]], list[int]]] = {}
    for g, col in zip(grams, b.attrs["gram_columns"]):
        by_length.setdefault(len(g), ([], []))
        by_length[len(g)][0].append(g)
        by_length[len(g)][1].append(int(col))
    total: Value = b.const(np.zeros((rows.type.shape[0], out_size), np.int64))
    for length, (gs, cols) in sorted(by_length.items()):
        for skip in skips_of(length, max_skip):
            part = _counts(b, rows, gs, cols, length, skip, out_size)
            if part is not None:
                total = b.add(total, part)
    counts = b.cast(total, F32)
    mode, weights = str(b.attrs["mode"]), b.attrs["weights"]
    w = b.const(np.asarray(weights, np.float32).reshape(1, out_size)) if len(weights) else None
    if mode == "IDF":
        present = b.cast(b.binary("Less", b.scalar(0, F32, 2), counts), F32)
        counts = b.mul(present, w) if w is not None else present
    elif mode == "TFIDF" and w is not None:
        counts = b.mul(w, counts)
    return [b.reshape(counts, out.shape)]
