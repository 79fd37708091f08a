"""Import rules: Det (a kind of its own), AffineGrid, SwiGLU and FlexAttention (compositions of existing kinds;
FlexAttention's score_mod / prob_mod subgraphs are inlined, ``importer/inline.py``).

AffineGrid's ``size`` decides the output shape: it is read as a compile-time
constant; the base grid of homogeneous positions is then a constant and the
grid is one float64 MatMul with theta (as onnx.reference computes it), rounded
once to theta's element kind.
"""

from __future__ import annotations

import math

import numpy as np

from glow_core.errors import GlowTypeError, ModelError
from glow_core.importer.context import NodeContext, import_rule
from glow_core.importer.inline import graph_attr, inline
from glow_core.ir.graph import Value
from glow_core.ir.types import ElemKind


@import_rule("Det")
def _det(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs([])
    return ctx.emit("Det", [ctx.req(0)])


@import_rule("SwiGLU")
def _swiglu(ctx: NodeContext) -> list[Value]:
    """Y = Swish_alpha(A) * B, A and B of one shape (no broadcasting)."""
    ctx.check_attrs(["alpha"])
    a, b = ctx.req(0), ctx.req(1)
    if a.type != b.type:
        raise GlowTypeError(f"{ctx.where()}: gate {a.type} and value {b.type} must have the same type and shape "
                            "(SwiGLU does not broadcast)")
    gate = ctx.emit1("Swish", [a], {"alpha": float(ctx.attr("alpha", 1.0))}, name=f"{ctx.name}.swish")
    return ctx.emit("Mul", [gate, b])


def base_grid(spatial: tuple[int, ...], align_corners: bool) -> np.ndarray:
    """[prod(spatial), nd + 1] homogeneous positions in [-1, 1], x fastest: (x, y[, z], 1) per point."""
    axes = []
    for n in spatial:
        i = np.arange(n, dtype=np.float64)
        if align_corners:
            axes.append(-1.0 + 2.0 * i / (n - 1) if n > 1 else np.full(n, -1.0))
        else:
            axes.append(-1.0 + (2.0 * i + 1.0) / n)
    mesh = np.meshgrid(*axes, indexing="ij")  # [D,] H, W
    coords = [m.reshape(-1) for m in reversed(mesh)]  # x (the last axis) first
    return np.stack(coords + [np.ones(math.prod(spatial))], axis=1)


@import_rule("AffineGrid")
def _affine_grid(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["align_corners"])
    theta = ctx.req(0)
    size = ctx.const_ints(1, "size")
    assert size is not None
    nd = len(size) - 2
    if nd not in (2, 3) or theta.type.shape != (size[0], nd, nd + 1):
        raise ModelError(f"{ctx.where()}: size {list(size)} must be [N, C, H, W] or [N, C, D, H, W] with theta "
                         f"[N, {max(nd, 2)}, {max(nd, 2) + 1}]; theta is {theta.type}")
    spatial = tuple(size[2:])
    if any(d < 1 for d in spatial):
        raise ModelError(f"{ctx.where()}: spatial sizes {list(spatial)} must be positive")
    n_points = math.prod(spatial)
    ctx.importer.budget.check_tensor((size[0], n_points, nd), theta.type.elem.itemsize, ctx.where(), "grid")
    ctx.reserve((n_points, nd + 1), ElemKind.FLOAT64, "base grid")
    base = ctx.constant(base_grid(spatial, bool(int(ctx.attr("align_corners", 0)))), name=f"{ctx.name}_base_grid")
    t64 = ctx.emit1("Cast", [theta], {"to": ElemKind.FLOAT64}, name=f"{ctx.name}.theta64")
    t_t = ctx.emit1("Transpose", [t64], {"perm": (0, 2, 1)}, name=f"{ctx.name}.theta_t")   # [N, nd+1, nd]
    grid = ctx.emit1("MatMul", [base, t_t], name=f"{ctx.name}.grid")                     # [N, points, nd]
    grid = ctx.emit1("Cast", [grid], {"to": theta.type.elem}, name=f"{ctx.name}.cast")
    return ctx.emit("Reshape", [grid], {"shape": (size[0], *spatial, nd)})


_SOFTMAX_PRECISION = {1: ElemKind.FLOAT32, 10: ElemKind.FLOAT16, 16: ElemKind.BFLOAT16, 11: ElemKind.FLOAT64}


def _flex_modifier(ctx: NodeContext, name: str, x: Value) -> Value:
    graph = graph_attr(ctx, name)
    if graph is None:
        return x
    (y,) = inline(ctx, graph, [x], f"{name} subgraph")
    if not isinstance(y, Value) or y.type.shape != x.type.shape:
        raise GlowTypeError(f"{ctx.where()}: {name} must return one tensor shaped like its input {x.type}")
    return ctx.emit1("Cast", [y], {"to": x.type.elem}, name=f"{ctx.name}.{name}") if y.type.elem != x.type.elem else y


@import_rule("FlexAttention", domain="ai.onnx.preview")
def _flex_attention(ctx: NodeContext) -> list[Value]:
    """As onnx.reference: Q and K scaled by sqrt(scale) each, scores in the softmax precision, Y in V's kind."""
    ctx.check_attrs(["scale", "score_mod", "prob_mod", "softmax_precision"])
    q, k, v = ctx.req(0), ctx.req(1), ctx.req(2)
    if q.type.rank != 4 or k.type.rank != 4 or v.type.rank != 4:
        raise GlowTypeError(f"{ctx.where()}: Q {q.type}, K {k.type} and V {v.type} must be rank 4")
    b, hq, _, e = q.shape
    hk, s = k.shape[1], k.shape[2]
    if k.shape[3] != e or v.shape[:3] != k.shape[:3] or k.shape[0] != b or hk < 1 or hq % hk:
        raise GlowTypeError(f"{ctx.where()}: Q {q.type}, K {k.type}, V {v.type} do not fit: K must be "
                            f"[{b}, H_kv, S, {e}], V [{b}, H_kv, S, Ev], H_kv dividing {hq}")
    if ctx.has_attr("softmax_precision"):
        work = _SOFTMAX_PRECISION.get(int(ctx.attr("softmax_precision")))
        if work is None:
            raise ModelError(f"{ctx.where()}: softmax_precision {ctx.attr('softmax_precision')} is not a float type")
    else:
        work = ElemKind.FLOAT64 if q.type.elem == ElemKind.FLOAT64 else ElemKind.FLOAT32
    scale = float(ctx.attr("scale", 1.0 / math.sqrt(e)))
    root = ctx.constant(np.array(np.sqrt(np.float32(scale)), dtype=q.type.dtype), name=f"{ctx.name}_sqrt_scale")

    def heads(x: Value) -> Value:  # each K/V head serves hq // hk consecutive query heads (np.repeat)
        if hk == hq:
            return x
        rep = hq // hk
        x5 = ctx.emit1("Reshape", [x], {"shape": (b, hk, 1) + x.shape[2:]}, name=f"{ctx.name}.h5")
        x5 = ctx.emit1("Broadcast", [x5], {"shape": (b, hk, rep) + x.shape[2:]}, name=f"{ctx.name}.rep")
        return ctx.emit1("Reshape", [x5], {"shape": (b, hq) + x.shape[2:]}, name=f"{ctx.name}.h4")

    qs = ctx.emit1("Mul", [q, root], name=f"{ctx.name}.qs")
    ks = ctx.emit1("Mul", [heads(k), root], name=f"{ctx.name}.ks")
    kt = ctx.emit1("Transpose", [ks], {"perm": (0, 1, 3, 2)}, name=f"{ctx.name}.kt")
    scores = ctx.emit1("MatMul", [qs, kt], name=f"{ctx.name}.scores")
    scores = ctx.emit1("Cast", [scores], {"to": work}, name=f"{ctx.name}.scores_w") if scores.type.elem != work else scores
    scores = _flex_modifier(ctx, "score_mod", scores)
    probs = ctx.emit1("Softmax", [scores], {"axes": (3,)}, name=f"{ctx.name}.softmax")
    probs = _flex_modifier(ctx, "prob_mod", probs)
    vw = heads(v)
    vw = ctx.emit1("Cast", [vw], {"to": work}, name=f"{ctx.name}.v_w") if vw.type.elem != work else vw
    y = ctx.emit1("MatMul", [probs, vw], name=f"{ctx.name}.pv")
    return [ctx.emit1("Cast", [y], {"to": v.type.elem}) if y.type.elem != v.type.elem else y]
