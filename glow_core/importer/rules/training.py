"""Optimizer updates of ai.onnx.preview.training (Adagrad, Momentum, Adam) as element-wise graphs.

They are deterministic formulas over their inputs (learning rate R, step
count T, then n tensors of each state): each update is computed in float64,
where onnx.reference's mixed float32 / Python-float arithmetic lands, and
rounded once to the state's element kind.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from glow_core.errors import GlowTypeError, ModelError
from glow_core.importer.context import NodeContext, import_rule
from glow_core.ir.graph import Value
from glow_core.ir.types import ElemKind

DOMAIN = "ai.onnx.preview.training"
F64 = ElemKind.FLOAT64


class _G:
    """Shorthands that emit float64 element-wise nodes for one ONNX node."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self.n = 0

    def _name(self, kind: str) -> str:
        self.n += 1
        return f"{self.ctx.name}.{kind.lower()}{self.n}"

    def op(self, kind: str, *xs: Value, **attrs: Any) -> Value:
        return self.ctx.emit1(kind, list(xs), attrs, name=self._name(kind))

    def f64(self, x: Value) -> Value:
        return x if x.type.elem == F64 else self.op("Cast", x, to=F64)

    def c(self, v: float) -> Value:
        return self.ctx.constant(np.array(v, np.float64), name=f"{self.ctx.name}_c")

    def add(self, a: Value, b: Value) -> Value:
        return self.op("Add", a, b)

    def sub(self, a: Value, b: Value) -> Value:
        return self.op("Sub", a, b)

    def mul(self, a: Value, b: Value) -> Value:
        return self.op("Mul", a, b)

    def div(self, a: Value, b: Value) -> Value:
        return self.op("Div", a, b)

    def sqrt(self, a: Value) -> Value:
        return self.op("Sqrt", a)

    def back(self, x: Value, like: Value) -> Value:
        return self.op("Cast", x, to=like.type.elem)


def _groups(ctx: NodeContext, per: int) -> tuple[Value, Value, list[list[Value]]]:
    """(R, T, [state tensors of tensor i for i in range(n)]) for ``per`` states per tensor."""
    n_in = ctx.num_inputs - 2
    if n_in < per or n_in % per:
        raise ModelError(f"{ctx.where()}: {n_in} tensors after R and T do not form groups of {per}")
    n = n_in // per
    r, t = ctx.req(0), ctx.req(1)
    if r.type.size != 1 or t.type.size != 1:
        raise GlowTypeError(f"{ctx.where()}: R {r.type} and T {t.type} must be scalars")
    groups = [[ctx.req(2 + j * n + i) for j in range(per)] for i in range(n)]
    for g in groups:
        if any(v.type != g[0].type for v in g) or not g[0].type.elem.is_float:
            raise GlowTypeError(f"{ctx.where()}: the states of one tensor must share one float type")
    return r, t, groups


@import_rule("Adagrad", domain=DOMAIN)
def _adagrad(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["decay_factor", "epsilon", "norm_coefficient"])
    decay, eps, norm = (float(ctx.attr(a, 0.0)) for a in ("decay_factor", "epsilon", "norm_coefficient"))
    r, t, groups = _groups(ctx, 3)
    g = _G(ctx)
    rate = g.div(g.f64(r), g.add(g.c(1.0), g.mul(g.f64(t), g.c(decay))))
    xs, hs = [], []
    for x, grad, h in groups:
        reg = g.add(g.mul(g.c(norm), g.f64(x)), g.f64(grad))
        h_new = g.add(g.f64(h), g.mul(reg, reg))
        x_new = g.sub(g.f64(x), g.div(g.mul(rate, reg), g.add(g.sqrt(h_new), g.c(eps))))
        xs.append(g.back(x_new, x))
        hs.append(g.back(h_new, h))
    return xs + hs


def _positive(g: _G, t: Value) -> Value:
    return g.op("Less", g.c(0.0), g.f64(t))


@import_rule("Momentum", domain=DOMAIN)
def _momentum(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["alpha", "beta", "mode", "norm_coefficient"])
    alpha, beta, norm = (float(ctx.attr(a)) for a in ("alpha", "beta", "norm_coefficient"))
    mode = str(ctx.attr("mode"))
    if mode not in ("standard", "nesterov"):
        raise ModelError(f"{ctx.where()}: mode '{mode}' (standard or nesterov)")
    r, t, groups = _groups(ctx, 3)
    g = _G(ctx)
    beta_t = g.op("Where", _positive(g, t), g.c(beta), g.c(1.0))
    xs, vs = [], []
    for x, grad, v in groups:
        reg = g.add(g.mul(g.c(norm), g.f64(x)), g.f64(grad))
        v_new = g.add(g.mul(g.c(alpha), g.f64(v)), g.mul(beta_t, reg))
        step = v_new if mode == "standard" else g.add(reg, g.mul(g.c(alpha), v_new))
        xs.append(g.back(g.sub(g.f64(x), g.mul(g.f64(r), step)), x))
        vs.append(g.back(v_new, v))
    return xs + vs


@import_rule("Adam", domain=DOMAIN)
def _adam(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post"])
    alpha, beta = float(ctx.attr("alpha", 0.9)), float(ctx.attr("beta", 0.999))
    eps, norm, post = (float(ctx.attr(a, 0.0)) for a in ("epsilon", "norm_coefficient", "norm_coefficient_post"))
    r, t, groups = _groups(ctx, 4)
    g = _G(ctx)
    tf = g.f64(t)
    bias = g.div(g.sqrt(g.sub(g.c(1.0), g.op("Pow", g.c(beta), tf))), g.sub(g.c(1.0), g.op("Pow", g.c(alpha), tf)))
    rate = g.op("Where", _positive(g, t), g.mul(g.f64(r), bias), g.f64(r))
    xs, vs, hs = [], [], []
    for x, grad, v, h in groups:
        reg = g.add(g.mul(g.c(norm), g.f64(x)), g.f64(grad))
        v_new = g.add(g.mul(g.c(alpha), g.f64(v)), g.mul(g.c(1.0 - alpha), reg))
        h_new = g.add(g.mul(g.c(beta), g.f64(h)), g.mul(g.c(1.0 - beta), g.mul(reg, reg)))
        x_new = g.sub(g.f64(x), g.mul(rate, g.div(v_new, g.add(g.sqrt(h_new), g.c(eps)))))
        xs.append(g.back(g.mul(g.c(1.0 - post), x_new), x))
        vs.append(g.back(v_new, v))
        hs.append(g.back(h_new, h))
    return xs + vs + hs


def batchnorm_training(ctx: NodeContext) -> list[Value]:
    """BatchNormalization with training_mode=1 (opset >= 14): normalized with the batch's own mean and
    (population) variance; outputs 2 and 3 are the running statistics momentum-averaged with them."""
    x, scale, bias, mean, var = (ctx.req(i) for i in range(5))
    if x.type.rank < 2 or not x.type.elem.is_float:
        raise GlowTypeError(f"{ctx.where()}: input {x.type} must be a float [N, C, ...]")
    c = x.shape[1]
    axes = tuple(a for a in range(x.type.rank) if a != 1)
    momentum, eps = float(ctx.attr("momentum", 0.9)), float(ctx.attr("epsilon", 1e-5))
    g = _G(ctx)
    xf = g.f64(x)
    batch_mean = g.op("ReduceMean", xf, axes=axes, keepdims=True)
    centered = g.sub(xf, batch_mean)
    batch_var = g.op("ReduceMean", g.mul(centered, centered), axes=axes, keepdims=True)
    bshape = (1, c) + (1,) * (x.type.rank - 2)
    s64, b64 = (g.op("Reshape", g.f64(v), shape=bshape) for v in (scale, bias))
    y = g.add(g.mul(g.div(centered, g.sqrt(g.add(batch_var, g.c(eps)))), s64), b64)
    bm, bv = (g.op("Reshape", v, shape=(c,)) for v in (batch_mean, batch_var))
    run_mean = g.add(g.mul(g.f64(mean), g.c(momentum)), g.mul(bm, g.c(1.0 - momentum)))
    run_var = g.add(g.mul(g.f64(var), g.c(momentum)), g.mul(bv, g.c(1.0 - momentum)))
    return [g.back(y, x), g.back(run_mean, mean), g.back(run_var, var)]
