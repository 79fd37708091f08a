"""Kinds with a data-dependent result size: NonMaxSuppression and Unique.

Glow's values have static types, so these kinds produce their results at the
*largest* size the inputs allow, plus a ``Count`` scalar (int64) of the rows
actually produced; the rows past ``Count`` hold -1 (indices) or 0 (values).
The importer exposes such a result only as a model output, which the caller
(``glow_core.onnx_backend``) trims to ``Count`` (see importer/structured.py,
``RaggedValue``); a node reading it is refused.
"""

from __future__ import annotations

from glow_core.errors import GlowTypeError
from glow_core.ir.defs.common import Attrs, Types, check_elems, req
from glow_core.ir.kinds import AttrType as A
from glow_core.ir.kinds import attr, define_kind
from glow_core.ir.types import FLOAT_KINDS, NUMERIC_KINDS, ElemKind, TensorType

E = ElemKind
I64 = E.INT64


def _nms_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    boxes, scores = req(types, 0), req(types, 1)
    check_elems(boxes, FLOAT_KINDS, "NonMaxSuppression boxes")
    if boxes.rank != 3 or boxes.shape[2] != 4 or scores.rank != 3 or scores.elem != boxes.elem:
        raise GlowTypeError(f"boxes {boxes} must be [B, N, 4] and scores {scores} [B, C, N] of the same kind")
    b, n = boxes.shape[:2]
    if scores.shape[0] != b or scores.shape[2] != n:
        raise GlowTypeError(f"scores {scores} must be [{b}, C, {n}] for boxes {boxes}")
    for i in (2, 3):
        t = types[i] if i < len(types) else None
        if t is not None and (t.size != 1 or t.elem != boxes.elem):
            raise GlowTypeError(f"threshold {t} must hold one {boxes.elem.value}")
    k = int(attrs["max_per_class"])
    if not 0 <= k <= n:
        raise GlowTypeError(f"max_per_class {k} must be in [0, {n}]")
    return [TensorType(I64, (b * scores.shape[1] * k, 3)), TensorType(I64, ())]


define_kind("NonMaxSuppression", inputs=("Boxes", "Scores", "IouThreshold?", "ScoreThreshold?"),
            outputs=("Selected", "Count"),
            attrs=(attr("max_per_class", A.INT, doc="boxes kept per batch and class, at most N"),
                   attr("center_point_box", A.INT, 0, doc="0: [y1, x1, y2, x2]; 1: [x_center, y_center, w, h]")),
            infer=_nms_rule, elems=FLOAT_KINDS | {I64},
            doc="ONNX NonMaxSuppression: per batch and class, greedy by descending score (ties: lower box index), "
                "scores > ScoreThreshold (when given), dropping boxes whose IoU with a kept one is > IouThreshold "
                "(default 0). Selected rows (batch, class, box) in that order; rows past Count are -1.")


def _unique_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    check_elems(x, NUMERIC_KINDS | {E.BOOL}, "Unique input")
    axis = int(attrs["axis"])
    if axis == -1:
        n = x.size
        y_shape: tuple[int, ...] = (n,)
    else:
        if not 0 <= axis < x.rank:
            raise GlowTypeError(f"axis {axis} must be in [0, {x.rank}) or -1 (flattened)")
        n = x.shape[axis]
        y_shape = x.shape
    return [TensorType(x.elem, y_shape), TensorType(I64, (n,)), TensorType(I64, (n,)), TensorType(I64, (n,)),
            TensorType(I64, ())]


define_kind("Unique", inputs=("Input",), outputs=("Values", "Indices", "Inverse", "Counts", "Count"),
            attrs=(attr("axis", A.INT, -1, doc="-1: the flattened input; else a non-negative axis"),
                   attr("sorted", A.INT, 1)),
            infer=_unique_rule, elems=NUMERIC_KINDS | {E.BOOL},
            doc="ONNX Unique: the distinct elements (or slices along axis), sorted or in order of first occurrence; "
                "Indices of first occurrences, Inverse (one per input element/slice), Counts. Values, Indices and "
                "Counts hold Count entries (the rest 0 / -1 / 0).")
