"""Import rules for ONNX neural-network compute ops.

Conv, ConvTranspose, MaxPool, AveragePool, LpPool, the global pools, MatMul,
Gemm, Einsum, Dropout and Identity. ``auto_pad`` is resolved here into
explicit pads, defaults are filled in, so the graph kinds see normalized
attributes only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from glow_core.importer.context import NodeContext, import_rule
from glow_core.ir.graph import Value
from glow_core.ir.types import FLOAT_KINDS, TensorType

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@dataclass(frozen=True)
class Window:
    """Normalized spatial attributes of a convolution or pooling node."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]
    #: auto_pad was set: the output size follows it and ceil_mode is moot
    auto: bool


def _ints(ctx: NodeContext, name: str, n: int, default: int) -> tuple[int, ...]:
    v = ctx.attr(name)
    if v is None or len(v) == 0:
        return (default,) * n
    v = tuple(int(x) for x in v)
    if len(v) != n:
        raise ctx.unsupported(f"attribute '{name}' has {len(v)} values; the input has {n} spatial axes")
    return v


def spatial_window(ctx: NodeContext, x: TensorType, kernel: tuple[int, ...]) -> Window:
    """Read strides, dilations, pads and auto_pad; resolve auto_pad into explicit pads."""
    nd = x.rank - 2
    if nd < 0:
        raise ctx.unsupported(f"input {x} has no channel axis (rank < 2)")
    if len(kernel) != nd:
        raise ctx.unsupported(f"kernel has {len(kernel)} spatial axes but the input {x} has {nd}")
    strides = _ints(ctx, "strides", nd, 1)
    dilations = _ints(ctx, "dilations", nd, 1)
    if any(s < 1 for s in strides) or any(d < 1 for d in dilations):
        raise ctx.unsupported(f"strides {list(strides)} and dilations {list(dilations)} must be positive")
    auto = ctx.attr("auto_pad", "NOTSET") or "NOTSET"
    if auto not in AUTO_PADS:
        raise ctx.unsupported(f"auto_pad '{auto}' (expected one of {', '.join(AUTO_PADS)})")
    if auto == "NOTSET":
        pads = _ints(ctx, "pads", 2 * nd, 0)
        if any(p < 0 for p in pads):
            raise ctx.unsupported(f"negative pads {list(pads)}")
    elif auto == "VALID":
        pads = (0,) * (2 * nd)
    else:
        begins, ends = [], []
        for i in range(nd):
            size = x.shape[2 + i]
            out = -(-size // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size)
            small, big = total // 2, total - total // 2
            begins.append(small if auto == "SAME_UPPER" else big)
            ends.append(big if auto == "SAME_UPPER" else small)
        pads = tuple(begins + ends)
    return Window(kernel, strides, dilations, pads, auto != "NOTSET")


def _group(ctx: NodeContext) -> int:
    g = int(ctx.attr("group", 1))
    if g < 1:
        raise ctx.unsupported(f"group {g} must be >= 1")
    return g


def _check_kernel_shape(ctx: NodeContext, w: TensorType) -> tuple[int, ...]:
    kernel = tuple(w.shape[2:])
    given = ctx.attr("kernel_shape")
    if given and tuple(int(k) for k in given) != kernel:
        raise ctx.unsupported(f"kernel_shape {list(given)} differs from the filter's spatial shape {list(kernel)}")
    return kernel


def _float_operands(ctx: NodeContext, *types: TensorType) -> None:
    for t in types:
        if t.elem not in FLOAT_KINDS:
            raise ctx.unsupported(f"element type {t.elem.value} (floating point only)")


# -- convolution ---------------------------------------------------------------------

@import_rule("Conv")
def _conv(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"])
    x, w = ctx.req(0), ctx.req(1)
    _float_operands(ctx, x.type)
    win = spatial_window(ctx, x.type, _check_kernel_shape(ctx, w.type))
    return ctx.emit("Conv", [x, w, ctx.input(2)], {
        "strides": win.strides, "pads": win.pads, "dilations": win.dilations, "group": _group(ctx)})


@import_rule("ConvTranspose")
def _conv_transpose(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads",
                     "strides"])
    x, w = ctx.req(0), ctx.req(1)
    _float_operands(ctx, x.type)
    xt = x.type
    nd = xt.rank - 2
    kernel = _check_kernel_shape(ctx, w.type)
    if nd < 1 or len(kernel) != nd:
        raise ctx.unsupported(f"input {xt} and filter {w.type} do not describe an N-d transposed convolution")
    strides = _ints(ctx, "strides", nd, 1)
    dilations = _ints(ctx, "dilations", nd, 1)
    out_pad = _ints(ctx, "output_padding", nd, 0)
    if any(s < 1 for s in strides) or any(d < 1 for d in dilations) or any(p < 0 for p in out_pad):
        raise ctx.unsupported(f"strides {list(strides)}, dilations {list(dilations)} and output_padding "
                              f"{list(out_pad)} must be positive / non-negative")
    auto = ctx.attr("auto_pad", "NOTSET") or "NOTSET"
    if auto not in AUTO_PADS:
        raise ctx.unsupported(f"auto_pad '{auto}' (expected one of {', '.join(AUTO_PADS)})")
    out_shape = ctx.attr("output_shape")
    if out_shape:
        out_shape = [int(v) for v in out_shape]
        if len(out_shape) == nd + 2:  # some exporters include N and C
            out_shape = out_shape[2:]
        if len(out_shape) != nd:
            raise ctx.unsupported(f"output_shape {out_shape} does not match {nd} spatial axes")
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        out_shape = [xt.shape[2 + i] * strides[i] for i in range(nd)]
    if out_shape:
        begins, ends = [], []
        for i in range(nd):
            total = (strides[i] * (xt.shape[2 + i] - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i] + 1
                     - out_shape[i])
            half = total // 2  # (floor division, as onnx.reference: for auto_pad SAME_* with a stride larger
            # than the kernel the total is negative, and the output gains -total rows at the start (SAME_UPPER)
            # or at the end (SAME_LOWER) of the full result)
            if total < 0 and auto not in ("SAME_UPPER", "SAME_LOWER"):  # output_shape beyond the full result:
                # zeros (+ bias) at the end
                begins.append(0)
                ends.append(total)
            elif auto == "SAME_UPPER":
                begins.append(half)
                ends.append(total - half)
            else:
                begins.append(total - half)
                ends.append(half)
        pads = tuple(begins + ends)
    elif auto == "VALID":
        pads = (0,) * (2 * nd)
    else:
        pads = _ints(ctx, "pads", 2 * nd, 0)
        if any(p < 0 for p in pads):
            raise ctx.unsupported(f"negative pads {list(pads)}")
    return ctx.emit("ConvTranspose", [x, w, ctx.input(2)], {
        "strides": strides, "pads": pads, "dilations": dilations, "group": _group(ctx),
        "output_padding": out_pad})


# -- pooling -------------------------------------------------------------------------------

#: how many taps longer than its input axis a pooling window may be (kernel_shape 2**32 with auto_pad
#: SAME asked for a 2**32-tap walk through padding per output, and a padded input of terabytes)
POOL_WINDOW_SLACK = 4096


def _pool_attrs(ctx: NodeContext, x: TensorType) -> dict[str, object]:
    kernel = tuple(int(k) for k in ctx.attr("kernel_shape", []))
    if any(k < 1 for k in kernel):
        raise ctx.unsupported(f"kernel_shape {list(kernel)} must be positive")
    win = spatial_window(ctx, x, kernel)
    for i, (k, d) in enumerate(zip(win.kernel, win.dilations)):
        extra = (k - 1) * d + 1 - x.shape[2 + i]
        if extra > POOL_WINDOW_SLACK:
            raise ctx.unsupported(
                f"kernel_shape[{i}] = {k} (dilation {d}) spans {extra} taps more than the input's {x.shape[2 + i]}: "
                f"glow takes pooling windows at most {POOL_WINDOW_SLACK} taps longer than their axis (the rest is "
                "padding, and every output would walk it); the attribute is probably corrupt")
    ceil_mode = bool(ctx.attr("ceil_mode", 0)) and not win.auto
    return {"kernel_shape": win.kernel, "strides": win.strides, "pads": win.pads, "dilations": win.dilations,
            "ceil_mode": ceil_mode}


_POOL_KNOWN = ["auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "strides"]


@import_rule("MaxPool")
def _maxpool(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(_POOL_KNOWN + ["storage_order"])
    x = ctx.req(0)
    attrs = _pool_attrs(ctx, x.type)
    if ctx.num_outputs > 1 and ctx.node.output[1]:
        attrs["storage_order"] = int(ctx.attr("storage_order", 0))
        if attrs["storage_order"] not in (0, 1):
            raise ctx.unsupported(f"storage_order {attrs['storage_order']}")
        return ctx.emit("MaxPoolWithArgmax", [x], attrs)
    return ctx.emit("MaxPool", [x], attrs)


@import_rule("AveragePool")
def _avgpool(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(_POOL_KNOWN + ["count_include_pad"])
    x = ctx.req(0)
    _float_operands(ctx, x.type)
    attrs = _pool_attrs(ctx, x.type)
    attrs["count_include_pad"] = bool(ctx.attr("count_include_pad", 0))
    return ctx.emit("AvgPool", [x], attrs)


def _lp_p(ctx: NodeContext) -> int:
    p = ctx.attr("p", 2)
    if float(p) != int(p) or int(p) < 1:
        raise ctx.unsupported(f"p = {p} (a positive integer is supported)")
    return int(p)


@import_rule("LpPool")
def _lppool(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(_POOL_KNOWN + ["p"])
    x = ctx.req(0)
    _float_operands(ctx, x.type)
    attrs = _pool_attrs(ctx, x.type)
    attrs["p"] = _lp_p(ctx)
    return ctx.emit("LpPool", [x], attrs)


def _global_attrs(ctx: NodeContext, x: TensorType) -> dict[str, object]:
    if x.rank < 2:
        raise ctx.unsupported(f"input {x} has no channel axis (rank < 2)")
    nd = x.rank - 2
    if any(d == 0 for d in x.shape[2:]):
        raise ctx.unsupported(f"global pooling over an empty spatial extent {list(x.shape[2:])}")
    return {"kernel_shape": x.shape[2:], "strides": (1,) * nd, "pads": (0,) * (2 * nd), "dilations": (1,) * nd}


@import_rule("GlobalAveragePool")
def _global_avgpool(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs([])
    x = ctx.req(0)
    _float_operands(ctx, x.type)
    return ctx.emit("AvgPool", [x], _global_attrs(ctx, x.type))


@import_rule("GlobalMaxPool")
def _global_maxpool(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs([])
    x = ctx.req(0)
    return ctx.emit("MaxPool", [x], _global_attrs(ctx, x.type))


@import_rule("GlobalLpPool")
def _global_lppool(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["p"])
    x = ctx.req(0)
    _float_operands(ctx, x.type)
    attrs = _global_attrs(ctx, x.type)
    attrs["p"] = _lp_p(ctx)
    return ctx.emit("LpPool", [x], attrs)


# -- matrix products -------------------------------------------------------------------------

@import_rule("MatMul")
def _matmul(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs([])
    return ctx.emit("MatMul", [ctx.req(0), ctx.req(1)])


@import_rule("Gemm")
def _gemm(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["alpha", "beta", "transA", "transB"])
    a, b, c = ctx.req(0), ctx.req(1), ctx.input(2)
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    if a.type.elem.is_int and (alpha != 1.0 or beta not in (0.0, 1.0)):
        raise ctx.unsupported(f"integer Gemm with alpha={alpha}, beta={beta} (only alpha=1, beta in {{0, 1}})")
    return ctx.emit("Gemm", [a, b, c], {"alpha": alpha, "beta": beta, "trans_a": bool(ctx.attr("transA", 0)),
                                        "trans_b": bool(ctx.attr("transB", 0))})


def explicit_einsum(equation: str) -> str:
    """Turn an implicit einsum equation into the explicit form (ONNX rule)."""
    eq = equation.replace(" ", "")
    if "->" in eq:
        return eq
    letters = [ch for ch in eq.replace("...", "") if ch.isalpha()]
    once = sorted((ch for ch in set(letters) if letters.count(ch) == 1), key=ord)
    return eq + "->" + ("..." if "..." in eq else "") + "".join(once)


@import_rule("Einsum")
def _einsum(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["equation"])
    eq = explicit_einsum(str(ctx.attr("equation", "")))
    lhs, _, rhs = eq.partition("->")
    if "..." in lhs and "..." not in rhs:
        raise ctx.unsupported(f"equation '{eq}': '...' summed away in the output")
    return ctx.emit("Einsum", [ctx.req(i) for i in range(ctx.num_inputs)], {"equation": eq})


# -- inference no-ops ----------------------------------------------------------------------------

@import_rule("Identity")
def _identity(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs([])
    v = ctx.operand(0)
    if v is not None and not isinstance(v, Value):  # a sequence or an optional (importer/structured.py)
        return [v]
    return ctx.emit("Identity", [ctx.req(0)])


def _is_read(ctx: NodeContext, name: str) -> bool:
    """Whether a later node or a graph output reads the ONNX value ``name``."""
    graph = ctx.importer.proto.graph
    return any(name in n.input for n in graph.node) or any(o.name == name for o in graph.output)


@import_rule("Dropout")
def _dropout(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["is_test", "ratio", "seed"])
    x = ctx.req(0)
    training = ctx.const(2, "training_mode") if ctx.has_input(2) else None
    if ctx.has_attr("is_test") and not ctx.attr("is_test"):
        raise ctx.unsupported("is_test=0 (training-mode dropout is random)")
    if training is not None and bool(np.asarray(training).reshape(-1)[0]):
        ratio = ctx.const(1, "ratio") if ctx.has_input(1) else np.array(0.5)
        if float(np.asarray(ratio).reshape(-1)[0]) != 0.0:
            raise ctx.unsupported("training_mode=true with a non-zero ratio (random dropout)")
    y = ctx.emit1("Dropout", [x])
    if ctx.num_outputs > 1 and ctx.node.output[1]:
        if ctx.opset < 12 and _is_read(ctx, ctx.node.output[1]):
            # before opset 12 the spec leaves the inference-mode mask undefined (onnxruntime gives all false);
            # an unread mask (exporters often name one) is harmless
            raise ctx.unsupported("reading the mask output before opset 12 (its inference value is not specified)")
        return [y, ctx.constant(np.ones(x.type.shape, dtype=np.bool_), name=f"{ctx.name}_mask")]
    return [y]
