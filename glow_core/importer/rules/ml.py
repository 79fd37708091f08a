"""ai.onnx.ml operators that map onto existing kinds: ArrayFeatureExtractor, Binarizer."""

from __future__ import annotations

import math

import numpy as np

from glow_core.errors import GlowTypeError
from glow_core.importer.context import NodeContext, import_rule
from glow_core.ir.graph import Value
from glow_core.ir.types import ElemKind

DOMAIN = "ai.onnx.ml"


@import_rule("ArrayFeatureExtractor", domain=DOMAIN)
def _array_feature_extractor(ctx: NodeContext) -> list[Value]:
    """data[..., indices] with the indices flattened; a 1-D input gives [1, k] (as onnx.reference)."""
    ctx.check_attrs([])
    x, idx = ctx.req(0), ctx.req(1)
    if idx.type.elem != ElemKind.INT64 or x.type.rank < 1:
        raise GlowTypeError(f"{ctx.where()}: indices {idx.type} must be int64 and the input of rank >= 1")
    k = math.prod(idx.shape)
    flat = ctx.emit1("Reshape", [idx], {"shape": (k,)}, name=f"{ctx.name}.idx")
    taken = ctx.emit1("Gather", [x, flat], {"axis": x.type.rank - 1}, name=f"{ctx.name}.take")
    shape = (1, k) if x.type.rank == 1 else x.shape[:-1] + (k,)
    return ctx.emit("Reshape", [taken], {"shape": shape})


@import_rule("Binarizer", domain=DOMAIN)
def _binarizer(ctx: NodeContext) -> list[Value]:
    """1 where x > threshold, else 0, in x's element kind."""
    ctx.check_attrs(["threshold"])
    x = ctx.req(0)
    t = ctx.constant(np.array(float(ctx.attr("threshold", 0.0)), x.type.dtype), name=f"{ctx.name}_threshold")
    above = ctx.emit1("Less", [t, x], name=f"{ctx.name}.above")
    return ctx.emit("Cast", [above], {"to": x.type.elem})
