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

from dataclasses import dataclass
from typing import Callable, Mapping

import onnx

from glow_core.errors import ModelError


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
