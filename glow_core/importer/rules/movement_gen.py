"""Import rules for ONNX operators that generate values from shapes and scalars:
Range, EyeLike, HannWindow, HammingWindow, BlackmanWindow.

Their results depend only on attributes, compile-time operands and static
shapes, so they become graph constants directly.
"""

from __future__ import annotations

import math

import numpy as np

from glow_core.errors import GlowTypeError
from glow_core.importer.context import NodeContext, import_rule, onnx_elem
from glow_core.ir.graph import Value
from glow_core.ir.types import ElemKind

#: Range computes float16 / bfloat16 in float32 (stash_type 1, the only defined value)
_RANGE_COMPUTE = {ElemKind.FLOAT16: np.float32, ElemKind.BFLOAT16: np.float32}
_RANGE_ELEMS = (ElemKind.FLOAT32, ElemKind.FLOAT64, ElemKind.INT16, ElemKind.INT32, ElemKind.INT64,
                ElemKind.FLOAT16, ElemKind.BFLOAT16)


def _scalar(ctx: NodeContext, i: int, what: str) -> np.ndarray:
    """The one value of a compile-time operand, as a 0-d array of its element type."""
    arr = ctx.const(i, what)
    if arr is None or arr.size != 1:
        raise GlowTypeError(f"{ctx.where()}: {what} must be a scalar")
    return np.asarray(arr).reshape(())


@import_rule("Range")
def _range(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["stash_type"] if ctx.opset >= 27 else [])
    elem = ctx.type(0).elem
    if elem not in _RANGE_ELEMS:
        raise ctx.unsupported(f"Range of {elem.value}")
    if int(ctx.attr("stash_type", 1)) != 1:
        raise ctx.unsupported(f"stash_type {ctx.attr('stash_type')} (only 1, float, is defined)")
    compute = _RANGE_COMPUTE.get(elem, elem.dtype)
    start, limit, delta = (np.asarray(_scalar(ctx, i, n)).astype(compute)
                           for i, n in enumerate(("start", "limit", "delta")))
    if delta == 0:
        raise GlowTypeError(f"{ctx.where()}: delta is zero")
    if elem.is_int:
        count = max(-(-(int(limit) - int(start)) // int(delta)), 0)
    else:
        with np.errstate(all="ignore"):
            span = float(np.subtract(limit, start, dtype=compute)) / float(delta)
        if not math.isfinite(span):
            raise GlowTypeError(f"{ctx.where()}: start {start}, limit {limit}, delta {delta} give no finite "
                                "element count", hint="start, limit and delta must be finite")
        count = max(math.ceil(span), 0)
    ctx.reserve((count,), elem, "Range output")
    if elem.is_int:
        values = int(start) + np.arange(count, dtype=np.int64) * int(delta)
    else:
        values = start + np.arange(count, dtype=compute) * delta
    return [ctx.constant(np.asarray(values).astype(elem.dtype))]


@import_rule("EyeLike")
def _eye_like(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["dtype", "k"])
    t = ctx.type(0)
    if t.rank != 2:
        raise GlowTypeError(f"{ctx.where()}: EyeLike needs a rank-2 input, got {t}")
    dtype = ctx.attr("dtype")
    elem = t.elem if dtype is None else onnx_elem(int(dtype), ctx.where())
    if elem.is_quantized:
        raise ctx.unsupported(f"EyeLike of {elem.value}")
    ctx.reserve(t.shape, elem, "EyeLike output")
    return [ctx.constant(np.eye(t.shape[0], t.shape[1], int(ctx.attr("k", 0)), dtype=elem.dtype))]


#: window -> cosine-sum coefficients (a0, a1, a2): w[n] = a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N)
_WINDOWS = {
    "HannWindow": (0.5, 0.5, 0.0),
    "HammingWindow": (25.0 / 46.0, 21.0 / 46.0, 0.0),
    "BlackmanWindow": (0.42, 0.5, 0.08),
}


@import_rule(*_WINDOWS)
def _window(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["periodic", "output_datatype"])
    size = int(_scalar(ctx, 0, "size"))
    if size < 0:
        raise GlowTypeError(f"{ctx.where()}: negative window size {size}")
    elem = onnx_elem(int(ctx.attr("output_datatype", 1)), ctx.where())
    if elem.is_quantized or elem == ElemKind.BOOL:
        raise ctx.unsupported(f"output_datatype {elem.value}")
    ctx.reserve((size,), ElemKind.FLOAT32, "window")
    a0, a1, a2 = (np.float32(c) for c in _WINDOWS[ctx.op_type])
    # float32 arithmetic in the order of the ONNX function body, so results match it bit for bit
    n_fp = np.float32(size) if ctx.attr("periodic", 1) else np.float32(size) - np.float32(1)
    step = np.float32(2 * np.pi) / n_fp if n_fp else np.float32(np.inf)
    angle = np.arange(size, dtype=np.float32) * step
    w = a0 - a1 * np.cos(angle) + a2 * np.cos(angle * np.float32(2))
    return [ctx.constant(w.astype(np.float32).astype(elem.dtype))]
