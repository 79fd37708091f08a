"""Import rules for ONNX normalization ops and losses (inference semantics).

BatchNormalization's training mode (``training_mode=1``, opset >= 14) is in
``rules/training.py``; otherwise any requested output beyond Y is refused. ``stash_type`` (the precision
statistics are computed in) must be float32 or float64. GroupNormalization
before opset 21 (per-group scale and bias, deprecated) is refused.
SoftmaxCrossEntropyLoss becomes LogSoftmax over axis 1 followed by
NegativeLogLikelihoodLoss.
"""

from __future__ import annotations

import onnx

from glow_core.importer.context import NodeContext, import_rule
from glow_core.importer.rules.reduce import norm_axes, norm_axis, require_elems
from glow_core.ir.graph import Value
from glow_core.ir.types import ElemKind

#: ONNX stash_type values we compute in
_STASH: dict[int, ElemKind] = {
    int(onnx.TensorProto.FLOAT): ElemKind.FLOAT32,
    int(onnx.TensorProto.DOUBLE): ElemKind.FLOAT64,
}


def _stash(ctx: NodeContext) -> ElemKind:
    code = int(ctx.attr("stash_type", onnx.TensorProto.FLOAT))
    if code not in _STASH:
        raise ctx.unsupported(f"stash_type {code} (only 1 = float32 and 11 = float64 are supported)")
    return _STASH[code]


def _only_first_output(ctx: NodeContext, why: str) -> None:
    extra = [o for o in ctx.node.output[1:] if o]
    if extra:
        raise ctx.unsupported(f"output(s) {extra} requested: {why}")


def _channels(ctx: NodeContext, x: Value, min_rank: int = 2) -> int:
    if x.type.rank < min_rank:
        raise ctx.unsupported(f"input {x.type} has rank {x.type.rank}; [N, C, ...] of rank >= {min_rank} is needed")
    return x.type.shape[1]


@import_rule("BatchNormalization")
def _batchnorm(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["epsilon", "momentum", "spatial", "training_mode"])
    if int(ctx.attr("training_mode", 0)):
        from glow_core.importer.rules.training import batchnorm_training

        return batchnorm_training(ctx)  # batch statistics and running averages (rules/training.py)
    if not int(ctx.attr("spatial", 1)):
        raise ctx.unsupported("spatial=0 (per-activation statistics)")
    _only_first_output(ctx, "running/saved statistics are training outputs; only inference is supported")
    ins = [ctx.req(i) for i in range(5)]
    for v, what in zip(ins, ("X", "scale", "B", "mean", "var")):
        require_elems(ctx, v, "BatchNormalization", what)
    _channels(ctx, ins[0])
    return ctx.emit("BatchNormalization", ins, {"epsilon": float(ctx.attr("epsilon", 1e-5))})


@import_rule("InstanceNormalization")
def _instancenorm(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["epsilon"])
    x, s, b = ctx.req(0), ctx.req(1), ctx.req(2)
    require_elems(ctx, x, "InstanceNormalization")
    _channels(ctx, x)
    return ctx.emit("InstanceNormalization", [x, s, b], {"epsilon": float(ctx.attr("epsilon", 1e-5))})


@import_rule("GroupNormalization")
def _groupnorm(ctx: NodeContext) -> list[Value]:
    if ctx.opset < 21:
        # opset 18-20 (per-group scale and bias) is deprecated; the onnx checker rejects it
        raise ctx.unsupported("GroupNormalization before opset 21 (deprecated: per-group scale and bias)")
    x = ctx.req(0)
    require_elems(ctx, x, "GroupNormalization")
    c = _channels(ctx, x)
    if not ctx.has_attr("num_groups"):
        raise ctx.unsupported("attribute 'num_groups' is missing")
    g = int(ctx.attr("num_groups"))
    if g < 1 or c % g:
        raise ctx.unsupported(f"num_groups={g} does not divide the {c} channels")
    ctx.check_attrs(["epsilon", "num_groups", "stash_type"])
    stash = _stash(ctx)
    scale, bias = ctx.req(1), ctx.req(2)
    return ctx.emit("GroupNormalization", [x, scale, bias],
                    {"num_groups": g, "epsilon": float(ctx.attr("epsilon", 1e-5)), "stash": stash})


@import_rule("LayerNormalization")
def _layernorm(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["axis", "epsilon", "stash_type"])
    x = ctx.req(0)
    require_elems(ctx, x, "LayerNormalization")
    if x.type.rank == 0:
        raise ctx.unsupported("the input is a scalar (rank 0)")
    axis = norm_axis(ctx, int(ctx.attr("axis", -1)), x.type.rank)
    return ctx.emit("LayerNormalization", [x, ctx.req(1), ctx.input(2)],
                    {"axis": axis, "epsilon": float(ctx.attr("epsilon", 1e-5)), "stash": _stash(ctx)})


@import_rule("RMSNormalization")
def _rmsnorm(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["axis", "epsilon", "stash_type"])
    x, scale = ctx.req(0), ctx.req(1)
    require_elems(ctx, x, "RMSNormalization")
    if scale.type.elem is not x.type.elem:
        raise ctx.unsupported(f"scale of element kind {scale.type.elem.value} differs from X's "
                              f"{x.type.elem.value} (mixed-precision RMSNormalization)")
    if x.type.rank == 0:
        raise ctx.unsupported("the input is a scalar (rank 0)")
    axis = norm_axis(ctx, int(ctx.attr("axis", -1)), x.type.rank)
    return ctx.emit("RMSNormalization", [x, scale],
                    {"axis": axis, "epsilon": float(ctx.attr("epsilon", 1e-5)), "stash": _stash(ctx)})


@import_rule("LpNormalization")
def _lpnorm(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["axis", "p"])
    x = ctx.req(0)
    require_elems(ctx, x, "LpNormalization")
    if x.type.rank == 0:
        raise ctx.unsupported("the input is a scalar (rank 0)")
    p = int(ctx.attr("p", 2))
    if p not in (1, 2):
        raise ctx.unsupported(f"p={p} (only 1 and 2 are defined)")
    axis = norm_axis(ctx, int(ctx.attr("axis", -1)), x.type.rank)
    return ctx.emit("LpNormalization", [x], {"axis": axis, "p": p})


@import_rule("MeanVarianceNormalization")
def _mvn(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["axes"])
    x = ctx.req(0)
    require_elems(ctx, x, "MeanVarianceNormalization")
    axes = norm_axes(ctx, ctx.attr("axes", [0, 2, 3]), x.type.rank)
    return ctx.emit("MeanVarianceNormalization", [x], {"axes": axes})


@import_rule("LRN")
def _lrn(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["size", "alpha", "beta", "bias"])
    x = ctx.req(0)
    require_elems(ctx, x, "LRN")
    _channels(ctx, x, 3)
    if not ctx.has_attr("size"):
        raise ctx.unsupported("attribute 'size' is missing")
    size = int(ctx.attr("size"))
    if size < 1:
        raise ctx.unsupported(f"size={size} must be >= 1")
    return ctx.emit("LRN", [x], {"size": size, "alpha": float(ctx.attr("alpha", 1e-4)),
                                 "beta": float(ctx.attr("beta", 0.75)), "bias": float(ctx.attr("bias", 1.0))})


def _loss_attrs(ctx: NodeContext) -> dict[str, object]:
    reduction = ctx.attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise ctx.unsupported(f"reduction '{reduction}' (expected none, sum or mean)")
    has_ii = ctx.has_attr("ignore_index")
    return {"reduction": reduction, "ignore_index": int(ctx.attr("ignore_index", 0)), "has_ignore_index": has_ii}


def _check_loss_operands(ctx: NodeContext, x: Value, target: Value) -> None:
    require_elems(ctx, x, "NegativeLogLikelihoodLoss")
    if x.type.elem.is_int:
        raise ctx.unsupported(f"input of element kind {x.type.elem.value}")
    if target.type.elem not in (ElemKind.INT32, ElemKind.INT64):
        raise ctx.unsupported(f"target of element kind {target.type.elem.value}")
    _channels(ctx, x)


@import_rule("NegativeLogLikelihoodLoss")
def _nll(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["reduction", "ignore_index"])
    x, t = ctx.req(0), ctx.req(1)
    _check_loss_operands(ctx, x, t)
    return ctx.emit("NegativeLogLikelihoodLoss", [x, t, ctx.input(2)], _loss_attrs(ctx))


@import_rule("SoftmaxCrossEntropyLoss")
def _sce(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["reduction", "ignore_index"])
    x, t = ctx.req(0), ctx.req(1)
    _check_loss_operands(ctx, x, t)
    log_prob = ctx.emit1("LogSoftmax", [x], {"axes": (1,)}, name=f"{ctx.name}_log_prob")
    loss = ctx.emit1("NegativeLogLikelihoodLoss", [log_prob, t, ctx.input(2)], _loss_attrs(ctx))
    return [loss, log_prob]
