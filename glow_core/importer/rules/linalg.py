"""Import rules: Det (a kind of its own), AffineGrid and SwiGLU (compositions of existing kinds).

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
