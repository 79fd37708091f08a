"""Indexing kinds: Gather, GatherElements, GatherND, ScatterElements, ScatterND, OneHot,
ReverseSequence, TensorScatter.

Index operands hold int32 or int64 values; negative indices count from the end
of their axis (resolved at run time by the kernels); an index out of range is a
run-time error. Axes and batch_dims are normalized (non-negative) by the importer.
"""

from __future__ import annotations

from glow_core.errors import GlowTypeError
from glow_core.ir.defs.common import Attrs, Types, check_elems, req
from glow_core.ir.defs.movement import PLAIN_KINDS
from glow_core.ir.kinds import AttrType as A
from glow_core.ir.kinds import Category as C
from glow_core.ir.kinds import attr, define_kind
from glow_core.ir.types import INDEX_KINDS, NUMERIC_KINDS, ElemKind, TensorType

_MOVE = (C.DATA_MOVEMENT,)
SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")


def _axis(attrs: Attrs, rank: int, name: str = "axis") -> int:
    axis = int(attrs[name])
    if not 0 <= axis < rank:
        raise GlowTypeError(f"{name} {axis} is out of range for rank {rank}")
    return axis


def _indices(types: Types, i: int) -> TensorType:
    t = req(types, i)
    check_elems(t, INDEX_KINDS, "the indices operand")
    return t


# -- Gather family -------------------------------------------------------------
def _gather(types: Types, attrs: Attrs) -> list[TensorType]:
    x, idx = req(types, 0), _indices(types, 1)
    axis = _axis(attrs, x.rank)
    return [x.with_shape(x.shape[:axis] + idx.shape + x.shape[axis + 1:])]


define_kind("Gather", inputs=("Data", "Indices"), attrs=(attr("axis", A.INT, 0),), infer=_gather,
            categories=(C.DATA_MOVEMENT, C.PRIMITIVE),
            doc="numpy.take(Data, Indices, axis): Indices' shape replaces axis.")


def _same_rank_within(x: TensorType, idx: TensorType, axis: int, what: str) -> None:
    if idx.rank != x.rank or any(i > d for a, (i, d) in enumerate(zip(idx.shape, x.shape)) if a != axis):
        raise GlowTypeError(f"{what} {list(idx.shape)} must have the rank of the data {list(x.shape)} and no larger "
                            f"dimension outside axis {axis}")


def _gather_elements(types: Types, attrs: Attrs) -> list[TensorType]:
    x, idx = req(types, 0), _indices(types, 1)
    axis = _axis(attrs, x.rank)
    _same_rank_within(x, idx, axis, "indices")
    return [x.with_shape(idx.shape)]


define_kind("GatherElements", inputs=("Data", "Indices"), attrs=(attr("axis", A.INT, 0),), infer=_gather_elements,
            categories=_MOVE, doc="Result[..i..] = Data[.. Indices[..i..] at axis ..] (take_along_axis).")


def _gather_nd_shape(x: TensorType, idx: TensorType, b: int) -> tuple[int, ...]:
    if idx.rank < 1 or not 0 <= b < min(x.rank, idx.rank):
        raise GlowTypeError(f"batch_dims {b} must be below the ranks of data {list(x.shape)} and indices {list(idx.shape)}")
    if x.shape[:b] != idx.shape[:b]:
        raise GlowTypeError(f"the first {b} dimensions of data {list(x.shape)} and indices {list(idx.shape)} differ")
    k = idx.shape[-1]
    if not 1 <= k <= x.rank - b:
        raise GlowTypeError(f"the last dimension of indices ({k}) must be in [1, {x.rank - b}]")
    return idx.shape[:-1] + x.shape[b + k:]


def _gather_nd(types: Types, attrs: Attrs) -> list[TensorType]:
    x, idx = req(types, 0), _indices(types, 1)
    return [x.with_shape(_gather_nd_shape(x, idx, int(attrs["batch_dims"])))]


define_kind("GatherND", inputs=("Data", "Indices"), attrs=(attr("batch_dims", A.INT, 0),), infer=_gather_nd,
            categories=_MOVE, doc="Gather slices of Data addressed by index tuples (the last axis of Indices).")


# -- Scatter family ------------------------------------------------------------
def _reduction(x: TensorType, attrs: Attrs) -> None:
    red = str(attrs["reduction"])
    if red not in SCATTER_REDUCTIONS:
        raise GlowTypeError(f"reduction '{red}' is not one of {', '.join(SCATTER_REDUCTIONS)}")
    if red != "none":
        check_elems(x, NUMERIC_KINDS, f"data of a '{red}' scatter")


def _scatter_elements(types: Types, attrs: Attrs) -> list[TensorType]:
    x, idx, upd = req(types, 0), _indices(types, 1), req(types, 2)
    axis = _axis(attrs, x.rank)
    _same_rank_within(x, idx, axis, "indices")
    if upd.shape != idx.shape or upd.elem != x.elem:
        raise GlowTypeError(f"updates {upd} must have the shape of the indices {list(idx.shape)} and the data's "
                            f"element kind {x.elem.value}")
    _reduction(x, attrs)
    return [x]


define_kind("ScatterElements", inputs=("Data", "Indices", "Updates"),
            attrs=(attr("axis", A.INT, 0), attr("reduction", A.STRING, "none", doc=" / ".join(SCATTER_REDUCTIONS))),
            infer=_scatter_elements, categories=_MOVE, elems=PLAIN_KINDS,
            doc="Copy of Data with Updates written (or reduced) at Indices along axis; the inverse of GatherElements.")


def _scatter_nd(types: Types, attrs: Attrs) -> list[TensorType]:
    x, idx, upd = req(types, 0), _indices(types, 1), req(types, 2)
    if idx.rank < 1 or not 1 <= idx.shape[-1] <= x.rank:
        raise GlowTypeError(f"indices {list(idx.shape)} must end in a dimension within [1, {x.rank}]")
    want = idx.shape[:-1] + x.shape[idx.shape[-1]:]
    if upd.shape != want or upd.elem != x.elem:
        raise GlowTypeError(f"updates {upd} must be {x.elem.value}{list(want)}")
    _reduction(x, attrs)
    return [x]


define_kind("ScatterND", inputs=("Data", "Indices", "Updates"),
            attrs=(attr("reduction", A.STRING, "none", doc=" / ".join(SCATTER_REDUCTIONS)),),
            infer=_scatter_nd, categories=(C.DATA_MOVEMENT, C.PRIMITIVE), elems=PLAIN_KINDS,
            doc="Copy of Data with slices Updates written (or reduced) at the index tuples of Indices.")


# -- OneHot --------------------------------------------------------------------
def _one_hot(types: Types, attrs: Attrs) -> list[TensorType]:
    idx, values = req(types, 0), req(types, 1)
    check_elems(idx, NUMERIC_KINDS, "the indices operand")
    if values.shape != (2,) or values.elem.is_quantized:
        raise GlowTypeError(f"values must be a plain [off, on] pair, got {values}")
    depth = int(attrs["depth"])
    axis = int(attrs["axis"])
    if depth < 0 or not 0 <= axis <= idx.rank:
        raise GlowTypeError(f"depth {depth} must be >= 0 and axis {axis} within [0, {idx.rank}]")
    return [TensorType(values.elem, idx.shape[:axis] + (depth,) + idx.shape[axis:])]


define_kind("OneHot", inputs=("Indices", "Values"), attrs=(attr("depth", A.INT), attr("axis", A.INT)),
            infer=_one_hot, categories=_MOVE, elems=PLAIN_KINDS,
            doc="Values[1] where the new axis' position equals the index (negative: + depth), Values[0] elsewhere.")


# -- ReverseSequence -----------------------------------------------------------
def _reverse_sequence(types: Types, attrs: Attrs) -> list[TensorType]:
    x, lens = req(types, 0), req(types, 1)
    check_elems(lens, INDEX_KINDS, "sequence_lens")
    b, t = int(attrs["batch_axis"]), int(attrs["time_axis"])
    if x.rank < 2 or {b, t} != {0, 1}:
        raise GlowTypeError(f"needs rank >= 2 and batch/time axes 0 and 1 (got {b}, {t})")
    if lens.shape != (x.shape[b],):
        raise GlowTypeError(f"sequence_lens {list(lens.shape)} must be [{x.shape[b]}]")
    return [x]


define_kind("ReverseSequence", inputs=("Input", "SeqLens"),
            attrs=(attr("batch_axis", A.INT, 1), attr("time_axis", A.INT, 0)),
            infer=_reverse_sequence, categories=_MOVE,
            doc="Reverse the first SeqLens[b] steps along time_axis of every batch entry b.")


# -- TensorScatter -------------------------------------------------------------
def _tensor_scatter(types: Types, attrs: Attrs) -> list[TensorType]:
    past, upd = req(types, 0), req(types, 1)
    axis = _axis(attrs, past.rank)
    if axis == 0:
        raise GlowTypeError("axis must not be the batch axis 0")
    if upd.elem != past.elem or upd.rank != past.rank or any(
        a != b for i, (a, b) in enumerate(zip(upd.shape, past.shape)) if i != axis
    ) or upd.shape[axis] > past.shape[axis]:
        raise GlowTypeError(f"update {upd} must match the cache {past} except for a shorter sequence axis {axis}")
    if len(types) > 2 and types[2] is not None:
        w = types[2]
        if w.elem != ElemKind.INT64 or w.shape != (past.shape[0],):
            raise GlowTypeError(f"write_indices must be int64[{past.shape[0]}], got {w}")
    return [past]


define_kind("TensorScatter", inputs=("Past", "Update", "WriteIndices?"),
            attrs=(attr("axis", A.INT), attr("circular", A.BOOL, False)),
            infer=_tensor_scatter, categories=_MOVE,
            doc="KV-cache update: Past with Update written along axis from WriteIndices[b] (default 0) per batch; "
                "positions wrap modulo the axis length when circular.")
