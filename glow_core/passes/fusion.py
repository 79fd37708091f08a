"""Post-lowering passes: ``fuse-activations`` and ``backend-transforms``.

``fuse-activations`` turns

    Conv(x, W, B) -> act                    into  FusedConv(x, W, B){activation}
    Conv(x, W, B) -> Add(R) [-> act]        into  FusedConv(x, W, B, R){activation}  (R: the result's type)
    MatMul(a, b) [-> Add(bias)] [-> act]    into  FusedMatMul(a, b, bias){activation}

(and the transformer blocks of ``fusion_blocks``: layer normalization over the
last axis into FusedLayerNorm, scaled dot-product attention into FusedAttention;
a MatMul is tried as attention scores first), where ``act`` is any of the forms an activation takes
before or after lowering:
``Relu``, ``Max(y, 0)`` (relu), ``Clip(y, lo, hi)`` with constant bounds,
``Min(Max(y, lo), hi)``, ``Max(y, lo)``, ``Min(y, hi)`` and ``Max(Min(y, hi), lo)``
(clip; the last one only when lo <= hi, where both orders agree), and, for float32 results,
``HardSwish`` and its lowering ``Mul(y, Max(Min(Div(Add(y, 3), 6), 1), 0))`` (hardswish: y read by
the Add and the Mul alone, the constants exactly 3, 6, 1 and +0, Add / Min / Max / Mul in either
operand order), and the ReLU6 form exporters write, ``Div(Mul(y, Clip(Add(y, 3), 0, 6)), 6)`` with the
Clip as a node or as ``Min(Max(., 0), 6)`` (hardswish6: the same conditions, the Div's 6 its divisor).

It fuses only

- when the target backend (``ctx.backend``) declares the fused kind among its
  supported kinds and accepts the fused node (element kinds, ``supports_node``),
- when every intermediate result is read by the next node alone and is not a
  function output (otherwise it would have to be computed anyway),
- residuals, layer norms, attention blocks and activations without an int8 form (hardswish) only
  unless ``ctx.options["quantizable"]`` is set
  (``prepare_function(..., quantizable=True)``, for the graphs the int8 conversion and its profile see:
  it quantizes their pieces one by one),
- bounds that are constant, one value, not NaN, that do not change the shape
  by broadcasting, and (integer results) that a float64 holds exactly.

``backend-transforms`` calls the backend's own ``transform_post_lowering``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from glow_core.ir.graph import Constant, Function, Node, Value
from glow_core.ir.kinds import KindTable
from glow_core.ir.types import ElemKind
from glow_core.passes.fusion_blocks import attention_fusion, layernorm_fusion
from glow_core.passes.rewrite import Fusion, create_before, erase_if_dead, is_private_to, splat
from glow_core.passinfra import PassContext, graph_pass


@dataclass(frozen=True)
class Activation:
    """An activation matched after a producer: its attributes and the nodes it spans."""

    lo: float
    hi: float
    nodes: tuple[Node, ...]
    kind: str = "clip"  # (or relu, which the bounds say) / hardswish

    @property
    def attrs(self) -> dict[str, Any]:
        if self.kind != "clip":
            return {"activation": self.kind}
        if self.lo == 0.0 and math.isinf(self.hi) and self.hi > 0:
            return {"activation": "relu"}
        return {"activation": "clip", "clip_min": self.lo, "clip_max": self.hi}

    @property
    def last(self) -> Node:
        return self.nodes[-1]


def _bound(v: Value | None, y: Value, absent: float) -> float | None:
    """A clip bound as a float, or None if unusable (not a one-value constant, NaN, inexact)."""
    if v is None:
        return absent
    s = splat(v)
    if s is None or not isinstance(v, Constant):
        return None
    with np.errstate(all="ignore"):
        f = float(s)
    if math.isnan(f):
        return None
    if y.type.elem.is_int and (math.isinf(f) or int(f) != int(s)):
        return None
    return f


def _other(node: Node, y: Value) -> Value | None:
    a, b = node.inputs
    return b if a is y else a if b is y else None


def _reader(fn: Function, y: Value, kinds: tuple[str, ...]) -> Node | None:
    """The node of one of ``kinds`` that alone reads ``y``, or None."""
    users = y.user_nodes()
    if len(users) != 1 or users[0].kind.name not in kinds or not is_private_to(fn, y, users[0]):
        return None
    n = users[0]
    return n if n.result.type == y.type else None


def _minmax_step(fn: Function, y: Value, kind: str) -> tuple[Node, float] | None:
    """``Max(y, c)`` / ``Min(y, c)`` reading ``y`` alone: (node, c)."""
    n = _reader(fn, y, (kind,))
    if n is None or n.inputs[0] is n.inputs[1]:
        return None
    other = _other(n, y)
    c = _bound(other, y, 0.0) if other is not None else None
    return (n, c) if c is not None else None


def _const_is(n: Node, v: Value, value: float, commutes: bool) -> bool:
    """``n`` computes ``n(v, c)`` (or ``n(c, v)`` when it commutes) with ``v``'s type, c a float32
    constant that is bitwise ``value`` everywhere."""
    if n.inputs[0] is n.inputs[1] or (not commutes and n.inputs[0] is not v) or n.result.type != v.type:
        return False
    return _is_f32(_other(n, v), value)


def _is_f32(c: Value | None, value: float) -> bool:
    """``c`` is a float32 constant that is bitwise ``value`` everywhere."""
    s = splat(c) if isinstance(c, Constant) else None
    if s is None or c is None or c.type.elem is not ElemKind.FLOAT32:
        return False
    return np.asarray(s, np.float32).tobytes() == np.float32(value).tobytes()


def _const_step(fn: Function, v: Value, kind: str, value: float, commutes: bool = True) -> Node | None:
    """The node of ``kind`` that alone reads ``v`` with the constant ``value`` (see _const_is), or None."""
    n = _reader(fn, v, (kind,))
    return n if n is not None and _const_is(n, v, value, commutes) else None


def _add_3(fn: Function, y: Value) -> tuple[list[Node], Node] | None:
    """(y's two readers, the ``Add(y, 3)`` among them) when ``y`` is float32, not an output, and read once
    by that Add and once by one other node (the Mul of a hard swish chain), else None."""
    if y.type.elem is not ElemKind.FLOAT32:
        return None
    users = y.user_nodes()
    if len(users) != 2 or len(y.users) != 2 or fn.is_output(y):
        return None
    add = next((u for u in users if u.kind.name == "Add" and _const_is(u, y, 3.0, True)), None)
    return (users, add) if add is not None else None


def _hardswish(fn: Function, y: Value) -> Activation | None:
    """HardSwish reading ``y`` alone, as a node or as its lowering
    ``Mul(y, Max(Min(Div(Add(y, 3), 6), 1), 0))`` (float32 only)."""
    if y.type.elem is not ElemKind.FLOAT32:
        return None
    node = _reader(fn, y, ("HardSwish",))
    if node is not None:
        return Activation(0.0, 0.0, (node,), "hardswish")
    found = _add_3(fn, y)
    if found is None:
        return None
    users, add = found
    steps, v = [add], add.result
    for kind, value, commutes in (("Div", 6.0, False), ("Min", 1.0, True), ("Max", 0.0, True)):
        n = _const_step(fn, v, kind, value, commutes)
        if n is None:
            return None
        steps.append(n)
        v = n.result
    mul = _reader(fn, v, ("Mul",))
    if mul is None or not any(u is mul for u in users) or _other(mul, v) is not y:
        return None
    return Activation(0.0, 0.0, (*steps, mul), "hardswish")


def _clip_0_6(fn: Function, v: Value) -> list[Node] | None:
    """``Clip(v, 0, 6)`` or ``Min(Max(v, 0), 6)`` reading ``v`` alone (float32 constants, bitwise)."""
    clip = _reader(fn, v, ("Clip",))
    if clip is not None:
        bounds = clip.inputs[1:]
        if clip.inputs[0] is v and len(bounds) == 2 and _is_f32(bounds[0], 0.0) and _is_f32(bounds[1], 6.0):
            return [clip]
        return None
    mx = _const_step(fn, v, "Max", 0.0)
    mn = _const_step(fn, mx.result, "Min", 6.0) if mx is not None else None
    return [mx, mn] if mx is not None and mn is not None else None


def _hardswish6(fn: Function, y: Value) -> Activation | None:
    """Hard swish in its ReLU6 form ``Div(Mul(y, Clip(Add(y, 3), 0, 6)), 6)`` reading ``y`` alone (the Add
    and the Mul read it; float32 only; the Clip may be lowered to Max then Min)."""
    found = _add_3(fn, y)
    clip = _clip_0_6(fn, found[1].result) if found is not None else None
    if found is None or clip is None:
        return None
    users, add = found
    mul = _reader(fn, clip[-1].result, ("Mul",))
    if mul is None or not any(u is mul for u in users) or _other(mul, clip[-1].result) is not y:
        return None
    div = _const_step(fn, mul.result, "Div", 6.0, commutes=False)
    return Activation(0.0, 0.0, (add, *clip, mul, div), "hardswish6") if div is not None else None


def match_activation(fn: Function, y: Value) -> Activation | None:
    """The activation applied to ``y`` (read by it alone), in any of its forms, or None."""
    relu = _reader(fn, y, ("Relu",))
    if relu is not None:
        return Activation(0.0, math.inf, (relu,))
    hswish = _hardswish(fn, y) or _hardswish6(fn, y)
    if hswish is not None:
        return hswish
    clip = _reader(fn, y, ("Clip",))
    if clip is not None and clip.inputs[0] is y and y not in clip.inputs[1:]:
        lo = _bound(clip.inputs[1] if len(clip.inputs) > 1 else None, y, -math.inf)
        hi = _bound(clip.inputs[2] if len(clip.inputs) > 2 else None, y, math.inf)
        return Activation(lo, hi, (clip,)) if lo is not None and hi is not None else None
    mx = _minmax_step(fn, y, "Max")
    if mx is not None:
        node, lo = mx
        mn = _minmax_step(fn, node.result, "Min")
        if mn is not None:
            return Activation(lo, mn[1], (node, mn[0]))
        return Activation(lo, math.inf, (node,))
    mn = _minmax_step(fn, y, "Min")
    if mn is not None:
        node, hi = mn
        mx = _minmax_step(fn, node.result, "Max")
        if mx is not None and mx[1] <= hi:
            return Activation(mx[1], hi, (node, mx[0]))
        return Activation(-math.inf, hi, (node,))
    return None


# -- fusing ---------------------------------------------------------------------------------------

def _conv_fusion(fn: Function, conv: Node) -> Fusion | None:
    y = conv.result
    act = match_activation(fn, y)
    if act is not None:
        return Fusion("FusedConv", conv.inputs, {**conv.attrs, **act.attrs}, (conv, *act.nodes))
    add = _reader(fn, y, ("Add",))
    residual = _other(add, y) if add is not None and add.inputs[0] is not add.inputs[1] else None
    if add is None or residual is None or residual.type != y.type:
        return None
    act = match_activation(fn, add.result)
    attrs = act.attrs if act is not None else {"activation": "none"}
    inputs = (*conv.inputs, None, None)[:3]
    return Fusion("FusedConv", (*inputs, residual), {**conv.attrs, **attrs},
                  (conv, add, *(act.nodes if act is not None else ())))


def _matmul_fusion(fn: Function, mm: Node) -> Fusion | None:
    y = mm.result
    nodes: tuple[Node, ...] = (mm,)
    bias: Value | None = None
    add = _reader(fn, y, ("Add",))
    if add is not None and add.inputs[0] is not add.inputs[1]:
        bias = _other(add, y)
        nodes, y = (mm, add), add.result
    act = match_activation(fn, y)
    if act is None and bias is None:
        return None
    attrs = act.attrs if act is not None else {"activation": "none"}
    return Fusion("FusedMatMul", (mm.inputs[0], mm.inputs[1], bias), attrs, nodes + (act.nodes if act else ()))


def _dequant_matmul_fusion(fn: Function, mm: Node) -> Fusion | None:
    """A DequantMatMul without bias or activation takes the bias Add and activation that follow it."""
    if mm.inputs[3] is not None or mm.attrs["activation"] != "none":
        return None
    fused = _matmul_fusion(fn, mm)
    if fused is None:
        return None
    return Fusion("DequantMatMul", (*mm.inputs[:3], fused.inputs[2]), fused.attrs, fused.nodes)


FusionRule = Callable[[Function, Node], "Fusion | None"]
#: producer kind -> the rules of how it fuses with what follows it, tried in order (the first that
#: the backend accepts wins)
FUSIONS = KindTable("fusions")
FUSIONS.add("Conv", (_conv_fusion,))
FUSIONS.add("MatMul", (attention_fusion, _matmul_fusion))
FUSIONS.add("DequantMatMul", (_dequant_matmul_fusion,))
FUSIONS.add("ReduceMean", (layernorm_fusion,))
FUSIONS.add("ReduceSum", (layernorm_fusion,))


def _apply(fn: Function, fusion: Fusion, ctx: PassContext) -> bool:
    last = fusion.nodes[-1]
    fused = create_before(fn, last, fusion.kind, fusion.inputs, fusion.attrs, origin_of=fusion.nodes[0])
    assert ctx.backend is not None
    if fused.result.type != last.result.type or not ctx.backend.supports(fused):
        fn.erase_node(fused)
        return False
    fn.replace_all_uses_with(last.result, fused.result)
    erase_if_dead(fn, *reversed(fusion.nodes))
    return True


#: the activations the int8 conversion quantizes with their node (a clip of the quantized result); a
#: fused node with another one (hardswish) stays float, so the pass does not make one in quantizable mode
QUANTIZABLE_ACTIVATIONS = frozenset({"none", "relu", "clip"})
#: fused kinds the int8 conversion does not quantize as one node: it quantizes their pieces instead
_BLOCK_KINDS = frozenset({"FusedLayerNorm", "FusedAttention"})


def _not_quantizable(fusion: Fusion) -> bool:
    """A fusion the int8 conversion would have to undo: a block, a FusedConv with a residual operand,
    or an activation that has no int8 form."""
    residual = fusion.kind == "FusedConv" and len(fusion.inputs) > 3 and fusion.inputs[3] is not None
    act = fusion.attrs.get("activation", "none")
    return residual or fusion.kind in _BLOCK_KINDS or act not in QUANTIZABLE_ACTIVATIONS


@graph_pass("fuse-activations")
def fuse_activations(fn: Function, ctx: PassContext) -> bool:
    """Fuse Conv / MatMul (+ bias Add) with a following Relu, clip or HardSwish into FusedConv / FusedMatMul,
    layer normalizations into FusedLayerNorm, attention blocks into FusedAttention, when the backend
    supports the fused kind."""
    if ctx.backend is None:
        return False
    supported = ctx.backend.supported_kinds()
    changed = False
    for node in list(fn.nodes):
        for rule in FUSIONS.get(node.kind.name, ()):
            if node.function is not fn:
                break
            fusion = rule(fn, node)
            if fusion is not None and ctx.options.get("quantizable", False) and _not_quantizable(fusion):
                continue  # (the int8 conversion quantizes the pieces separately)
            if fusion is not None and fusion.kind in supported and _apply(fn, fusion, ctx):
                changed = True
                break
    if changed:
        fn.erase_unused_constants()
    return changed


@graph_pass("backend-transforms")
def backend_transforms(fn: Function, ctx: PassContext) -> bool:
    """The backend's own post-lowering rewrites (``Backend.transform_post_lowering``)."""
    if ctx.backend is None:
        return False
    return bool(ctx.backend.transform_post_lowering(fn))
