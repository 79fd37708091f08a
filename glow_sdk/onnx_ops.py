"""The table of ONNX forms of glow's node kinds: one exporter per kind (:data:`EXPORTERS`).

An exporter receives the :class:`Emitter` of the model being built, the glow node and the ONNX names of
its operands and results, and emits the ONNX nodes computing those results. A kind with an ONNX operator
of the same meaning maps onto it (:data:`SAME_NAME`, :data:`SAME_ATTRS`); a glow primitive without one
maps onto several ONNX operators that compute exactly what glow computes (signed BitShift, Max / Min
propagating NaN, Python-style Mod of floats, Sign keeping NaN, a Slice with a negative step, Requantize,
the fused kinds). ``glow_sdk.export`` builds models with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from glow_core.errors import UnsupportedError
from glow_core.ir.graph import Node, Value
from glow_core.ir.types import ElemKind

#: separates a glow node's name from the index of one of the ONNX nodes it became
NODE_SEPARATOR = "#"


class ExportError(UnsupportedError):
    """A node (kind, element kind or attribute) that has no ONNX form here."""


#: glow element kinds -> ONNX tensor element types (the others have no ONNX form here)
ONNX_TYPES: dict[ElemKind, int] = {
    ElemKind.FLOAT32: TensorProto.FLOAT, ElemKind.FLOAT16: TensorProto.FLOAT16,
    ElemKind.BFLOAT16: TensorProto.BFLOAT16, ElemKind.FLOAT64: TensorProto.DOUBLE,
    ElemKind.INT8: TensorProto.INT8, ElemKind.UINT8: TensorProto.UINT8, ElemKind.INT16: TensorProto.INT16,
    ElemKind.UINT16: TensorProto.UINT16, ElemKind.INT32: TensorProto.INT32, ElemKind.UINT32: TensorProto.UINT32,
    ElemKind.INT64: TensorProto.INT64, ElemKind.UINT64: TensorProto.UINT64, ElemKind.BOOL: TensorProto.BOOL,
}
_FLOATS = frozenset({ElemKind.FLOAT32, ElemKind.FLOAT16, ElemKind.BFLOAT16, ElemKind.FLOAT64})
#: signed integer kinds -> the unsigned kind of the same width (BitShift, defined on unsigned kinds only)
_UNSIGNED = {ElemKind.INT8: ElemKind.UINT8, ElemKind.INT16: ElemKind.UINT16, ElemKind.INT32: ElemKind.UINT32,
             ElemKind.INT64: ElemKind.UINT64}


@dataclass
class Emitter:
    """Builds the ONNX graph of one export: ONNX nodes named after their glow node, initializers."""

    names: Mapping[int, str]
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: list[onnx.TensorProto] = field(default_factory=list)
    owner: str = ""
    count: int = 0
    #: the names of the constants already made initializers
    weights: set[str] = field(default_factory=set)

    def name(self, v: Value | None) -> str:
        return "" if v is None else self.names[id(v)]

    def fresh(self, hint: str) -> str:
        self.count += 1
        return f"{self.owner}{NODE_SEPARATOR}{hint}{self.count}"

    def const(self, array: Any, dtype: Any = None) -> str:
        name = self.fresh("c")
        self.inits.append(numpy_helper.from_array(np.asarray(array, dtype=dtype), name))
        return name

    def ints(self, values: Sequence[int]) -> str:
        return self.const(np.asarray(list(values), np.int64).reshape(len(values)))

    def op(self, op_type: str, inputs: Sequence[str], out: str | Sequence[str] | None = None, n_out: int = 1,
           **attrs: Any) -> str:
        """Emit one ONNX node; its (first) output name (a fresh one unless ``out`` names them)."""
        outs = [out] if isinstance(out, str) else list(out) if out is not None else [
            self.fresh(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self.fresh(op_type), **attrs))
        return outs[0]


#: an exporter: (emitter, glow node, ONNX names of its operands ("" when absent), of its results)
Exporter = Callable[[Emitter, Node, list[str], list[str]], None]
#: node kind -> its exporter (register with :func:`exporter`)
EXPORTERS: dict[str, Exporter] = {}


def exporter(*kinds: str) -> Callable[[Exporter], Exporter]:
    def register(fn: Exporter) -> Exporter:
        for k in kinds:
            EXPORTERS[k] = fn
        return fn
    return register


def _same_op(op_type: str, **fixed: Any) -> Exporter:
    def emit(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
        e.op(op_type, ins, outs, **fixed)
    return emit


#: glow kinds whose ONNX operator of the same name has the same operands and no attribute
SAME_NAME = (
    "Abs", "Acos", "Acosh", "Add", "And", "Asin", "Asinh", "Atan", "Atanh", "BitwiseAnd", "BitwiseNot",
    "BitwiseOr", "BitwiseXor", "Ceil", "Cos", "Cosh", "Div", "Equal", "Erf", "Exp", "Floor", "IsNaN", "Less",
    "LessOrEqual", "Log", "MatMul", "Mul", "Neg", "Not", "Or", "Relu", "Round", "Sigmoid", "Sin", "Sinh",
    "Softsign", "Softplus", "Sqrt", "Sub", "Tan", "Tanh", "Where", "Xor", "Identity", "Reciprocal", "PRelu",
    "HardSwish", "Mish", "Det",
)
for _kind in SAME_NAME:
    EXPORTERS[_kind] = _same_op(_kind)
EXPORTERS["Dropout"] = _same_op("Identity")
#: glow kinds whose ONNX operator of the same name takes the glow attributes of the same names
SAME_ATTRS: dict[str, tuple[str, ...]] = {
    "LeakyRelu": ("alpha",), "Elu": ("alpha",), "Celu": ("alpha",), "HardSigmoid": ("alpha", "beta"),
    "Selu": ("alpha", "gamma"), "ThresholdedRelu": ("alpha",), "Shrink": ("lambd", "bias"), "Gelu": ("approximate",),
    "Concat": ("axis",), "Transpose": ("perm",), "Gather": ("axis",), "GatherElements": ("axis",),
    "GatherND": ("batch_dims",), "LRN": ("size", "alpha", "beta", "bias"), "BatchNormalization": ("epsilon",),
    "InstanceNormalization": ("epsilon",), "DepthToSpace": ("blocksize", "mode"), "SpaceToDepth": ("blocksize",),
    "ScatterND": ("reduction",), "ScatterElements": ("axis", "reduction"), "Trilu": ("upper",),
}


def _attr_value(v: Any) -> Any:
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    if isinstance(v, tuple):
        return [_attr_value(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def _with_attrs(op_type: str, names: tuple[str, ...]) -> Exporter:
    def emit(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
        attrs = {n: _attr_value(node.attrs[n]) for n in names}
        if op_type == "Trilu":
            ins = [ins[0], e.const(np.int64(node.attrs["k"]))]
        if op_type in ("ScatterND", "ScatterElements") and attrs.get("reduction") == "none":
            attrs.pop("reduction")
        e.op(op_type, ins, outs, **attrs)
    return emit


for _kind, _names in SAME_ATTRS.items():
    EXPORTERS[_kind] = _with_attrs(_kind, _names)


def _elem(v: Value | None) -> ElemKind:
    assert v is not None
    return v.type.elem


# -- element-wise kinds without an ONNX operator of the same meaning ------------------------------------


@exporter("Max", "Min")
def _max_min(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    """ONNX Max / Min of floats may drop a NaN; glow's propagate it: NaN wherever an operand is NaN."""
    if _elem(node.inputs[0]) not in _FLOATS:
        e.op(node.kind.name, ins, outs)
        return
    plain = e.op(node.kind.name, ins)
    with_b = e.op("Where", [e.op("IsNaN", [ins[1]]), e.op("Add", ins), plain])
    e.op("Where", [e.op("IsNaN", [ins[0]]), e.op("Add", ins), with_b], outs)


@exporter("Mod")
def _mod(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    """fmod=True: ONNX Mod(fmod=1). Integers, fmod=False: ONNX Mod. Floats, fmod=False (ONNX Mod needs
    fmod=1 for them): numpy's rule, r = fmod(a, b), plus b where r != 0 and r, b differ in sign."""
    if node.attrs["fmod"] or _elem(node.inputs[0]) not in _FLOATS:
        e.op("Mod", ins, outs, fmod=int(bool(node.attrs["fmod"])))
        return
    r = e.op("Mod", ins, fmod=1)
    zero = e.const(np.zeros((), _elem(node.inputs[0]).dtype))
    differ = e.op("Xor", [e.op("Less", [r, zero]), e.op("Less", [ins[1], zero])])
    fix = e.op("And", [differ, e.op("Not", [e.op("Equal", [r, zero])])])
    e.op("Where", [fix, e.op("Add", [r, ins[1]]), r], outs)


@exporter("BitShift")
def _bitshift(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    """ONNX BitShift takes unsigned kinds and leaves shifts by the bit width or more undefined: shift the
    unsigned bits (an arithmetic right shift of a negative x is ~((~x) >> n)), then give 0 (-1 for a right
    shift of a negative value) where the amount is negative or >= the width, as glow does."""
    elem = _elem(node.inputs[0])
    width = elem.itemsize * 8
    right = node.attrs["direction"] == "RIGHT"
    lo, hi = e.const(np.zeros((), elem.dtype)), e.const(np.array(width - 1, elem.dtype))
    n = e.op("Min", [e.op("Max", [ins[1], lo]), hi])
    signed = elem in _UNSIGNED
    uns = ONNX_TYPES[_UNSIGNED.get(elem, elem)]
    x = ins[0]
    neg = e.op("Less", [x, lo]) if signed and right else ""
    if neg:
        x = e.op("Where", [neg, e.op("BitwiseNot", [x]), x])
    shifted = e.op("BitShift", [e.op("Cast", [x], to=uns), e.op("Cast", [n], to=uns)],
                   direction="RIGHT" if right else "LEFT")
    r = e.op("Cast", [shifted], to=ONNX_TYPES[elem])
    if neg:
        r = e.op("Where", [neg, e.op("BitwiseNot", [r]), r])
    valid = e.op("And", [e.op("Not", [e.op("Less", [ins[1], lo])]), e.op("LessOrEqual", [ins[1], hi])])
    fill = e.op("Where", [neg, e.const(np.array(-1, elem.dtype)), lo]) if neg else lo
    e.op("Where", [valid, r, fill], outs)


@exporter("Sign")
def _sign(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    """glow's Sign keeps NaN (numpy.sign)."""
    if _elem(node.inputs[0]) not in _FLOATS:
        e.op("Sign", ins, outs)
        return
    e.op("Where", [e.op("IsNaN", ins), ins[0], e.op("Sign", ins)], outs)


@exporter("IsInf")
def _isinf(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    e.op("IsInf", ins, outs, detect_negative=int(node.attrs["detect_negative"]),
         detect_positive=int(node.attrs["detect_positive"]))


@exporter("Cast")
def _cast(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    to = node.attrs["to"]
    e.op("Cast", ins, outs, to=ONNX_TYPES[to])


@exporter("Pow")
def _pow(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    """Float base: glow computes in float64 and rounds."""
    elem = _elem(node.inputs[0])
    if elem not in _FLOATS or elem == ElemKind.FLOAT64:
        e.op("Pow", ins, outs)
        return
    wide = [e.op("Cast", [i], to=TensorProto.DOUBLE) for i in ins]
    e.op("Cast", [e.op("Pow", wide)], outs, to=ONNX_TYPES[elem])


@exporter("Clip")
def _clip(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    e.op("Clip", ins, outs)


@exporter("Swish")
def _swish(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    alpha = e.const(np.array(node.attrs["alpha"], _elem(node.inputs[0]).dtype))
    e.op("Mul", [ins[0], e.op("Sigmoid", [e.op("Mul", [ins[0], alpha])])], outs)


# -- data movement ---------------------------------------------------------------------------------------


@exporter("Reshape")
def _reshape(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    e.op("Reshape", [ins[0], e.ints(node.outputs[0].type.shape)], outs)


@exporter("Broadcast")
def _broadcast(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    e.op("Expand", [ins[0], e.ints(node.outputs[0].type.shape)], outs)


@exporter("Tile")
def _tile(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    e.op("Tile", [ins[0], e.ints(node.attrs["repeats"])], outs)


#: the end of a slice running down to (and including) index 0: ONNX reads a negative end from the back
_PAST_FRONT = -(2 ** 63)


@exporter("Slice")
def _slice(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    """Result[i] = Input[start + i * step] for i < size: ONNX Slice from start to just past the last index."""
    starts, sizes, steps = node.attrs["starts"], node.attrs["sizes"], node.attrs["steps"]
    ends = []
    for s, n, k in zip(starts, sizes, steps):
        last = s + (n - 1) * k
        end = last + (1 if k > 0 else -1)
        ends.append(s if n == 0 else _PAST_FRONT if end < 0 else end)
    e.op("Slice", [ins[0], e.ints(starts), e.ints(ends), e.ints(range(len(starts))), e.ints(steps)], outs)


@exporter("Pad")
def _pad(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    elem = _elem(node.inputs[0])
    value = e.const(np.asarray(node.attrs["value"]).reshape(()).astype(elem.dtype))
    e.op("Pad", [ins[0], e.ints(node.attrs["pads"]), value], outs, mode=node.attrs["mode"])


@exporter("Split")
def _split(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    e.op("Split", [ins[0], e.ints(node.attrs["splits"])], outs, axis=node.attrs["axis"])


@exporter("Resize")
def _resize(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    a = node.attrs
    scales = a["scales"]
    sizes = "" if scales else e.ints(a["sizes"])
    scale = e.const(np.asarray(scales, np.float32)) if scales else ""
    roi = e.const(np.asarray(a["roi"], np.float32)) if a["roi"] else ""
    e.op("Resize", [ins[0], roi, scale, sizes], outs, mode=a["mode"],
         coordinate_transformation_mode=a["coordinate_transformation_mode"], nearest_mode=a["nearest_mode"],
         cubic_coeff_a=float(a["cubic_coeff_a"]), exclude_outside=int(a["exclude_outside"]),
         extrapolation_value=float(a["extrapolation_value"]), antialias=int(a["antialias"]))


# -- reductions ------------------------------------------------------------------------------------------


#: reductions -> the element-wise operations they are over no axis (glow reduces over no axis then; ONNX would
#: reduce over all of them): "Square" is x * x
NO_AXIS: dict[str, tuple[str, ...]] = {
    "ReduceSum": (), "ReduceMax": (), "ReduceMin": (), "ReduceProd": (), "ReduceMean": (), "ReduceLogSumExp": (),
    "ReduceL1": ("Abs",), "ReduceSumSquare": ("Square",), "ReduceL2": ("Square", "Sqrt"), "ReduceLogSum": ("Log",),
}
#: reductions glow computes otherwise than ONNX on integers (a mean, a square root or a logarithm of them)
FLOAT_ONLY_REDUCTIONS = frozenset({"ReduceMean", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"})


def _reduce(op_type: str) -> Exporter:
    def emit(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
        axes = tuple(node.attrs["axes"])
        if axes:
            e.op(op_type, [ins[0], e.ints(axes)], outs, keepdims=int(node.attrs["keepdims"]))
            return
        y = ins[0]
        for step in NO_AXIS[op_type]:
            y = e.op("Mul", [y, y]) if step == "Square" else e.op(step, [y])
        e.op("Identity", [y], outs)
    return emit


for _kind in NO_AXIS:
    EXPORTERS[_kind] = _reduce(_kind)


def _reducible(node: Node) -> bool:
    """No reduced axis is empty (ONNX leaves the result over an empty set to each runtime: glow gives NaN for a
    mean, -inf / +inf for a max / min), and the mean, L2 norm and logarithmic reductions are of floats."""
    x = node.inputs[0]
    assert x is not None
    if any(x.type.shape[a] == 0 for a in node.attrs["axes"]):
        return False
    return node.kind.name not in FLOAT_ONLY_REDUCTIONS or x.type.elem in _FLOATS


def _odd_window(node: Node) -> bool:
    """ONNX LRN's window is centred for odd sizes only (onnxruntime refuses even ones)."""
    return int(node.attrs["size"]) % 2 == 1


#: kind -> when its exporter has an ONNX form of a node (kinds absent: always); each rule's docstring says why
EXPORT_RULES: dict[str, Callable[[Node], bool]] = {**dict.fromkeys(NO_AXIS, _reducible), "LRN": _odd_window}


@exporter("ArgMax", "ArgMin")
def _arg(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    a = node.attrs
    e.op(node.kind.name, ins, outs, axis=a["axis"], keepdims=int(a["keepdims"]),
         select_last_index=int(a["select_last_index"]))


@exporter("TopK")
def _topk(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    a = node.attrs
    e.op("TopK", [ins[0], e.ints([a["k"]])], outs, axis=a["axis"], largest=int(a["largest"]), sorted=1)


def _softmax_of(e: Emitter, x: str, axes: Sequence[int], out: str | None, rank: int) -> str:
    """exp(x - max) / sum(exp(x - max)) over ``axes`` taken together (ONNX Softmax for the last axis)."""
    if list(axes) == [rank - 1]:
        return e.op("Softmax", [x], out, axis=-1)
    ax = e.ints(axes)
    ex = e.op("Exp", [e.op("Sub", [x, e.op("ReduceMax", [x, ax], keepdims=1)])])
    return e.op("Div", [ex, e.op("ReduceSum", [ex, ax], keepdims=1)], out)


@exporter("Softmax")
def _softmax(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    _softmax_of(e, ins[0], node.attrs["axes"], outs[0], node.outputs[0].type.rank)


@exporter("LogSoftmax")
def _log_softmax(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    ax = e.ints(node.attrs["axes"])
    s = e.op("Sub", [ins[0], e.op("ReduceMax", [ins[0], ax], keepdims=1)])
    e.op("Sub", [s, e.op("Log", [e.op("ReduceSum", [e.op("Exp", [s]), ax], keepdims=1)])], outs)


# -- neural-network kinds --------------------------------------------------------------------------------


def _window_attrs(node: Node, pool: bool) -> dict[str, Any]:
    a = node.attrs
    out: dict[str, Any] = {"strides": list(a["strides"]), "pads": list(a["pads"]), "dilations": list(a["dilations"])}
    if pool:
        out["kernel_shape"] = list(a["kernel_shape"])
        out["ceil_mode"] = int(a["ceil_mode"])
    else:
        out["group"] = int(a["group"])
        filt = node.inputs[1]
        assert filt is not None
        out["kernel_shape"] = list(filt.type.shape[2:])
    return out


@exporter("Conv")
def _conv(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    e.op("Conv", ins, outs, **_window_attrs(node, pool=False))


@exporter("MaxPool")
def _maxpool(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    e.op("MaxPool", ins, outs, **_window_attrs(node, pool=True))


@exporter("AvgPool")
def _avgpool(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    e.op("AveragePool", ins, outs, count_include_pad=int(node.attrs["count_include_pad"]),
         **_window_attrs(node, pool=True))


@exporter("Gemm")
def _gemm(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    a = node.attrs
    e.op("Gemm", ins, outs, alpha=float(a["alpha"]), beta=float(a["beta"]), transA=int(a["trans_a"]),
         transB=int(a["trans_b"]))


def _activation(e: Emitter, node: Node, y: str, out: str) -> None:
    """The activation of FusedConv / FusedMatMul on ``y`` (hardswish as glow computes it)."""
    a = node.attrs
    act = a["activation"]
    dt = node.outputs[0].type.elem.dtype
    if act == "none":
        e.op("Identity", [y], out)
    elif act == "relu":
        e.op("Relu", [y], out)
    elif act == "clip":
        e.op("Clip", [y, e.const(np.array(a["clip_min"], dt)), e.const(np.array(a["clip_max"], dt))], out)
    elif act == "hardswish":
        three, six, one, zero = (e.const(np.array(v, dt)) for v in (3, 6, 1, 0))
        gate = e.op("Max", [e.op("Min", [e.op("Div", [e.op("Add", [y, three]), six]), one]), zero])
        e.op("Mul", [y, gate], out)
    else:
        raise ExportError(f"{node.where()}: activation {act!r} has no ONNX form here")


@exporter("FusedConv")
def _fused_conv(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    y = e.op("Conv", ins[:3], **_window_attrs(node, pool=False))
    if ins[3]:
        y = e.op("Add", [y, ins[3]])
    _activation(e, node, y, outs[0])


@exporter("FusedMatMul")
def _fused_matmul(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    y = e.op("MatMul", ins[:2])
    if ins[2]:
        y = e.op("Add", [y, ins[2]])
    _activation(e, node, y, outs[0])


@exporter("DequantMatMul")
def _dequant_matmul(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    """act(MatMul(LHS, Cast(Weight, float32) * Scale) + Bias): the compressed weight dequantized in the graph."""
    w = e.op("Mul", [e.op("Cast", [ins[1]], to=TensorProto.FLOAT), ins[2]])
    y = e.op("MatMul", [ins[0], w])
    if ins[3]:
        y = e.op("Add", [y, ins[3]])
    _activation(e, node, y, outs[0])


@exporter("FusedLayerNorm")
def _fused_layernorm(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    """(x - mean) / sqrt(var + eps) * Scale + Bias over the last axis, in glow's order of operations."""
    dt = node.outputs[0].type.elem.dtype
    last = e.ints([-1])
    d = e.op("Sub", [ins[0], e.op("ReduceMean", [ins[0], last], keepdims=1)])
    var = e.op("ReduceMean", [e.op("Mul", [d, d]), last], keepdims=1)
    std = e.op("Sqrt", [e.op("Add", [var, e.const(np.array(node.attrs["epsilon"], dt))])])
    y = e.op("Mul", [e.op("Div", [d, std]), ins[1]])
    if ins[2]:
        e.op("Add", [y, ins[2]], outs)
    else:
        e.op("Identity", [y], outs)


@exporter("FusedAttention")
def _fused_attention(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    """Softmax(Q @ KT (*|/) scale + Mask) @ V; with masked_rows="zeros" a row whose scores (or mask) are
    all -inf gives zeros."""
    a = node.attrs
    dt = node.outputs[0].type.elem.dtype
    s = e.op("MatMul", ins[:2])
    s = e.op("Mul" if a["scale_op"] == "mul" else "Div", [s, e.const(np.array(a["scale"], dt))])
    if ins[3]:
        s = e.op("Add", [s, ins[3]])
    if a["masked_rows"] == "nan":
        e.op("MatMul", [e.op("Softmax", [s], axis=-1), ins[2]], outs)
        return
    last, zero, one = e.ints([-1]), e.const(np.zeros((), dt)), e.const(np.ones((), dt))
    top = e.op("ReduceMax", [s, last], keepdims=1)
    dead = e.op("IsInf", [top], detect_positive=0)
    ex = e.op("Exp", [e.op("Sub", [s, e.op("Where", [dead, zero, top])])])
    total = e.op("Where", [dead, one, e.op("ReduceSum", [ex, last], keepdims=1)])
    p = e.op("Where", [dead, zero, e.op("Div", [ex, total])])
    if ins[3]:
        mask = ins[3]
        rank = node.inputs[3].type.rank if node.inputs[3] is not None else 0
        mtop = e.op("ReduceMax", [mask, last], keepdims=1) if rank else mask
        p = e.op("Where", [e.op("IsInf", [mtop], detect_positive=0), zero, p])
    e.op("MatMul", [p, ins[2]], outs)


@exporter("LayerNormalization")
def _layernorm(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    """ONNX LayerNormalization; its Mean and InvStdDev results as well (float32 statistics, as glow's)."""
    e.op("LayerNormalization", ins, outs, axis=node.attrs["axis"], epsilon=float(node.attrs["epsilon"]))


# -- quantized primitives --------------------------------------------------------------------------------


@exporter("IntMatMul")
def _intmatmul(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    e.op("MatMulInteger", ins, outs)


@exporter("IntConv")
def _intconv(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    y = e.op("ConvInteger", ins[:4], **_window_attrs(node, pool=False))
    if ins[4]:
        e.op("Add", [y, ins[4]], outs)
    else:
        e.op("Identity", [y], outs)


@exporter("Requantize")
def _requantize(e: Emitter, node: Node, ins: list[str], outs: list[str]) -> None:
    """clip(round_half_even(float32(Input) * Multiplier) + ZeroPoint, lo, hi) in float32, to ZeroPoint's kind."""
    to = node.outputs[0].type.elem
    info = np.iinfo(to.dtype)
    lo = max(int(info.min), int(node.attrs["clamp_lo"]))
    hi = min(int(info.max), int(node.attrs["clamp_hi"]))
    f32 = TensorProto.FLOAT
    y = e.op("Round", [e.op("Mul", [e.op("Cast", [ins[0]], to=f32), e.op("Cast", [ins[1]], to=f32)])])
    y = e.op("Add", [y, e.op("Cast", [ins[2]], to=f32)])
    y = e.op("Clip", [y, e.const(np.float32(lo)), e.const(np.float32(hi))])
    e.op("Cast", [y], outs, to=ONNX_TYPES[to])
