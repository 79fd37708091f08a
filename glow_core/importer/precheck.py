"""Checks a model must pass before any native onnx code (checker, shape inference) sees it.

onnx's C++ shape inference trusts some attributes: LayerNormalization with
``axis = 10**12`` indexes past the input's dimensions and crashes the process.
A model file is untrusted input, so glow imports the model first (its own
import and type rules check every attribute against the operands' ranks) and
then, before shape inference, checks every node against :data:`AXIS_RULES`:
a table, per op type, of the rank-relative attributes whose range the spec
fixes. Shape inference only ever sees a model that passed this table.

String fields are checked when the model is loaded: protobuf decodes them
lazily and raises ``UnicodeDecodeError`` on invalid UTF-8 (:func:`check_strings`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import onnx

from glow_core.errors import GlowWarning, ImportShapeError, ModelError
from glow_core.importer.context import ONNX_ELEMS
from glow_core.ir.types import TensorType


@dataclass(frozen=True)
class AxisRule:
    """Attribute ``attr`` holds axes of operand ``operand``: each in ``[-(rank+extra), rank+extra)``."""

    attr: str
    operand: int = 0
    extra: int = 0
    #: a permutation of the operand's axes (Transpose's perm) rather than a list of axes
    perm: bool = False


_AXIS = (AxisRule("axis"),)
#: per ONNX op type, the attributes naming axes (checked against the ranks glow computed)
AXIS_RULES: Mapping[str, tuple[AxisRule, ...]] = {
    **{op: _AXIS for op in (
        "LayerNormalization", "Softmax", "LogSoftmax", "Hardmax", "Concat", "Gather", "GatherElements",
        "ScatterElements", "Scatter", "Split", "ArgMax", "ArgMin", "TopK", "Compress", "LpNormalization",
        "QuantizeLinear", "DequantizeLinear", "Unique", "SplitToSequence", "CumSum", "DFT")},
    "Flatten": (AxisRule("axis", extra=1),),
    "OneHot": (AxisRule("axis", operand=0, extra=1),),
    "Unsqueeze": (AxisRule("axes", extra=64),),  # rank of the output: bounded by rank + len(axes), checked by glow
    **{op: (AxisRule("axes"),) for op in (
        "Squeeze", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
        "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "MeanVarianceNormalization", "Slice",
        "CenterCropPad")},
    "Transpose": (AxisRule("perm", perm=True),),
    "ReverseSequence": (AxisRule("batch_axis"), AxisRule("time_axis")),
}


#: attributes that are flags (0 or 1) in every op that has them: runtimes disagree on other values
#: (onnx shape inference and onnxruntime test ``== 1``, numpy-style code tests truthiness)
FLAG_ATTRS = frozenset({
    "keepdims", "select_last_index", "ceil_mode", "count_include_pad", "transA", "transB", "is_causal",
    "align_corners", "detect_positive", "detect_negative", "interleaved", "upper", "noop_with_empty_axes",
    "sorted", "largest", "periodic", "onesided", "inverse", "center_point_box", "new_axis", "fmod",
    "linear_before_reset", "input_forget", "layout", "allowzero", "saturate", "exclusive", "reverse",
})


def check_flags(node: onnx.NodeProto, where: str) -> None:
    """Refuse a flag attribute (:data:`FLAG_ATTRS`) whose value is not 0 or 1."""
    for a in node.attribute:
        if a.name in FLAG_ATTRS and a.type == onnx.AttributeProto.INT and a.i not in (0, 1):
            raise ModelError(f"{where}: attribute '{a.name}' = {a.i} must be 0 or 1",
                             hint="fix the attribute in the model")


def _ints(a: onnx.AttributeProto) -> list[int]:
    if a.type == onnx.AttributeProto.INT:
        return [a.i]
    if a.type == onnx.AttributeProto.INTS:
        return list(a.ints)
    return []


def check_axes(node: onnx.NodeProto, rank_of: Callable[[str], int | None], where: str) -> None:
    """Refuse a node whose axis attributes are out of range for its operands' ranks."""
    rules = AXIS_RULES.get(node.op_type)
    if not rules:
        return
    attrs = {a.name: a for a in node.attribute}
    for rule in rules:
        a = attrs.get(rule.attr)
        if a is None or rule.operand >= len(node.input) or not node.input[rule.operand]:
            continue
        rank = rank_of(node.input[rule.operand])
        if rank is None:
            continue
        values = _ints(a)
        if rule.perm:
            if sorted(values) != list(range(rank)):
                raise ModelError(f"{where}: attribute 'perm' = {values[:8]} is not a permutation of the "
                                 f"{rank} axes of its input", hint="fix the attribute in the model")
            continue
        bound = rank + rule.extra
        bad = [v for v in values if not -bound <= v < bound]
        if bad:
            raise ModelError(
                f"{where}: attribute '{rule.attr}' = {bad[0]} is out of range for an input of rank {rank} "
                f"(allowed: {-bound} to {bound - 1})",
                hint="fix the attribute in the model",
            )


def _strings(msg: object, path: str) -> None:
    """Touch every string field of a protobuf message (recursively): invalid UTF-8 raises here."""
    for field, value in msg.ListFields():  # type: ignore[attr-defined]
        if field.type == field.TYPE_MESSAGE:
            items = value if field.is_repeated else [value]
            for k, item in enumerate(items):
                _strings(item, f"{path}.{field.name}[{k}]")
        elif field.type == field.TYPE_STRING:
            items = value if field.is_repeated else [value]
            for item in items:
                if isinstance(item, bytes):
                    try:
                        item.decode("utf-8")
                    except UnicodeDecodeError:
                        raise ModelError(f"{path}.{field.name} is not valid UTF-8", hint="the model file is "
                                         "corrupt or was not written by an ONNX exporter") from None


def check_strings(proto: onnx.ModelProto) -> None:
    """Refuse a model whose string fields hold invalid UTF-8 (protobuf would raise UnicodeDecodeError later)."""
    try:
        _strings(proto, "model")
    except UnicodeDecodeError as e:
        raise ModelError(f"a string field of the model is not valid UTF-8 ({e.reason})",
                         hint="the model file is corrupt or was not written by an ONNX exporter") from None


def declared_dims(vi: onnx.ValueInfoProto) -> list[int | None] | None:
    """A value info's dimensions (None for a symbolic, unknown or negative one), or None without a shape."""
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None for d in tt.shape.dim]


def check_declared(vi: onnx.ValueInfoProto, computed: TensorType) -> None:
    """Compare a graph output's declaration with the type glow computed for it.

    An element type that differs is refused (onnxruntime refuses it too). A shape that differs is a
    wrong declaration: the ONNX spec defines the output from the op's inputs and attributes, so glow
    keeps the computed shape, as onnxruntime does, and warns (:class:`GlowWarning`).
    """
    tt = vi.type.tensor_type
    declared = ONNX_ELEMS.get(tt.elem_type) if vi.type.HasField("tensor_type") else None
    if vi.type.HasField("tensor_type") and tt.elem_type != onnx.TensorProto.UNDEFINED and declared is None:
        if tt.elem_type not in onnx.TensorProto.DataType.values():  # (the checker lets any number through)
            raise ModelError(f"graph output '{vi.name}': the model declares element type {tt.elem_type}, which is "
                             "not an ONNX TensorProto data type", hint="fix the output's declaration in the model")
        raise ModelError(f"graph output '{vi.name}': the model declares element type "
                         f"{onnx.TensorProto.DataType.Name(tt.elem_type)}, the node producing it computes "
                         f"{computed.elem.value}", hint="fix the output's declaration in the model")
    if declared is not None and declared.dtype != computed.dtype:
        raise ModelError(f"graph output '{vi.name}': the model declares element type "
                         f"{onnx.TensorProto.DataType.Name(tt.elem_type)}, the node producing it computes "
                         f"{computed.elem.value}", hint="fix the output's declaration in the model")
    dims = declared_dims(vi)
    if dims is None:
        return
    shape = computed.shape
    if len(dims) != len(shape) or any(d is not None and d != s for d, s in zip(dims, shape)):
        shown = [d if d is not None else "?" for d in dims]
        warnings.warn(f"graph output '{vi.name}': the model declares shape {shown}, the node producing it computes "
                      f"{list(shape)}; glow uses the computed shape (as onnxruntime does)", GlowWarning, stacklevel=4)


def _ints_attr(node: onnx.NodeProto, name: str) -> list[int] | None:
    a = next((a for a in node.attribute if a.name == name), None)
    return None if a is None else _ints(a)


def _int_attr(node: onnx.NodeProto, name: str) -> int | None:
    a = next((a for a in node.attribute if a.name == name), None)
    return None if a is None else int(a.i)


def _conv_transpose_same(node: onnx.NodeProto, in_shapes: Sequence[tuple[int, ...] | None], output: int,
                         computed: tuple[int, ...], inferred: tuple[int, ...]) -> str | None:
    """ConvTranspose with auto_pad SAME_*: the spec's "pad the input so that output_shape[i] =
    input_shape[i] * strides[i] for each axis i"; onnx shape inference clamps a negative total padding
    (a stride larger than the kernel) to 0 and gives ``stride * (in - 1) + kernel`` instead."""
    pad = next((a.s for a in node.attribute if a.name == "auto_pad"), b"")
    x_shape = in_shapes[0] if in_shapes else None
    if pad not in (b"SAME_UPPER", b"SAME_LOWER") or _ints_attr(node, "output_shape") or x_shape is None:
        return None
    spatial = x_shape[2:]
    strides = _ints_attr(node, "strides") or [1] * len(spatial)
    want = [n * s for n, s in zip(spatial, strides)]
    if len(strides) != len(spatial) or list(computed[2:]) != want:
        return None  # glow's own shape is not the spec's: glow's inconsistency, not inference's
    return (f"the spec says output_shape[i] = input_shape[i] * strides[i] for auto_pad {pad.decode()}, which "
            f"gives {list(computed)} (as onnx.reference)")


def _attention_scores(node: onnx.NodeProto, in_shapes: Sequence[tuple[int, ...] | None], output: int,
                      computed: tuple[int, ...], inferred: tuple[int, ...]) -> str | None:
    """Attention's ``qk_matmul_output`` (output 3): the spec's shape is (batch_size, q_num_heads,
    q_sequence_length, total_sequence_length), the total being the past's length (``past_key``) plus the new
    keys'. onnx shape inference gives the new keys' length alone with a past, and no dims at all (a rank-0
    shape) when ``present_key`` / ``present_value`` are not requested."""
    query, key = (in_shapes[0], in_shapes[1]) if len(in_shapes) > 1 else (None, None)
    past = in_shapes[4] if len(in_shapes) > 4 else None
    if output != 3 or query is None or key is None or len(computed) != 4 or len(query) not in (3, 4):
        return None
    new_keys = key[-2] if len(key) == 4 else key[1] if len(key) == 3 else None
    heads = query[1] if len(query) == 4 else _int_attr(node, "q_num_heads")
    q_len = query[2] if len(query) == 4 else query[1]
    past_len = past[2] if past is not None and len(past) == 4 else 0
    if new_keys is None or computed != (query[0], heads, q_len, past_len + new_keys):
        return None  # glow's own shape is not the spec's: glow's inconsistency, not inference's
    if inferred == ():
        return f"onnx shape inference gives it no dims; the spec's shape is {list(computed)} (as onnx.reference)"
    if past_len and inferred[:-1] == computed[:-1] and inferred[-1] == new_keys:
        return (f"the spec's last axis is total_sequence_length = past ({past_len}) + new keys ({new_keys}) = "
                f"{computed[-1]} (as onnx.reference)")
    return None


#: op type -> (node, its inputs' shapes, the output's index, glow's result shape, onnx's) -> why onnx shape
#: inference departs from the spec there (None: no known departure). Where it does, the importer warns and
#: follows the spec.
Departure = Callable[[onnx.NodeProto, Sequence["tuple[int, ...] | None"], int, "tuple[int, ...]",
                      "tuple[int, ...]"], "str | None"]
INFERENCE_DEPARTURES: Mapping[str, Departure] = {
    "ConvTranspose": _conv_transpose_same,
    "Attention": _attention_scores,
}


def inference_departure(node: onnx.NodeProto, in_shapes: Sequence[tuple[int, ...] | None], computed: TensorType,
                        inferred: TensorType, output: int = 0) -> str | None:
    """Why onnx shape inference's ``inferred`` type of a result (output ``output`` of ``node``, whose inputs
    have ``in_shapes``: None where unknown) departs from the spec where glow's ``computed`` one follows it
    (same element type, the spec's shape), or None."""
    rule = INFERENCE_DEPARTURES.get(node.op_type)
    if rule is None or computed.elem != inferred.elem:
        return None
    return rule(node, in_shapes, output, computed.shape, inferred.shape)
