"""Sequence and optional operators, resolved at import time (see ``importer/structured.py``).

A sequence is a list of graph values whose length and element positions are
known when the model is imported; positions (SequenceAt, SequenceInsert,
SequenceErase) must therefore be compile-time constants (``ctx.const``: a
position computed from a run-time input ends in ``DynamicValueError``, which
``glow_core.onnx_backend`` answers by binding that input). Only the tensors
themselves (SplitToSequence's pieces, ConcatFromSequence's result) become graph
nodes: Split, Slice, Reshape and Concat.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from glow_core import budget
from glow_core.errors import GlowTypeError, ModelError, UnsupportedError
from glow_core.importer.context import NodeContext, import_rule, onnx_elem
from glow_core.importer.rules.movement import reshape
from glow_core.importer.structured import OptValue, SeqValue, Structured, as_sequence, what_is
from glow_core.importer.inline import graph_attr, inline
from glow_core.ir.graph import Value
from glow_core.ir.types import ElemKind, normalize_axis

#: most tensors one sequence may hold (each is a separate graph value)
MAX_SEQUENCE_LENGTH = 4096


def _check_length(ctx: NodeContext, n: int) -> None:
    if n > MAX_SEQUENCE_LENGTH:
        raise budget.BudgetError(f"{ctx.where()}: a sequence of {n} tensors; at most {MAX_SEQUENCE_LENGTH} are "
                                 "supported (each one is a separate value in the compiled graph)",
                                 hint="split into fewer, larger pieces")


def _seq(ctx: NodeContext, i: int) -> SeqValue:
    v = ctx.operand(i)
    if v is None:
        raise GlowTypeError(f"{ctx.where()}: operand {i} (a sequence) is required")
    return as_sequence(v, f"{ctx.where()} operand {i}")


def _same_elem(ctx: NodeContext, elem: ElemKind | None, x: Value) -> ElemKind:
    if elem is not None and x.type.elem != elem:
        raise GlowTypeError(f"{ctx.where()}: a sequence of {elem.value} tensors cannot hold a {x.type.elem.value} "
                            "tensor")
    return x.type.elem


def _position(ctx: NodeContext, i: int, n: int, default: int, *, end_ok: bool) -> int:
    """The normalized position operand ``i`` (a scalar constant) in a sequence of ``n`` tensors."""
    pos = ctx.const(i, "position")
    if pos is None:
        return default
    arr = np.asarray(pos)
    if arr.size != 1 or arr.dtype.kind not in "iu":
        raise GlowTypeError(f"{ctx.where()}: position must be one integer, got {arr.dtype}{list(arr.shape)}")
    p = int(arr.reshape(-1)[0])
    hi = n if end_ok else n - 1
    if not -n <= p <= hi:
        raise ModelError(f"{ctx.where()}: position {p} is out of range for a sequence of {n} tensors "
                         f"(valid: {-n} .. {hi})", hint="fix the position in the model or the values passed")
    return p + n if p < 0 else p


@import_rule("SequenceEmpty")
def _sequence_empty(ctx: NodeContext) -> list[Any]:
    ctx.check_attrs(["dtype"])
    elem = onnx_elem(int(ctx.attr("dtype", 1)), ctx.where())
    return [SeqValue((), elem)]


@import_rule("SequenceConstruct")
def _sequence_construct(ctx: NodeContext) -> list[Any]:
    ctx.check_attrs([])
    items = [ctx.req(i) for i in range(ctx.num_inputs)]
    _check_length(ctx, len(items))
    elem = None
    for x in items:
        elem = _same_elem(ctx, elem, x)
    return [SeqValue(tuple(items), elem)]


@import_rule("SequenceAt")
def _sequence_at(ctx: NodeContext) -> list[Any]:
    ctx.check_attrs([])
    seq = _seq(ctx, 0)
    if not seq.items:
        raise ModelError(f"{ctx.where()}: SequenceAt on an empty sequence")
    return [seq.items[_position(ctx, 1, len(seq), 0, end_ok=False)]]


@import_rule("SequenceInsert")
def _sequence_insert(ctx: NodeContext) -> list[Any]:
    ctx.check_attrs([])
    seq = _seq(ctx, 0)
    x = ctx.req(1)
    elem = _same_elem(ctx, seq.elem, x)
    _check_length(ctx, len(seq) + 1)
    p = _position(ctx, 2, len(seq), len(seq), end_ok=True)
    return [SeqValue(seq.items[:p] + (x,) + seq.items[p:], elem)]


@import_rule("SequenceErase")
def _sequence_erase(ctx: NodeContext) -> list[Any]:
    ctx.check_attrs([])
    seq = _seq(ctx, 0)
    if not seq.items:
        raise ModelError(f"{ctx.where()}: SequenceErase on an empty sequence")
    p = _position(ctx, 1, len(seq), len(seq) - 1, end_ok=False)
    return [SeqValue(seq.items[:p] + seq.items[p + 1:], seq.elem)]


@import_rule("SequenceLength")
def _sequence_length(ctx: NodeContext) -> list[Any]:
    ctx.check_attrs([])
    return [ctx.constant(np.array(len(_seq(ctx, 0)), np.int64))]


def _split_sizes(ctx: NodeContext, dim: int) -> tuple[list[int], bool]:
    """(piece sizes, whether the split operand was given) for SplitToSequence."""
    split = ctx.const(1, "split")
    if split is None:
        _check_length(ctx, dim)
        return [1] * dim, False
    arr = np.asarray(split)
    if arr.dtype.kind not in "iu" or arr.ndim > 1:
        raise GlowTypeError(f"{ctx.where()}: split must be an integer scalar or 1-D tensor")
    if arr.ndim == 0:
        chunk = int(arr)
        if chunk <= 0:
            raise ModelError(f"{ctx.where()}: split {chunk} must be positive")
        n = -(-dim // chunk)
        _check_length(ctx, n)
        return [chunk] * (n - 1) + [dim - chunk * (n - 1)] if n else [], True
    sizes = [int(s) for s in arr]
    _check_length(ctx, len(sizes))
    if any(s < 0 for s in sizes) or sum(sizes) != dim:
        raise ModelError(f"{ctx.where()}: split {sizes} does not cut dimension {dim}")
    return sizes, True


@import_rule("SplitToSequence")
def _split_to_sequence(ctx: NodeContext) -> list[Any]:
    ctx.check_attrs(["axis", "keepdims"])
    x = ctx.req(0)
    axis = normalize_axis(int(ctx.attr("axis", 0)), x.type.rank)
    keepdims = int(ctx.attr("keepdims", 1))
    sizes, given = _split_sizes(ctx, x.shape[axis])
    if not sizes:
        return [SeqValue((), x.type.elem)]
    pieces = ctx.emit("Split", [x], {"axis": axis, "splits": sizes}) if len(sizes) > 1 else [x]
    if not given and not keepdims:
        squeezed = x.shape[:axis] + x.shape[axis + 1:]
        pieces = [reshape(ctx, p, squeezed) for p in pieces]
    return [SeqValue(tuple(pieces), x.type.elem)]


@import_rule("ConcatFromSequence")
def _concat_from_sequence(ctx: NodeContext) -> list[Any]:
    ctx.check_attrs(["axis", "new_axis"])
    seq = _seq(ctx, 0)
    if not seq.items:
        raise ModelError(f"{ctx.where()}: ConcatFromSequence of an empty sequence has no defined result")
    new_axis = int(ctx.attr("new_axis", 0))
    rank = seq.items[0].type.rank
    axis = normalize_axis(int(ctx.attr("axis")), rank + (1 if new_axis else 0))
    items = list(seq.items)
    if new_axis:
        items = [reshape(ctx, x, x.shape[:axis] + (1,) + x.shape[axis:]) for x in items]
    if len(items) == 1:
        return items
    return ctx.emit("Concat", items, {"axis": axis})


# -- optional ------------------------------------------------------------------
@import_rule("Optional")
def _optional(ctx: NodeContext) -> list[Any]:
    ctx.check_attrs(["type"])
    v = ctx.operand(0)
    if v is None and not ctx.has_attr("type"):
        raise ModelError(f"{ctx.where()}: an empty Optional needs its 'type' attribute")
    if isinstance(v, OptValue):
        raise GlowTypeError(f"{ctx.where()}: an optional cannot hold an optional")
    return [OptValue(v, ctx.attr("type"))]


@import_rule("OptionalHasElement")
def _optional_has_element(ctx: NodeContext) -> list[Any]:
    ctx.check_attrs([])
    v = ctx.operand(0)
    present = v is not None and not (isinstance(v, OptValue) and v.value is None)
    return [ctx.constant(np.array(present, np.bool_))]


@import_rule("OptionalGetElement")
def _optional_get_element(ctx: NodeContext) -> list[Any]:
    ctx.check_attrs([])
    v: Value | Structured | None = ctx.operand(0)
    if v is None:
        raise GlowTypeError(f"{ctx.where()}: operand 0 is required")
    if isinstance(v, OptValue):
        if v.value is None:
            raise ModelError(f"{ctx.where()}: the optional is empty ({what_is(v)}): there is no element to get",
                             hint="guard it with OptionalHasElement and If, or pass a value")
        return [v.value]
    return [v]  # opset 18: a tensor or a sequence is its own element


@import_rule("SequenceMap")
def _sequence_map(ctx: NodeContext) -> list[Any]:
    """The body inlined once per element (``importer/inline.py``); sequence operands give their i-th
    element, tensor operands themselves; each body output becomes a sequence."""
    ctx.check_attrs(["body"])
    body = graph_attr(ctx, "body")
    if body is None:
        raise ModelError(f"{ctx.where()}: the 'body' attribute is required")
    first = _seq(ctx, 0)
    operands = [ctx.operand(i) for i in range(ctx.num_inputs)]
    for i, v in enumerate(operands[1:], 1):
        if isinstance(v, (SeqValue, OptValue)) and len(as_sequence(v, ctx.where())) != len(first):
            raise ModelError(f"{ctx.where()}: sequence operand {i} holds {len(as_sequence(v, ctx.where()))} "
                             f"tensors, operand 0 holds {len(first)}")
    results: list[list[Value]] = [[] for _ in body.output]
    for k in range(len(first)):
        feeds = [as_sequence(v, ctx.where()).items[k] if isinstance(v, (SeqValue, OptValue)) else v
                 for v in operands]
        outs = inline(ctx, body, feeds, f"body (element {k})")
        for acc, out in zip(results, outs):
            if not isinstance(out, Value):
                raise UnsupportedError(f"{ctx.where()}: body output {what_is(out)}; only tensor outputs are supported")
            acc.append(out)
    elems = [_body_elem(ctx, o.type) for o in body.output]
    return [SeqValue(tuple(acc), acc[0].type.elem if acc else elem) for acc, elem in zip(results, elems)]


def _body_elem(ctx: NodeContext, tp: Any) -> ElemKind | None:
    from glow_core.importer.structured import elem_of_type

    return elem_of_type(tp, ctx.where()) if tp.WhichOneof("value") else None
