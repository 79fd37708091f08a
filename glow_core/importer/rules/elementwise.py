"""Import rules for element-wise ONNX operators (opsets 7 to 28).

Most ONNX element-wise ops map one-to-one onto a graph kind of the same name
(``glow_core.ir.defs.elementwise``) whose attributes carry the ONNX names and
defaults; those are table-driven below. The rest normalize:

- Greater / GreaterOrEqual -> Less / LessOrEqual with swapped operands;
- Sum, Max, Min (variadic) -> a chain of binary nodes; Mean -> Add chain / n;
- Clip: attributes (opset < 11) or optional scalar operands (>= 11) -> a Clip node
  whose bounds are graph operands;
- Cast / CastLike -> Cast with the target element kind, ``saturate`` and ``round_mode``
  (float8, float8e8m0, float4e2m1, int4 / uint4 and int2 / uint2 included; string is unsupported).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from glow_core.errors import GlowTypeError
from glow_core.importer.context import NodeContext, import_rule, onnx_elem
from glow_core.ir.defs.elementwise import INPUT_ELEMS
from glow_core.ir.graph import Value
from glow_core.ir.kinds import get_kind
from glow_core.ir.types import FLOAT_KINDS, ElemKind


def check_elems(ctx: NodeContext, kind: str, values: Sequence[Value | None],
                allowed: frozenset[ElemKind] | None = None) -> None:
    """Refuse (as unsupported) operands whose element kind ``kind`` does not take."""
    ok = INPUT_ELEMS[kind] if allowed is None else allowed
    for v in values:
        if v is not None and v.elem not in ok:
            raise ctx.unsupported(
                f"{ctx.op_type} on {v.elem.value} tensors is not supported "
                f"(supported: {', '.join(sorted(e.value for e in ok))})"
            )


def _kind_attrs(ctx: NodeContext, kind: str) -> dict[str, object]:
    """The ONNX attributes that ``kind`` declares under the same names (absent ones take the kind's defaults)."""
    names = [a.name for a in get_kind(kind).attrs]
    ctx.check_attrs(names)
    return {n: ctx.attr(n) for n in names if ctx.has_attr(n)}


# -- one-to-one ops --------------------------------------------------------------

#: ONNX ops imported as the graph kind of the same name, operands and attributes unchanged
_UNARY_OPS = (
    "Abs", "Neg", "Sign", "Ceil", "Floor", "Round", "Sqrt", "Reciprocal", "Exp", "Log", "Erf",
    "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
    "Tanh", "Sigmoid", "Not", "BitwiseNot", "Relu", "Softplus", "Softsign", "Mish", "HardSwish",
    "LeakyRelu", "Elu", "Celu", "Selu", "HardSigmoid", "ThresholdedRelu", "Swish", "Shrink",
    "IsNaN", "IsInf",
)
_BINARY_OPS = (
    "Add", "Sub", "Mul", "Div", "And", "Or", "Xor", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
    "Equal", "Less", "LessOrEqual", "Pow", "PRelu",
)


def _same_kind_rule(ctx: NodeContext) -> list[Value]:
    kind = ctx.op_type
    attrs = _kind_attrs(ctx, kind)
    n = len(get_kind(kind).inputs)
    operands = [ctx.req(i) for i in range(n)]
    check_elems(ctx, kind, operands)  # Pow: the exponent may differ from the base, both numeric
    return ctx.emit(kind, operands, attrs)


for _op in _UNARY_OPS + _BINARY_OPS:
    import_rule(_op)(_same_kind_rule)


@import_rule("Gelu")
def _gelu(ctx: NodeContext) -> list[Value]:
    attrs = _kind_attrs(ctx, "Gelu")
    if attrs.get("approximate", "none") not in ("none", "tanh"):
        raise ctx.unsupported(f"approximate={attrs['approximate']!r} (expected 'none' or 'tanh')")
    x = ctx.req(0)
    check_elems(ctx, "Gelu", [x])
    return ctx.emit("Gelu", [x], attrs)


@import_rule("BitShift")
def _bitshift(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["direction"])
    direction = ctx.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise ctx.unsupported(f"direction={direction!r} (expected 'LEFT' or 'RIGHT')")
    a, b = ctx.req(0), ctx.req(1)
    check_elems(ctx, "BitShift", [a, b])
    return ctx.emit("BitShift", [a, b], {"direction": direction})


@import_rule("Mod")
def _mod(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["fmod"])
    fmod = int(ctx.attr("fmod", 0))
    if fmod not in (0, 1):
        raise ctx.unsupported(f"fmod={fmod} (expected 0 or 1)")
    a, b = ctx.req(0), ctx.req(1)
    check_elems(ctx, "Mod", [a, b])
    return ctx.emit("Mod", [a, b], {"fmod": bool(fmod)})


@import_rule("Where")
def _where(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs([])
    cond, a, b = ctx.req(0), ctx.req(1), ctx.req(2)
    check_elems(ctx, "Where", [cond], frozenset({ElemKind.BOOL}))
    check_elems(ctx, "Where", [a, b])
    return ctx.emit("Where", [cond, a, b])


# -- normalized ops ----------------------------------------------------------------


@import_rule("Greater", "GreaterOrEqual")
def _greater(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs([])
    kind = "Less" if ctx.op_type == "Greater" else "LessOrEqual"
    a, b = ctx.req(0), ctx.req(1)
    check_elems(ctx, kind, [a, b])
    return ctx.emit(kind, [b, a])  # a > b  <=>  b < a


def _chain(ctx: NodeContext, kind: str) -> Value:
    """Fold the variadic operands with a binary kind (broadcasting across all of them)."""
    if ctx.num_inputs == 0:
        raise ctx.unsupported("no operands")
    values = [ctx.req(i) for i in range(ctx.num_inputs)]
    check_elems(ctx, kind, values)
    acc = values[0]
    for v in values[1:]:
        acc = ctx.emit1(kind, [acc, v])
    return acc


@import_rule("Sum")
def _sum(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs([])
    return [_chain(ctx, "Add")]


@import_rule("Max", "Min")
def _max_min(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs([])
    return [_chain(ctx, ctx.op_type)]


@import_rule("Mean")
def _mean(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs([])
    check_elems(ctx, "Add", ctx.inputs(), FLOAT_KINDS)
    total = _chain(ctx, "Add")
    if ctx.num_inputs == 1:
        return [total]
    n = ctx.constant(np.array(ctx.num_inputs, dtype=total.type.dtype), name=f"{ctx.name}_count")
    return ctx.emit("Div", [total, n])


@import_rule("Clip")
def _clip(ctx: NodeContext) -> list[Value]:
    x = ctx.req(0)
    check_elems(ctx, "Clip", [x])
    if ctx.opset < 11:
        # attribute form; the defaults are the float32 limits (so +-inf clip to them)
        ctx.check_attrs(["min", "max"])
        check_elems(ctx, "Clip", [x], FLOAT_KINDS)
        big = float(np.finfo(np.float32).max)
        with np.errstate(over="ignore"):  # float16: the limits become +-inf
            lo_a = np.array(ctx.attr("min", -big), dtype=x.type.dtype)
            hi_a = np.array(ctx.attr("max", big), dtype=x.type.dtype)
        lo = ctx.constant(lo_a, name=f"{ctx.name}_min")
        hi = ctx.constant(hi_a, name=f"{ctx.name}_max")
        return ctx.emit("Clip", [x, lo, hi])
    ctx.check_attrs([])
    lo_v, hi_v = ctx.input(1), ctx.input(2)
    for name, v in (("min", lo_v), ("max", hi_v)):
        if v is not None and (v.elem != x.elem or v.type.size != 1):
            raise ctx.unsupported(f"'{name}' must be a one-element {x.elem.value} tensor, got {v.type}")
    if lo_v is None and hi_v is None:
        return [x]
    return ctx.emit("Clip", [x, lo_v, hi_v])


def _cast_to(ctx: NodeContext, x: Value, to: ElemKind) -> list[Value]:
    check_elems(ctx, "Cast", [x])
    if to == x.elem:
        return [x]
    # saturate (default 1) only matters for float8 / float8e8m0 targets; round_mode only for float8e8m0
    saturate = int(ctx.attr("saturate", 1))
    if saturate not in (0, 1):
        raise GlowTypeError(f"{ctx.where()}: saturate must be 0 or 1, got {saturate}")
    round_mode = str(ctx.attr("round_mode", "up"))
    if round_mode not in ("up", "down", "nearest"):
        raise GlowTypeError(f"{ctx.where()}: round_mode must be up, down or nearest, got {round_mode!r}")
    return ctx.emit("Cast", [x], {"to": to, "saturate": saturate, "round_mode": round_mode})


@import_rule("Cast")
def _cast(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["to", "saturate", "round_mode"])
    to = ctx.attr("to")
    if to is None:
        raise ctx.unsupported("attribute 'to' is missing")
    return _cast_to(ctx, ctx.req(0), onnx_elem(int(to), f"{ctx.where()}: target type"))


@import_rule("CastLike")
def _cast_like(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["saturate", "round_mode"])
    return _cast_to(ctx, ctx.req(0), ctx.req(1).elem)
