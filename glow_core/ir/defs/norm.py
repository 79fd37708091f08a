"""Normalization kinds and losses (inference semantics).

Layout is channels first: ``[N, C, spatial...]``. ``stash`` is the element
kind the statistics are computed in (float32 or float64); float16 and
bfloat16 tensors are always computed in float32 and rounded back at the end.
Axes are normalized by the importer (non-negative, sorted).
"""

from __future__ import annotations

from glow_core.errors import GlowTypeError
from glow_core.ir.defs.common import Attrs, Types, check_elems, req, same_elem
from glow_core.ir.defs.reduce import check_axes, check_axis
from glow_core.ir.kinds import AttrType as A
from glow_core.ir.kinds import Category as C
from glow_core.ir.kinds import attr, define_kind
from glow_core.ir.types import FLOAT_KINDS, ElemKind, TensorType, broadcast_shapes

#: element kinds statistics may be computed (and LayerNormalization's Mean/InvStdDev stored) in
STASH_KINDS = frozenset({ElemKind.FLOAT32, ElemKind.FLOAT64})
#: target/label element kinds of the losses
LABEL_KINDS = frozenset({ElemKind.INT32, ElemKind.INT64})
#: reductions of the losses
LOSS_REDUCTIONS = ("none", "sum", "mean")


def _check_channels(x: TensorType, what: str, min_rank: int = 2) -> int:
    check_elems(x, FLOAT_KINDS, f"{what} input")
    if x.rank < min_rank:
        raise GlowTypeError(f"{what} needs an input [N, C, ...] of rank >= {min_rank}, got {x}")
    return x.shape[1]


def _check_param(t: TensorType | None, shape: tuple[int, ...], name: str) -> None:
    if t is None:
        return
    check_elems(t, FLOAT_KINDS, name)
    if t.shape != shape:
        raise GlowTypeError(f"{name} must have shape {list(shape)}, got {list(t.shape)}")


def _unidirectional(t: TensorType | None, target: tuple[int, ...], name: str) -> None:
    """``t`` broadcasts to ``target`` without changing it."""
    if t is not None and broadcast_shapes(t.shape, target) != target:
        raise GlowTypeError(f"{name} of shape {list(t.shape)} does not broadcast to {list(target)}")


def _check_stash(attrs: Attrs) -> None:
    if attrs["stash"] not in STASH_KINDS:
        raise GlowTypeError(f"stash element kind {attrs['stash'].value} is not float32 or float64")


# -- BatchNormalization -------------------------------------------------------------------

def _batchnorm_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    c = _check_channels(x, "BatchNormalization")
    for i, name in enumerate(("Scale", "Bias", "Mean", "Var"), start=1):
        _check_param(req(types, i), (c,), name)
    return [x]


define_kind("BatchNormalization", inputs=("Input", "Scale", "Bias", "Mean", "Var"),
            attrs=(attr("epsilon", A.FLOAT, 1e-5),), infer=_batchnorm_rule, categories=(C.NORMALIZATION,),
            elems=FLOAT_KINDS,
            doc="Inference: Scale * (x - Mean) / sqrt(Var + epsilon) + Bias per channel (axis 1); "
                "parameters may be of another float kind than Input.")


# -- InstanceNormalization / GroupNormalization -------------------------------------------

def _instancenorm_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    c = _check_channels(x, "InstanceNormalization")
    same_elem(types, 0, 1, 2)
    _check_param(req(types, 1), (c,), "Scale")
    _check_param(req(types, 2), (c,), "Bias")
    return [x]


define_kind("InstanceNormalization", inputs=("Input", "Scale", "Bias"), attrs=(attr("epsilon", A.FLOAT, 1e-5),),
            infer=_instancenorm_rule, categories=(C.NORMALIZATION,), elems=FLOAT_KINDS,
            doc="Per (n, c): normalize over the spatial axes, then Scale[c] * . + Bias[c].")


def _groupnorm_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    c = _check_channels(x, "GroupNormalization")
    same_elem(types, 0, 1, 2)
    g = attrs["num_groups"]
    if g < 1 or c % g:
        raise GlowTypeError(f"num_groups={g} must be positive and divide the {c} channels")
    _check_param(req(types, 1), (c,), "Scale")
    _check_param(req(types, 2), (c,), "Bias")
    _check_stash(attrs)
    return [x]


define_kind("GroupNormalization", inputs=("Input", "Scale", "Bias"),
            attrs=(attr("num_groups", A.INT), attr("epsilon", A.FLOAT, 1e-5),
                   attr("stash", A.ELEM, ElemKind.FLOAT32)),
            infer=_groupnorm_rule, categories=(C.NORMALIZATION,), elems=FLOAT_KINDS,
            doc="Per (n, group of C/num_groups channels): normalize, then per-channel Scale[c] * . + Bias[c].")


# -- LayerNormalization / RMSNormalization ------------------------------------------------

def _layernorm_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    check_elems(x, FLOAT_KINDS, "LayerNormalization input")
    same_elem(types, 0, 1, 2)
    axis = attrs["axis"]
    check_axis(axis, x.rank)
    _unidirectional(req(types, 1), x.shape, "Scale")
    _unidirectional(types[2] if len(types) > 2 else None, x.shape, "Bias")
    _check_stash(attrs)
    stat = TensorType(attrs["stash"], tuple(d if i < axis else 1 for i, d in enumerate(x.shape)))
    return [x, stat, stat]


define_kind("LayerNormalization", inputs=("Input", "Scale", "Bias?"), outputs=("Result", "Mean", "InvStdDev"),
            attrs=(attr("axis", A.INT), attr("epsilon", A.FLOAT, 1e-5), attr("stash", A.ELEM, ElemKind.FLOAT32)),
            infer=_layernorm_rule, categories=(C.NORMALIZATION,),
            elems=FLOAT_KINDS,
            doc="Normalize over axes axis..rank-1 (statistics in stash precision, rounded to Input's kind), "
                "then * Scale + Bias (broadcast). Mean and InvStdDev have shape [d0..d(axis-1), 1...].")


def _rmsnorm_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    check_elems(x, FLOAT_KINDS, "RMSNormalization input")
    same_elem(types, 0, 1)
    check_axis(attrs["axis"], x.rank)
    _unidirectional(req(types, 1), x.shape, "Scale")
    _check_stash(attrs)
    return [x]


define_kind("RMSNormalization", inputs=("Input", "Scale"),
            attrs=(attr("axis", A.INT), attr("epsilon", A.FLOAT, 1e-5), attr("stash", A.ELEM, ElemKind.FLOAT32)),
            infer=_rmsnorm_rule, categories=(C.NORMALIZATION,), elems=FLOAT_KINDS,
            doc="x / sqrt(mean(x*x over axis..rank-1) + epsilon) (in stash precision, rounded), then * Scale.")


# -- LpNormalization / MeanVarianceNormalization / LRN -------------------------------------

def _lpnorm_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    check_elems(x, FLOAT_KINDS, "LpNormalization input")
    if x.rank == 0:
        raise GlowTypeError("LpNormalization needs an input of rank >= 1")
    check_axis(attrs["axis"], x.rank)
    if attrs["p"] not in (1, 2):
        raise GlowTypeError(f"p={attrs['p']} must be 1 or 2")
    return [x]


define_kind("LpNormalization", inputs=("Input",), attrs=(attr("axis", A.INT), attr("p", A.INT, 2)),
            infer=_lpnorm_rule, categories=(C.NORMALIZATION,), elems=FLOAT_KINDS,
            doc="x / ||x||_p along axis; 0 where the norm is 0.")


def _mvn_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    check_elems(x, FLOAT_KINDS, "MeanVarianceNormalization input")
    check_axes(attrs["axes"], x.rank)
    return [x]


define_kind("MeanVarianceNormalization", inputs=("Input",),
            attrs=(attr("axes", A.INTS), attr("epsilon", A.FLOAT, 1e-9, doc="added to the standard deviation")),
            infer=_mvn_rule, categories=(C.NORMALIZATION,), elems=FLOAT_KINDS,
            doc="(x - mean) / (sqrt(variance) + epsilon) with mean and (biased) variance over axes.")


def _lrn_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    _check_channels(x, "LRN", 3)
    if attrs["size"] < 1:
        raise GlowTypeError(f"size={attrs['size']} must be >= 1")
    return [x]


define_kind("LRN", inputs=("Input",),
            attrs=(attr("size", A.INT), attr("alpha", A.FLOAT, 1e-4), attr("beta", A.FLOAT, 0.75),
                   attr("bias", A.FLOAT, 1.0)),
            infer=_lrn_rule, categories=(C.NORMALIZATION,), elems=FLOAT_KINDS,
            doc="x / (bias + alpha/size * sum of x^2 over channels [c-(size-1)//2, c+size//2])^beta.")


# -- NegativeLogLikelihoodLoss -------------------------------------------------------------

def _nll_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x, t = req(types, 0), req(types, 1)
    w = types[2] if len(types) > 2 else None
    c = _check_channels(x, "NegativeLogLikelihoodLoss")
    check_elems(t, LABEL_KINDS, "target")
    if t.shape != x.shape[:1] + x.shape[2:]:
        raise GlowTypeError(f"target must have shape {[x.shape[0], *x.shape[2:]]}, got {list(t.shape)}")
    if w is not None:
        same_elem(types, 0, 2)
        _check_param(w, (c,), "Weight")
    if attrs["reduction"] not in LOSS_REDUCTIONS:
        raise GlowTypeError(f"reduction '{attrs['reduction']}' must be one of {', '.join(LOSS_REDUCTIONS)}")
    shape = t.shape if attrs["reduction"] == "none" else ()
    return [TensorType(x.elem, shape)]


define_kind("NegativeLogLikelihoodLoss", inputs=("Input", "Target", "Weight?"),
            attrs=(attr("reduction", A.STRING, "mean"), attr("ignore_index", A.INT, 0),
                   attr("has_ignore_index", A.BOOL, False)),
            infer=_nll_rule, categories=(C.REDUCTION,), elems=FLOAT_KINDS | LABEL_KINDS,
            doc="loss = -Input[n, Target[n, d...], d...] * Weight[target] (0 where Target == ignore_index); "
                "mean divides by the summed weights of the counted samples.")
