"""QuantizeLinear / DequantizeLinear with float8 and float4e2m1 values, as Div / Mul and Cast.

A float "quantized" value needs no rounding to an integer grid: the Cast to the
small float kind rounds (to nearest even) and saturates. So these import as
existing primitives rather than as the integer QuantizeLinear kind
(``glow_core.ir.defs.nn_quant``), following ``onnx.reference`` exactly:

- QuantizeLinear to float8: ``Cast(x / scale, saturate)`` in the ``precision``
  kind; the zero point only gives the result's kind (its value is not read).
- QuantizeLinear to float4e2m1: ``Cast(x / scale + float(zero_point))`` (float4
  always saturates).
- DequantizeLinear of float8 / float4e2m1: ``float32(x) * scale`` rounded once to
  the result kind; the zero point is not read (the spec requires it to be 0 for
  float8; onnx.reference refuses a nonzero one, and a run-time one cannot be
  checked at compile time).

Scales per tensor, per axis or blocked are reshaped / repeated here to broadcast
against the input, as the lowering does for the integer kinds.
"""

from __future__ import annotations

from collections.abc import Mapping

from glow_core.importer.context import NodeContext
from glow_core.ir.graph import Value
from glow_core.ir.types import FLOAT8_KINDS, ElemKind, TensorType

E = ElemKind


def granular(ctx: NodeContext, s: Value, x: TensorType, gran: Mapping[str, int]) -> Value:
    """A scale / zero point shaped (and, when blocked, repeated) to broadcast against ``x``."""
    axis, block = gran["axis"], gran["block_size"]
    st = s.type
    if st.rank == 0 or (st.rank == 1 and st.size == 1 and block == 0):
        return _reshape(ctx, s, (1,) * x.rank)
    if block == 0:
        return _reshape(ctx, s, [st.size if i == axis else 1 for i in range(x.rank)])
    shape, nb = st.shape, st.shape[axis]
    s = _reshape(ctx, s, shape[:axis + 1] + (1,) + shape[axis + 1:])
    s = ctx.emit1("Broadcast", [s], {"shape": shape[:axis + 1] + (block,) + shape[axis + 1:]})
    s = _reshape(ctx, s, shape[:axis] + (nb * block,) + shape[axis + 1:])
    if nb * block == x.shape[axis]:
        return s
    starts, sizes = [0] * x.rank, list(s.type.shape)
    sizes[axis] = x.shape[axis]
    return ctx.emit1("Slice", [s], {"starts": tuple(starts), "sizes": tuple(sizes), "steps": (1,) * x.rank})


def _reshape(ctx: NodeContext, v: Value, shape: tuple[int, ...] | list[int]) -> Value:
    shape = tuple(int(d) for d in shape)
    return v if v.type.shape == shape else ctx.emit1("Reshape", [v], {"shape": shape})


def _cast(ctx: NodeContext, v: Value, elem: ElemKind, saturate: int = 1) -> Value:
    return v if v.elem == elem else ctx.emit1("Cast", [v], {"to": elem, "saturate": saturate})


def quantize_small_float(ctx: NodeContext, x: Value, s: Value, zp: Value | None, out: ElemKind,
                         precision: ElemKind, gran: Mapping[str, int]) -> list[Value]:
    """QuantizeLinear to a float8 / float4e2m1 kind (see the module doc)."""
    saturate = int(ctx.attr("saturate", 1))
    if saturate not in (0, 1):
        raise ctx.unsupported(f"saturate={saturate} (0 or 1)")
    scale = _cast(ctx, granular(ctx, s, x.type, gran), precision)
    q = ctx.emit1("Div", [_cast(ctx, x, precision), scale])
    if out not in FLOAT8_KINDS and zp is not None:
        q = ctx.emit1("Add", [q, _cast(ctx, granular(ctx, zp, x.type, gran), precision)])
    return [_cast(ctx, q, out, saturate)]


def dequantize_small_float(ctx: NodeContext, x: Value, s: Value, out: ElemKind,
                           gran: Mapping[str, int]) -> list[Value]:
    """DequantizeLinear of a float8 / float4e2m1 kind (see the module doc)."""
    y = ctx.emit1("Mul", [_cast(ctx, x, E.FLOAT32), _cast(ctx, granular(ctx, s, x.type, gran), E.FLOAT32)])
    return [_cast(ctx, y, out)]
