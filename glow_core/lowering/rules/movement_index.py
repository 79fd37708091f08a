"""Lowerings of the indexing kinds declared in ``glow_core.ir.defs.movement_index``.

In: GatherElements, GatherND, ScatterElements, TensorScatter, OneHot,
ReverseSequence. Out: the primitives Gather, ScatterND, Reshape, Transpose,
Slice, Concat, Cast, the int64 arithmetic Add / Sub / Mul / Mod, comparisons,
Or and Where, plus compile-time constants (iotas, strides). Results are
bit-exact.

- Gathers become flat index arithmetic on int64: every index is normalized
  (Where(idx < 0, idx + dim, idx)) and combined with compile-time strides into
  a row number of the data flattened by a Reshape, then one Gather. An index
  outside [-dim, dim) is replaced by a sentinel that makes the flat index out of
  range, so the Gather raises as the high-level kernel does.
- Scatters become ScatterND with computed index tuples (ScatterND itself
  normalizes negative components and rejects out-of-range ones).
- OneHot compares the (normalized) indices with a constant iota; ReverseSequence
  computes each element's source step from SeqLens and gathers.
"""

from __future__ import annotations

import math

import numpy as np

from glow_core.ir.graph import Node, Value
from glow_core.ir.types import ElemKind
from glow_core.lowering.builder import Builder
from glow_core.lowering.rules.movement import (
    I64,
    checked_index,
    flat_gather,
    out_of_range_sentinel,
    row_major_strides,
)
from glow_core.lowering.table import lowering

# -- GatherElements / GatherND ------------------------------------------------------------------------

@lowering("GatherElements")
def _gather_elements(b: Builder, node: Node) -> list[Value]:
    x, idx = b.input(0), b.input(1)
    axis = int(node.attrs["axis"])
    shape = x.type.shape
    strides = row_major_strides(shape)
    # flat position of element i of the result: sum over the other axes of i_a * stride_a ...
    coords = np.indices(idx.type.shape, dtype=np.int64)
    base = sum((coords[a] * strides[a] for a in range(len(shape)) if a != axis),
               np.zeros(idx.type.shape, np.int64))
    # ... plus the (normalized) index times the stride of axis
    n = checked_index(b, idx, shape[axis], out_of_range_sentinel(x.type.size, strides[axis]))
    if strides[axis] != 1:
        n = b.mul(n, b.scalar(strides[axis], I64))
    flat = b.add(b.const(np.asarray(base, np.int64)), n)
    return [flat_gather(b, x, x.type.rank, flat)]


@lowering("GatherND")
def _gather_nd(b: Builder, node: Node) -> list[Value]:
    x, idx = b.input(0), b.input(1)
    bd = int(node.attrs["batch_dims"])
    shape, ishape = x.type.shape, idx.type.shape
    k = ishape[-1]
    inner = shape[bd:bd + k]  # the axes one index tuple addresses
    block = math.prod(inner)
    rows = math.prod(shape[:bd]) * block  # the data as [rows] + shape[bd + k:]
    strides = row_major_strides(inner)
    sentinels = [out_of_range_sentinel(rows, s) for s in strides]
    n = checked_index(b, idx, np.asarray(inner, np.int64), np.asarray(sentinels, np.int64))
    if k == 1:
        flat = b.reshape(n, ishape[:-1])
    else:
        weighted = b.mul(n, b.const(np.asarray(strides, np.int64)))
        flat = b.reduce("ReduceSum", weighted, (len(ishape) - 1,), keepdims=False)
    if bd:
        # the batch entry's first row: a constant that broadcasts over the index tuples
        first = (np.arange(math.prod(shape[:bd]), dtype=np.int64) * block).reshape(
            shape[:bd] + (1,) * (len(ishape) - 1 - bd))
        flat = b.add(flat, b.const(first))
    return [flat_gather(b, x, bd + k, flat)]


# -- ScatterElements / TensorScatter -------------------------------------------------------------------

@lowering("ScatterElements")
def _scatter_elements(b: Builder, node: Node) -> list[Value]:
    x, idx, upd = b.input(0), b.input(1), b.input(2)
    axis = int(node.attrs["axis"])
    ishape = idx.type.shape
    r = len(ishape)
    # full index tuple of each update: its own position, with the index at axis
    coords = np.moveaxis(np.indices(ishape, dtype=np.int64), 0, -1)  # ishape + (r,)
    parts: list[Value] = []
    if axis > 0:
        parts.append(b.const(np.ascontiguousarray(coords[..., :axis])))
    parts.append(b.reshape(b.cast(idx, I64), ishape + (1,)))
    if axis < r - 1:
        parts.append(b.const(np.ascontiguousarray(coords[..., axis + 1:])))
    tuples = b.concat(parts, r)
    return [b.emit1("ScatterND", [x, tuples, upd], reduction=node.attrs["reduction"])]


@lowering("TensorScatter")
def _tensor_scatter(b: Builder, node: Node) -> list[Value] | None:
    past, upd, write = b.input(0), b.input(1), b.opt_input(2)
    if past.type.elem.is_quantized:
        return None  # ScatterND (and Where) are not defined for quantized kinds: no primitive can write it
    axis = int(node.attrs["axis"])
    batch, cap, seq = past.type.shape[0], past.type.shape[axis], upd.type.shape[axis]
    # bring the sequence axis next to the batch axis: the index tuples are then (batch, position)
    perm = (0, axis) + tuple(a for a in range(1, past.type.rank) if a != axis)
    inverse = tuple(int(p) for p in np.argsort(perm))
    steps = np.arange(seq, dtype=np.int64)[None, :]
    if write is None:
        pos: Value = b.const(np.broadcast_to(steps, (batch, seq)).copy())
    else:
        pos = b.add(b.reshape(b.cast(write, I64), (batch, 1)), b.const(steps))
        if node.attrs["circular"] and cap:
            pos = b.emit1("Mod", [pos, b.scalar(cap, I64)], fmod=False)  # Python %: in [0, cap)
        else:
            # the kernel rejects a negative position; ScatterND would count it from the end
            pos = b.where(b.binary("Less", pos, b.scalar(0, I64)), b.scalar(cap, I64), pos)
    rows = np.broadcast_to(np.arange(batch, dtype=np.int64)[:, None, None], (batch, seq, 1)).copy()
    tuples = b.concat([b.const(rows), b.reshape(pos, (batch, seq, 1))], 2)
    res = b.emit1("ScatterND", [b.transpose(past, perm), tuples, b.transpose(upd, perm)], reduction="none")
    return [b.transpose(res, inverse)]


# -- OneHot --------------------------------------------------------------------------------------------

#: numpy dtype kind of the indices -> the kind the kernel compares them in (int64 for the others,
#: bfloat16 included: its numpy kind is "V", so the kernel truncates it to int64 like a Cast)
_ONE_HOT_COMPARE: dict[str, ElemKind] = {"f": ElemKind.FLOAT64, "u": ElemKind.UINT64}


@lowering("OneHot")
def _one_hot(b: Builder, node: Node) -> list[Value]:
    idx, values = b.input(0), b.input(1)
    depth, axis = int(node.attrs["depth"]), int(node.attrs["axis"])
    ishape = idx.type.shape
    wide = _ONE_HOT_COMPARE.get(idx.type.dtype.kind, I64)
    i = b.cast(idx, wide)
    if wide != ElemKind.UINT64:
        zero = b.scalar(0, wide)
        i = b.where(b.binary("Less", i, zero), b.add(i, b.scalar(depth, wide)), i)
    # the new axis: indices [..., 1, ...] against iota [depth, 1, ...] (out-of-range ones match nothing)
    i = b.reshape(i, ishape[:axis] + (1,) + ishape[axis:])
    iota = b.const(np.arange(depth, dtype=wide.dtype).reshape((depth,) + (1,) * (len(ishape) - axis)))
    hot = b.binary("Equal", i, iota)
    ones = (1,) * (len(ishape) + 1)
    off = b.reshape(b.slice(values, 0, 0, 1), ones)
    on = b.reshape(b.slice(values, 0, 1, 1), ones)
    return [b.where(hot, on, off)]


# -- ReverseSequence ------------------------------------------------------------------------------------

@lowering("ReverseSequence")
def _reverse_sequence(b: Builder, node: Node) -> list[Value]:
    x, lens = b.input(0), b.input(1)
    t_axis = int(node.attrs["time_axis"])
    shape = x.type.shape
    steps, batch = shape[t_axis], shape[1 - t_axis]
    # src[.., ..] laid out like the first two axes of x: step t of entry e reads step n-1-t if t < n, else t
    lens_shape, time_shape = [1, 1], [1, 1]
    lens_shape[1 - t_axis], time_shape[t_axis] = batch, steps
    n = b.reshape(b.cast(lens, I64), lens_shape)
    t = b.const(np.arange(steps, dtype=np.int64).reshape(time_shape))
    src = b.where(b.binary("Less", t, n), b.sub(b.sub(n, b.scalar(1, I64)), t), t)
    # row of (step, entry) in x viewed as [shape[0] * shape[1], ...]
    strides = row_major_strides(shape[:2])
    entry = np.arange(batch, dtype=np.int64).reshape(lens_shape) * strides[1 - t_axis]
    flat = b.add(b.mul(src, b.scalar(strides[t_axis], I64)), b.const(entry))
    # the kernel rejects a length outside [0, steps]: its rows get an out-of-range row number
    bad = b.binary("Or", b.binary("Less", n, b.scalar(0, I64)), b.binary("Less", b.scalar(steps, I64), n))
    flat = b.where(bad, b.scalar(steps * batch, I64), flat)
    return [flat_gather(b, x, 2, flat)]
