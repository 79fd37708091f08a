"""Transformer-block patterns for ``fuse-activations``: layer normalization and attention.

Layer normalization over the last axis, as exporters write it and as the
LayerNormalization lowering (``lowering/rules/norm.py``) leaves it::

    m   = mean(x)                 ReduceMean(x){axes=[last], keepdims}  or  Div(ReduceSum(x){...}, L)
    d   = Sub(x, m)
    var = mean(Pow(d, 2) | Mul(d, d))
    std = Sqrt(Add(var, eps))     eps a one-value constant >= 0 (no Add: eps 0)
    n   = Div(d, std)             or  Mul(d, Div(1, std))
    y   = Mul(n, gamma) [-> Add(beta)]  gamma / beta vary along the last axis only

becomes ``FusedLayerNorm(x, gamma, beta){epsilon}``. Scaled dot-product attention::

    s = MatMul(q, kt) [-> Mul | Div by a one-value constant] [-> Add(mask)]
    y = MatMul(Softmax(s){axes=[last]}, v)      q, kt, v of one rank and the same leading axes

becomes ``FusedAttention(q, kt, v, mask){scale, scale_op}``. Every intermediate
value must be read by the pattern alone (``d`` by its two readers) and must not
be a function output; anything else (another axis, eps elsewhere, a shared
intermediate) is left as it is.
"""

from __future__ import annotations

import math

from glow_core.ir.graph import Constant, Function, Node, Value
from glow_core.passes.rewrite import Fusion, splat


def _sole(fn: Function, v: Value, kinds: tuple[str, ...]) -> Node | None:
    """The node of one of ``kinds`` that alone reads ``v`` (not a function output), or None."""
    users = v.user_nodes()
    if len(users) != 1 or fn.is_output(v) or users[0].kind.name not in kinds:
        return None
    return users[0]


def _const(v: Value | None) -> float | None:
    """The one value of a constant operand as a float (None when not a one-value float constant)."""
    if not isinstance(v, Constant) or not v.type.elem.is_float:
        return None
    s = splat(v)
    return None if s is None else float(s)


def _other(node: Node, v: Value) -> Value | None:
    """The operand of binary ``node`` that is not ``v`` (None unless v is exactly one operand)."""
    a, b = node.inputs
    if a is v and b is not v:
        return b
    return a if b is v and a is not v else None


def _last_axis(node: Node, x: Value) -> bool:
    axes = tuple(a % x.type.rank for a in node.attrs["axes"])
    return node.inputs[0] is x and axes == (x.type.rank - 1,) and bool(node.attrs["keepdims"])


def _mean(fn: Function, node: Node, x: Value) -> tuple[tuple[Node, ...], Value] | None:
    """``node`` computes the mean of ``x`` over its last axis (kept): (its nodes, the mean)."""
    if node.kind.name not in ("ReduceMean", "ReduceSum") or not _last_axis(node, x):
        return None
    if node.kind.name == "ReduceMean":
        return (node,), node.result
    div = _sole(fn, node.result, ("Div",))
    if div is None or div.inputs[0] is not node.result or _const(div.inputs[1]) != x.type.shape[-1]:
        return None
    return (node, div), div.result


def _square(n: Node, d: Value) -> bool:
    if n.kind.name == "Mul":
        return n.inputs[0] is d and n.inputs[1] is d
    return n.kind.name == "Pow" and n.inputs[0] is d and _const(n.inputs[1]) == 2.0


def _row_param(p: Value | None, x: Value) -> bool:
    """``p`` varies along the last axis of ``x`` only (what FusedLayerNorm accepts)."""
    if p is None:
        return False
    s, last = p.type.shape, x.type.shape[-1]
    return p.type.rank <= x.type.rank and all(k == 1 for k in s[:-1]) and (not s or s[-1] in (1, last))


def _normalized(fn: Function, d: Value, std: Value) -> tuple[tuple[Node, ...], Node] | None:
    """The node giving d / std: Div(d, std), or Mul(d, Div(1, std)); with the nodes after Sqrt."""
    div = _sole(fn, std, ("Div",))
    if div is None:
        return None
    if div.inputs[0] is d and div.inputs[1] is std:
        return (div,), div
    if div.inputs[1] is not std or _const(div.inputs[0]) != 1.0:
        return None
    mul = _sole(fn, div.result, ("Mul",))
    if mul is None or _other(mul, div.result) is not d:
        return None
    return (div, mul), mul


def _variance(fn: Function, d: Value) -> tuple[tuple[Node, ...], Node, float] | None:
    """From ``d`` (two readers: its square and the normalization) to the node giving d / std,
    with every node in between and epsilon."""
    readers = d.user_nodes()
    if len(readers) != 2 or fn.is_output(d):
        return None
    sq = next((n for n in readers if _square(n, d)), None)
    if sq is None:
        return None
    reduce = _sole(fn, sq.result, ("ReduceMean", "ReduceSum"))
    var = _mean(fn, reduce, sq.result) if reduce is not None else None
    if var is None:
        return None
    eps_nodes, eps, v = _epsilon(fn, var[1])
    sqrt = _sole(fn, v, ("Sqrt",)) if eps is not None else None
    norm = _normalized(fn, d, sqrt.result) if sqrt is not None else None
    if norm is None or sqrt is None or eps is None or not {id(n) for n in readers} == {id(sq), id(norm[1])}:
        return None
    return (sq, *var[0], *eps_nodes, sqrt, *norm[0]), norm[1], eps


def _epsilon(fn: Function, var: Value) -> tuple[tuple[Node, ...], float | None, Value]:
    """The Add of epsilon (a one-value constant >= 0) to the variance: (its node, epsilon, the sum); no
    Add is epsilon 0 (``simplify-arith`` removes an Add of 0)."""
    add = _sole(fn, var, ("Add",))
    if add is None:
        return (), 0.0, var
    eps = _const(_other(add, var))
    if eps is None or not eps >= 0.0 or add.result.type != var.type:
        return (), None, var
    return (add,), eps, add.result


def layernorm_fusion(fn: Function, first: Node) -> Fusion | None:
    """The layer normalization whose first mean is ``first`` (ReduceMean or ReduceSum), or None."""
    x = first.inputs[0]
    if x is None or not x.type.elem.is_float or x.type.rank < 1:
        return None
    mean = _mean(fn, first, x)
    sub = _sole(fn, mean[1], ("Sub",)) if mean is not None else None
    if mean is None or sub is None or sub.inputs[0] is not x or sub.inputs[1] is not mean[1]:
        return None
    d = sub.result
    var = _variance(fn, d)
    if var is None or d.type != x.type:
        return None
    between, norm, eps = var
    scale = _sole(fn, norm.result, ("Mul",))
    gamma = _other(scale, norm.result) if scale is not None else None
    if scale is None or not _row_param(gamma, x) or scale.result.type != x.type:
        return None
    nodes = (*mean[0], sub, *between, scale)
    shift = _sole(fn, scale.result, ("Add",))
    beta = _other(shift, scale.result) if shift is not None else None
    if shift is not None and _row_param(beta, x) and shift.result.type == x.type:
        nodes += (shift,)
    else:
        beta = None
    return Fusion("FusedLayerNorm", (x, gamma, beta), {"epsilon": eps}, nodes)


# -- attention --------------------------------------------------------------------------------------------

def _scaled(fn: Function, s: Value) -> tuple[tuple[Node, ...], Value, float, str]:
    """The Mul / Div of the scores by a one-value constant, if any: (nodes, result, scale, op)."""
    n = _sole(fn, s, ("Mul", "Div"))
    if n is None or n.result.type != s.type:
        return (), s, 1.0, "mul"
    c = _const(n.inputs[1]) if n.inputs[0] is s else None
    if c is None and n.kind.name == "Mul" and n.inputs[1] is s:
        c = _const(n.inputs[0])
    if c is None or math.isnan(c):
        return (), s, 1.0, "mul"
    return (n,), n.result, c, "mul" if n.kind.name == "Mul" else "div"


def attention_fusion(fn: Function, mm: Node) -> Fusion | None:
    """The attention block whose scores are the MatMul ``mm``, or None."""
    q, kt = mm.inputs
    s = mm.result
    if q is None or kt is None or not s.type.elem.is_float or not (q.type.rank == kt.type.rank >= 2) \
            or q.type.shape[:-2] != kt.type.shape[:-2]:
        return None
    nodes, s, scale, op = _scaled(fn, s)
    add = _sole(fn, s, ("Add",))
    mask = _other(add, s) if add is not None else None
    if add is not None and mask is not None and add.result.type == s.type and mask.type.rank <= s.type.rank:
        nodes, s = nodes + (add,), add.result
    else:
        mask = None
    sm = _sole(fn, s, ("Softmax",))
    if sm is None or tuple(sm.attrs["axes"]) != (s.type.rank - 1,):
        return None
    pv = _sole(fn, sm.result, ("MatMul",))
    v = pv.inputs[1] if pv is not None and pv.inputs[0] is sm.result else None
    if pv is None or v is None or v is sm.result or v.type.rank != q.type.rank \
            or v.type.shape[:-2] != q.type.shape[:-2]:
        return None
    return Fusion("FusedAttention", (q, kt, v, mask), {"scale": scale, "scale_op": op}, (mm, *nodes, sm, pv))
