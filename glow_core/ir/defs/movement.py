"""Data-movement and shape kinds: Reshape, Transpose, Slice, Concat, Split, Pad, Tile, Broadcast, ...

Every attribute is normalized by the importer: axes are non-negative, shapes
fully resolved (no 0 / -1 placeholders), pads explicit and non-negative, slices
given per axis as start / step / size. Indexing kinds (Gather, Scatter, ...)
live in ``movement_index``, Resize in ``movement_resize``.
"""

from __future__ import annotations

import math

import numpy as np

from glow_core.errors import GlowTypeError
from glow_core.ir.defs.common import Attrs, Types, req
from glow_core.ir.kinds import AttrType as A
from glow_core.ir.kinds import Category as C
from glow_core.ir.kinds import attr, define_kind
from glow_core.ir.types import ALL_KINDS, QUANTIZED_KINDS, TensorType

_MOVE = (C.DATA_MOVEMENT,)
_PRIM = (C.DATA_MOVEMENT, C.PRIMITIVE)
#: every element kind but the quantized ones (for kinds that reinterpret or compute values)
PLAIN_KINDS = ALL_KINDS - QUANTIZED_KINDS

PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _check_len(values: tuple[int, ...], n: int, what: str) -> None:
    if len(values) != n:
        raise GlowTypeError(f"{what} has {len(values)} entries, expected {n}")


# -- Reshape -------------------------------------------------------------------
def _reshape(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    shape = tuple(attrs["shape"])
    if any(d < 0 for d in shape):
        raise GlowTypeError(f"shape {list(shape)} has a negative dimension (the importer resolves 0 and -1)")
    if math.prod(shape) != x.size:
        raise GlowTypeError(f"cannot reshape {x} ({x.size} elements) to {list(shape)} ({math.prod(shape)} elements)")
    return [x.with_shape(shape)]


define_kind("Reshape", inputs=("Input",), attrs=(attr("shape", A.INTS, doc="the full output shape"),),
            infer=_reshape, categories=_PRIM, doc="Same elements in row-major order, new shape.")


# -- Transpose -----------------------------------------------------------------
def _transpose(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    perm = tuple(attrs["perm"])
    if sorted(perm) != list(range(x.rank)):
        raise GlowTypeError(f"perm {list(perm)} is not a permutation of the {x.rank} axes")
    return [x.with_shape(x.shape[p] for p in perm)]


define_kind("Transpose", inputs=("Input",), attrs=(attr("perm", A.INTS, doc="output axis i is input axis perm[i]"),),
            infer=_transpose, categories=_PRIM, doc="Permute the axes.")


# -- Slice ---------------------------------------------------------------------
def _slice(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    starts, sizes, steps = tuple(attrs["starts"]), tuple(attrs["sizes"]), tuple(attrs["steps"])
    for name, vals in (("starts", starts), ("sizes", sizes), ("steps", steps)):
        _check_len(vals, x.rank, name)
    for axis, (dim, start, size, step) in enumerate(zip(x.shape, starts, sizes, steps)):
        if step == 0 or size < 0:
            raise GlowTypeError(f"axis {axis}: step {step} / size {size} invalid (step != 0, size >= 0)")
        last = start + (size - 1) * step
        if size > 0 and not (0 <= start < dim and 0 <= last < dim):
            raise GlowTypeError(f"axis {axis}: elements {start}..{last} (step {step}) are outside [0, {dim})")
    return [x.with_shape(sizes)]


define_kind("Slice", inputs=("Input",),
            attrs=(attr("starts", A.INTS), attr("sizes", A.INTS), attr("steps", A.INTS)),
            infer=_slice, categories=_PRIM,
            doc="Result[i] = Input[starts + i * steps] per axis; result shape = sizes (steps may be negative).")


# -- Concat / Split ------------------------------------------------------------
def _concat(types: Types, attrs: Attrs) -> list[TensorType]:
    present = [t for t in types if t is not None]
    if not present:
        raise GlowTypeError("Concat needs at least one operand")
    first = present[0]
    axis = int(attrs["axis"])
    if not 0 <= axis < max(first.rank, 1) or first.rank == 0:
        raise GlowTypeError(f"axis {axis} is out of range for rank {first.rank}")
    total = 0
    for t in present:
        if t.elem != first.elem or t.scale != first.scale or t.offset != first.offset:
            raise GlowTypeError(f"operands must have one element type, got {first} and {t}")
        if t.rank != first.rank or any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != axis):
            raise GlowTypeError(f"shapes {list(first.shape)} and {list(t.shape)} differ outside axis {axis}")
        total += t.shape[axis]
    shape = list(first.shape)
    shape[axis] = total
    return [first.with_shape(shape)]


define_kind("Concat", inputs=("Inputs*",), attrs=(attr("axis", A.INT),), infer=_concat, categories=_PRIM,
            doc="Join the operands along axis.")


def _split(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    axis, splits = int(attrs["axis"]), tuple(attrs["splits"])
    if not 0 <= axis < x.rank:
        raise GlowTypeError(f"axis {axis} is out of range for rank {x.rank}")
    if not splits or any(s < 0 for s in splits) or sum(splits) != x.shape[axis]:
        raise GlowTypeError(f"splits {list(splits)} do not add up to dimension {x.shape[axis]} of axis {axis}")
    out = []
    for s in splits:
        shape = list(x.shape)
        shape[axis] = s
        out.append(x.with_shape(shape))
    return out


define_kind("Split", inputs=("Input",), outputs=("Results",), attrs=(attr("axis", A.INT), attr("splits", A.INTS)),
            infer=_split, categories=_MOVE, variadic_outputs=True,
            doc="Consecutive pieces of sizes splits along axis, one result each.")


# -- Pad -----------------------------------------------------------------------
_ZERO = np.zeros((), np.float64)
_ZERO.setflags(write=False)


def _pad(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    pads, mode = tuple(attrs["pads"]), str(attrs["mode"])
    _check_len(pads, 2 * x.rank, "pads")
    if mode not in PAD_MODES:
        raise GlowTypeError(f"mode '{mode}' is not one of {', '.join(PAD_MODES)}")
    if np.asarray(attrs["value"]).size != 1:
        raise GlowTypeError("value must hold exactly one element")
    shape = []
    for axis, dim in enumerate(x.shape):
        lo, hi = pads[axis], pads[axis + x.rank]
        if lo < 0 or hi < 0:
            raise GlowTypeError(f"axis {axis}: pads {lo}, {hi} must be >= 0 (the importer turns cropping into Slice)")
        if mode != "constant" and (lo or hi) and dim == 0:
            raise GlowTypeError(f"axis {axis}: cannot {mode}-pad an empty axis")
        if mode == "reflect" and max(lo, hi) >= dim:
            raise GlowTypeError(f"axis {axis}: reflect pads {lo}, {hi} must be smaller than the dimension {dim}")
        shape.append(dim + lo + hi)
    return [x.with_shape(shape)]


define_kind("Pad", inputs=("Input",),
            attrs=(attr("pads", A.INTS, doc="[begin_0..begin_r-1, end_0..end_r-1], non-negative"),
                   attr("mode", A.STRING, "constant", doc=" / ".join(PAD_MODES)),
                   attr("value", A.TENSOR, _ZERO, doc="fill value of constant mode (one element)")),
            infer=_pad, categories=_PRIM, doc="Pad each axis (numpy.pad modes constant/reflect/edge/wrap).")


# -- Tile / Broadcast ----------------------------------------------------------
def _tile(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    reps = tuple(attrs["repeats"])
    _check_len(reps, x.rank, "repeats")
    if any(r < 0 for r in reps):
        raise GlowTypeError(f"repeats {list(reps)} must be >= 0")
    return [x.with_shape(d * r for d, r in zip(x.shape, reps))]


define_kind("Tile", inputs=("Input",), attrs=(attr("repeats", A.INTS),), infer=_tile, categories=_MOVE,
            doc="Repeat the whole tensor repeats[i] times along axis i.")


def _broadcast(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    shape = tuple(attrs["shape"])
    if x.rank > len(shape) or any(
        d not in (1, s) for d, s in zip(reversed(x.shape), reversed(shape))
    ) or any(s < 0 for s in shape):
        raise GlowTypeError(f"{x} cannot be broadcast to {list(shape)}")
    return [x.with_shape(shape)]


define_kind("Broadcast", inputs=("Input",), attrs=(attr("shape", A.INTS, doc="the full result shape"),),
            infer=_broadcast, categories=_PRIM, doc="numpy.broadcast_to(Input, shape) (ONNX Expand).")


# -- DepthToSpace / SpaceToDepth -----------------------------------------------
def _depth_to_space(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    b, mode = int(attrs["blocksize"]), str(attrs["mode"])
    if x.rank != 4 or b <= 0 or x.shape[1] % (b * b) or mode not in ("DCR", "CRD"):
        raise GlowTypeError(f"needs a rank-4 NCHW input with C divisible by blocksize^2, blocksize > 0 and mode "
                            f"DCR or CRD (blocksize {b}, mode {mode})")
    n, c, h, w = x.shape
    return [x.with_shape((n, c // (b * b), h * b, w * b))]


define_kind("DepthToSpace", inputs=("Input",),
            attrs=(attr("blocksize", A.INT), attr("mode", A.STRING, "DCR", doc="DCR or CRD")),
            infer=_depth_to_space, categories=_MOVE, doc="Move channel blocks into spatial blocks (NCHW).")


def _space_to_depth(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    b = int(attrs["blocksize"])
    if x.rank != 4 or b <= 0 or x.shape[2] % b or x.shape[3] % b:
        raise GlowTypeError(f"needs a rank-4 NCHW input with H and W divisible by blocksize {b}")
    n, c, h, w = x.shape
    return [x.with_shape((n, c * b * b, h // b, w // b))]


define_kind("SpaceToDepth", inputs=("Input",), attrs=(attr("blocksize", A.INT),), infer=_space_to_depth,
            categories=_MOVE, doc="Move spatial blocks into channels (NCHW), the inverse of DepthToSpace DCR.")


# -- Trilu ---------------------------------------------------------------------
def _trilu(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    if x.rank < 2:
        raise GlowTypeError(f"needs rank >= 2, got {x}")
    if x.elem.is_quantized:
        raise GlowTypeError("quantized operands are not supported (zero has no fixed encoding)")
    return [x]


define_kind("Trilu", inputs=("Input",), attrs=(attr("upper", A.BOOL, True), attr("k", A.INT, 0)),
            infer=_trilu, categories=_MOVE, elems=PLAIN_KINDS,
            doc="Keep the upper (j - i >= k) or lower (j - i <= k) triangle of the last two axes, zero the rest.")


# -- BitCast -------------------------------------------------------------------
def _bitcast(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    to = attrs["to"]
    if x.elem.is_quantized or to.is_quantized or x.elem.itemsize != to.itemsize:
        raise GlowTypeError(f"cannot reinterpret {x.elem.value} as {to.value} (bit widths must match)")
    return [TensorType(to, x.shape)]


define_kind("BitCast", inputs=("Input",), attrs=(attr("to", A.ELEM),), infer=_bitcast, categories=_PRIM,
            elems=PLAIN_KINDS, doc="Reinterpret the bits (little endian) as another element kind of the same width.")
