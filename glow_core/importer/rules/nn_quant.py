"""Import rules for ONNX quantization ops (QDQ and integer compute ops).

QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger,
ConvInteger, QLinearMatMul, QLinearConv. Quantize / DequantizeLinear also take
int4 / uint4 / int2 / uint2 (the integer kinds) and float8 / float4e2m1 (imported
as Div / Mul and Cast, ``quant_lowprec.py``).
"""

from __future__ import annotations

from glow_core.importer.context import NodeContext, import_rule, onnx_elem
from glow_core.importer.rules.nn import _check_kernel_shape, _group, spatial_window
from glow_core.ir.graph import Value
from glow_core.importer.rules.quant_lowprec import dequantize_small_float, quantize_small_float
from glow_core.ir.types import FLOAT8_KINDS, SMALL_INT_KINDS, ElemKind, TensorType, normalize_axis

E = ElemKind
#: float kinds QuantizeLinear / DequantizeLinear take (not float8e8m0, a scale kind)
SMALL_FLOAT_KINDS = FLOAT8_KINDS | {E.FLOAT4E2M1}
_REAL = (E.FLOAT32, E.FLOAT16, E.BFLOAT16)


def _granularity(ctx: NodeContext, x: TensorType, s: TensorType) -> dict[str, int]:
    """Normalized axis and block_size; refuse shapes the spec does not describe."""
    block = int(ctx.attr("block_size", 0))
    if block < 0:
        raise ctx.unsupported(f"block_size {block}")
    axis = int(ctx.attr("axis", 1))
    per_tensor = s.rank == 0 or (s.rank == 1 and s.shape[0] == 1 and block == 0)
    if per_tensor:
        return {"axis": 0, "block_size": 0}
    if x.rank == 0 or not -x.rank <= axis < x.rank:
        raise ctx.unsupported(f"axis {axis} for an input of rank {x.rank}")
    axis = normalize_axis(axis, x.rank)
    if block == 0 and s.rank != 1:
        raise ctx.unsupported(f"scale of shape {list(s.shape)} without block_size (per-tensor or 1-D per-axis)")
    return {"axis": axis, "block_size": block}


@import_rule("QuantizeLinear")
def _quantize(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["axis", "block_size", "output_dtype", "precision", "saturate"])
    x, s, zp = ctx.req(0), ctx.req(1), ctx.input(2)
    if x.type.elem not in _REAL + (E.INT32,):
        raise ctx.unsupported(f"input element type {x.type.elem.value}")
    if s.type.elem not in _REAL:
        raise ctx.unsupported(f"scale element type {s.type.elem.value} (float32, float16 or bfloat16)")
    out = zp.type.elem if zp is not None else E.UINT8
    if ctx.attr("output_dtype", 0):
        want = onnx_elem(int(ctx.attr("output_dtype")), ctx.where() + " output_dtype")
        if zp is not None and want != out:
            raise ctx.unsupported(f"output_dtype {want.value} differs from the zero point's {out.value}")
        out = want
    if out not in (E.INT8, E.UINT8, E.INT16, E.UINT16) and out not in SMALL_INT_KINDS | SMALL_FLOAT_KINDS:
        raise ctx.unsupported(f"quantizing to {out.value}")
    if ctx.attr("precision", 0):
        precision = onnx_elem(int(ctx.attr("precision")), ctx.where() + " precision")
        if precision not in _REAL:
            raise ctx.unsupported(f"precision {precision.value}")
    elif s.type.elem == E.FLOAT32 or ctx.opset < 23:
        # before opset 23 the spec does not say; onnxruntime divides in float32
        precision = E.FLOAT32
    else:
        raise ctx.unsupported(
            f"a {s.type.elem.value} scale without the 'precision' attribute: the spec divides in "
            f"{s.type.elem.value}, onnxruntime in float32")
    # 'saturate' only concerns float8 results
    if out in SMALL_FLOAT_KINDS:
        return quantize_small_float(ctx, x, s, zp, out, precision, _granularity(ctx, x.type, s.type))
    attrs = {**_granularity(ctx, x.type, s.type), "elem": out, "precision": precision}
    return ctx.emit("QuantizeLinear", [x, s, zp], attrs)


@import_rule("DequantizeLinear")
def _dequantize(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["axis", "block_size", "output_dtype"])
    x, s, zp = ctx.req(0), ctx.req(1), ctx.input(2)
    small = SMALL_INT_KINDS | SMALL_FLOAT_KINDS
    if x.type.elem not in (E.INT8, E.UINT8, E.INT16, E.UINT16, E.INT32) and x.type.elem not in small:
        raise ctx.unsupported(f"dequantizing {x.type.elem.value}")
    if s.type.elem not in _REAL:
        raise ctx.unsupported(f"scale element type {s.type.elem.value}")
    out = s.type.elem
    if ctx.attr("output_dtype", 0):
        out = onnx_elem(int(ctx.attr("output_dtype")), ctx.where() + " output_dtype")
        if out not in _REAL:
            raise ctx.unsupported(f"output_dtype {out.value}")
    if x.type.elem in SMALL_FLOAT_KINDS:
        return dequantize_small_float(ctx, x, s, out, _granularity(ctx, x.type, s.type))
    if out != E.FLOAT32 and x.type.elem not in (E.INT8, E.UINT8) and x.type.elem not in small:
        # x - zero_point may not be exact in a 16-bit float: the spec multiplies in that type,
        # onnxruntime in float32, and the two differ
        raise ctx.unsupported(f"dequantizing {x.type.elem.value} to {out.value} (only 8-bit inputs, "
                              "or a float32 result)")
    attrs = {**_granularity(ctx, x.type, s.type), "elem": out}
    return ctx.emit("DequantizeLinear", [x, s, zp], attrs)


@import_rule("DynamicQuantizeLinear")
def _dynamic_quantize(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs([])
    x = ctx.req(0)
    if x.type.elem != E.FLOAT32:
        raise ctx.unsupported(f"input element type {x.type.elem.value} (float32 only)")
    return ctx.emit("DynamicQuantizeLinear", [x])


def _q8(ctx: NodeContext, *values: Value | None) -> None:
    for v in values:
        if v is not None and v.type.elem not in (E.INT8, E.UINT8):
            raise ctx.unsupported(f"element type {v.type.elem.value} (int8 / uint8 only)")


@import_rule("MatMulInteger")
def _matmul_integer(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs([])
    ins = [ctx.req(0), ctx.req(1), ctx.input(2), ctx.input(3)]
    _q8(ctx, *ins)
    return ctx.emit("MatMulInteger", ins)


def _conv_attrs(ctx: NodeContext, x: TensorType, w: TensorType) -> dict[str, object]:
    win = spatial_window(ctx, x, _check_kernel_shape(ctx, w))
    return {"strides": win.strides, "pads": win.pads, "dilations": win.dilations, "group": _group(ctx)}


_CONV_KNOWN = ["auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"]


@import_rule("ConvInteger")
def _conv_integer(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(_CONV_KNOWN)
    x, w = ctx.req(0), ctx.req(1)
    ins = [x, w, ctx.input(2), ctx.input(3)]
    _q8(ctx, *ins)
    if x.type.rank < 3:
        raise ctx.unsupported(f"input {x.type} (needs [N, C, spatial...])")
    return ctx.emit("ConvInteger", ins, _conv_attrs(ctx, x.type, w.type))


def _scales(ctx: NodeContext, *idx: int) -> None:
    for i in idx:
        if ctx.type(i).elem not in _REAL:
            raise ctx.unsupported(f"scale element type {ctx.type(i).elem.value}")


@import_rule("QLinearMatMul")
def _qlinear_matmul(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs([])
    ins = [ctx.req(i) for i in range(8)]
    _q8(ctx, ins[0], ins[2], ins[3], ins[5], ins[7])
    _scales(ctx, 1, 4, 6)
    return ctx.emit("QLinearMatMul", ins)


@import_rule("QLinearConv")
def _qlinear_conv(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(_CONV_KNOWN)
    req = [ctx.req(i) for i in range(8)]
    _q8(ctx, req[0], req[2], req[3], req[5], req[7])
    _scales(ctx, 1, 4, 6)
    x, w = req[0].type, req[3].type
    if x.rank < 3:
        raise ctx.unsupported(f"input {x} (needs [N, C, spatial...])")
    return ctx.emit("QLinearConv", [*req, ctx.input(8)], _conv_attrs(ctx, x, w))
