"""Kernels of the data-dependent kinds: NonMaxSuppression and Unique (``glow_core.ir.defs.detection``).

Results are written at their largest size, padded past ``Count`` (see the kind declarations).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from glow_core.ir.types import TensorType
from glow_core.reference.kernels import KERNELS

Attrs = Mapping[str, Any]
Types = Sequence[TensorType]


def corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """[..., 4] boxes as (y_min, x_min, y_max, x_max), in the boxes' own precision (as onnx.reference:
    an IoU equal to the threshold must compare the same way)."""
    b = boxes
    if center_point_box:
        x, y, half_w, half_h = b[..., 0], b[..., 1], b[..., 2] / 2, b[..., 3] / 2
        return np.stack([y - half_h, x - half_w, y + half_h, x + half_w], axis=-1)
    return np.stack([np.minimum(b[..., 0], b[..., 2]), np.minimum(b[..., 1], b[..., 3]),
                     np.maximum(b[..., 0], b[..., 2]), np.maximum(b[..., 1], b[..., 3])], axis=-1)


def overlaps(box: np.ndarray, others: np.ndarray, threshold: Any) -> np.ndarray:
    """IoU(box, each of others) > threshold, false for empty intersections or degenerate boxes."""
    ih = np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0])
    iw = np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1])
    inter = np.where((ih > 0) & (iw > 0), ih * iw, np.zeros_like(ih))
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    union = area + areas - inter
    ok = (inter > 0) & (area > 0) & (areas > 0) & (union > 0)
    with np.errstate(all="ignore"):
        return ok & (inter / np.where(ok, union, np.ones_like(union)) > box.dtype.type(threshold))


def nms_class(boxes: np.ndarray, scores: np.ndarray, k: int, iou: Any, score: Any) -> list[int]:
    """Greedy selection for one batch and class: box indices in selection order."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    if score is not None:
        order = [i for i in order if scores[i] > score]
    kept: list[int] = []
    for i in order:
        if len(kept) >= k:
            break
        if not kept or not overlaps(boxes[i], boxes[kept], iou).any():
            kept.append(i)
    return kept


@KERNELS.register("NonMaxSuppression")
def _nms(attrs: Attrs, out: Types, boxes: np.ndarray, scores: np.ndarray, iou: np.ndarray | None,
         score: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    k = int(attrs["max_per_class"])
    iou_t = np.asarray(iou).reshape(-1)[0] if iou is not None else boxes.dtype.type(0)
    score_t = np.asarray(score).reshape(-1)[0] if score is not None else None
    box = corners(boxes, int(attrs["center_point_box"]))
    rows = []
    for b in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            rows += [(b, c, i) for i in nms_class(box[b], scores[b, c], k, iou_t, score_t)]
    sel = np.full(out[0].shape, -1, np.int64)
    if rows:
        sel[: len(rows)] = np.array(rows, np.int64)
    return sel, np.array(len(rows), np.int64)


@KERNELS.register("Unique")
def _unique(attrs: Attrs, out: Types, x: np.ndarray) -> tuple[np.ndarray, ...]:
    axis = int(attrs["axis"])
    data = x.reshape(-1) if axis == -1 else x
    ax = 0 if axis == -1 else axis
    _, first, inverse, counts = np.unique(data, return_index=True, return_inverse=True, return_counts=True,
                                          axis=None if axis == -1 else axis)
    inverse = np.asarray(inverse).reshape(-1)
    if not int(attrs["sorted"]):  # order of first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        first, counts, inverse = first[order], counts[order], rank[inverse]
    m = len(first)
    values = np.zeros(out[0].shape, out[0].dtype)
    idx = [slice(None)] * values.ndim
    idx[ax] = slice(0, m)
    values[tuple(idx)] = np.take(data, first, axis=ax)
    pad = out[1].shape[0] - m
    ints = [np.concatenate([a.astype(np.int64), np.full(pad, fill, np.int64)]) for a, fill in ((first, -1), (counts, 0))]
    return values, ints[0], inverse.astype(np.int64), ints[1], np.array(m, np.int64)
