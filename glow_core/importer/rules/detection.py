"""Import rules of the data-dependent operators: NonMaxSuppression and Unique.

Their results are produced at the largest size the inputs allow plus a count
(``glow_core/ir/defs/detection.py``) and exposed as ``RaggedValue``: usable only
as model outputs, which ``glow_core.onnx_backend`` trims to the count.
``max_output_boxes_per_class`` decides NonMaxSuppression's result size: it is
read at compile time (a model input there is bound from the value passed) and
capped at the number of boxes, so the result is at most batches x classes x
boxes rows, checked against the memory budget.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from glow_core.errors import GlowTypeError
from glow_core.importer.context import NodeContext, import_rule
from glow_core.importer.structured import RaggedValue
from glow_core.ir.types import normalize_axis


@import_rule("NonMaxSuppression")
def _nms(ctx: NodeContext) -> list[Any]:
    ctx.check_attrs(["center_point_box"])
    boxes, scores = ctx.req(0), ctx.req(1)
    if boxes.type.rank != 3 or scores.type.rank != 3:
        raise GlowTypeError(f"{ctx.where()}: boxes {boxes.type} must be [B, N, 4] and scores {scores.type} [B, C, N]")
    k_arr = ctx.const(2, "max_output_boxes_per_class")
    k = 0
    if k_arr is not None:
        arr = np.asarray(k_arr)
        if arr.size != 1 or arr.dtype.kind not in "iu":
            raise GlowTypeError(f"{ctx.where()}: max_output_boxes_per_class must be one integer")
        k = max(int(arr.reshape(-1)[0]), 0)
    k = min(k, boxes.shape[1])
    center = int(ctx.attr("center_point_box", 0))
    if center not in (0, 1):
        raise ctx.unsupported(f"center_point_box={center} (0 or 1)")
    rows = boxes.shape[0] * scores.shape[1] * k
    ctx.importer.budget.check_tensor((rows, 3), 8, ctx.where(), "selected indices (batches x classes x kept boxes)")
    sel, count = ctx.emit("NonMaxSuppression", [boxes, scores, ctx.input(3), ctx.input(4)],
                          {"max_per_class": k, "center_point_box": center})
    return [RaggedValue(sel, count, 0, ctx.where())]


@import_rule("Unique")
def _unique(ctx: NodeContext) -> list[Any]:
    ctx.check_attrs(["axis", "sorted"])
    x = ctx.req(0)
    axis = -1 if not ctx.has_attr("axis") else normalize_axis(int(ctx.attr("axis")), x.type.rank)
    values, first, inverse, counts, n = ctx.emit("Unique", [x], {"axis": axis, "sorted": int(ctx.attr("sorted", 1))})
    where = ctx.where()
    return [RaggedValue(values, n, max(axis, 0), where), RaggedValue(first, n, 0, where), inverse,
            RaggedValue(counts, n, 0, where)]
