"""Lowerings of the data-movement kinds declared in ``glow_core.ir.defs.movement``.

In: Split, Tile, DepthToSpace, SpaceToDepth, Trilu. Out: the primitives
Slice, Reshape, Broadcast, Transpose and Where (plus compile-time constants).
Every rule copies elements only, so the results are bit-exact.

- Split: one Slice per piece.
- Tile: Reshape (a size-1 axis before every repeated axis) + Broadcast (the
  repeats) + Reshape (merge each repeat with its axis).
- DepthToSpace / SpaceToDepth: Reshape to 6-d + Transpose + Reshape, the
  permutations of the kernel (both DepthToSpace modes).
- Trilu: Where(constant triangle mask, x, 0).

Small index helpers shared with the movement_index and movement_resize rules
live here too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from glow_core.ir.graph import Node, Value
from glow_core.ir.types import ElemKind
from glow_core.lowering.builder import Builder
from glow_core.lowering.table import lowering

I64 = ElemKind.INT64


# -- shared index helpers ------------------------------------------------------------------------------

def row_major_strides(shape: Sequence[int]) -> list[int]:
    """Element strides of a C-contiguous tensor of ``shape``."""
    strides = [1] * len(shape)
    for a in range(len(shape) - 2, -1, -1):
        strides[a] = strides[a + 1] * shape[a + 1]
    return strides


def out_of_range_sentinel(total: int, stride: int) -> int:
    """An index component whose contribution ``sentinel * stride`` alone reaches ``total``.

    A flat index built from non-negative components, one of which is the
    sentinel, is then out of range for the flattened tensor of ``total``
    elements, so the Gather primitive raises, as the kernel of the high-level
    kind does for an index outside its axis.
    """
    return -(-total // stride) if stride > 0 else total  # stride 0 only when total is 0


def checked_index(b: Builder, idx: Value, dims: np.ndarray | int, sentinel: np.ndarray | int) -> Value:
    """int64 indices with negatives resolved: Where(idx < 0, idx + dim, idx).

    Entries still outside [0, dim) (the input was outside [-dim, dim)) become
    ``sentinel``, which the caller chooses so that the final Gather raises.
    ``dims`` and ``sentinel`` broadcast against ``idx`` (scalars or constants).
    """
    idx = b.cast(idx, I64)
    zero = b.scalar(0, I64)
    dim = b.const(np.asarray(dims, np.int64))
    n = b.where(b.binary("Less", idx, zero), b.add(idx, dim), idx)
    bad = b.binary("Or", b.binary("Less", n, zero), b.binary("LessOrEqual", dim, n))
    return b.where(bad, b.const(np.asarray(sentinel, np.int64)), n)


def flat_gather(b: Builder, x: Value, lead: int, flat: Value) -> Value:
    """Gather rows of ``x`` with its first ``lead`` axes merged into one, at int64 row numbers ``flat``.

    The result has shape ``flat.shape + x.shape[lead:]``.
    """
    shape = x.type.shape
    rows = b.reshape(x, (math.prod(shape[:lead]),) + tuple(shape[lead:]))
    return b.emit1("Gather", [rows, flat], axis=0)


# -- Split / Tile --------------------------------------------------------------------------------------

@lowering("Split")
def _split(b: Builder, node: Node) -> list[Value]:
    x = b.input(0)
    axis = int(node.attrs["axis"])
    pieces, start = [], 0
    for size in node.attrs["splits"]:
        pieces.append(b.slice(x, axis, start, int(size)))
        start += int(size)
    return pieces


@lowering("Tile")
def _tile(b: Builder, node: Node) -> list[Value]:
    x = b.input(0)
    if x.type.rank == 0:
        return [x]  # nothing to repeat: the kernel copies the scalar
    spread: list[int] = []  # the input with a size-1 axis before each repeated axis
    wide: list[int] = []  # ... and that axis grown to the repeat count
    for d, r in zip(x.type.shape, node.attrs["repeats"]):
        if r != 1:
            spread.append(1)
            wide.append(int(r))
        spread.append(d)
        wide.append(d)
    y = b.broadcast(b.reshape(x, spread), wide)
    return [b.reshape(y, b.out_type().shape)]


# -- DepthToSpace / SpaceToDepth -------------------------------------------------------------------------

#: DepthToSpace mode -> (6-d view of the [n, c, h, w] input given n, c', b, h, w; permutation)
_D2S: dict[str, tuple[str, tuple[int, ...]]] = {
    "DCR": ("n b b c h w", (0, 3, 4, 1, 5, 2)),
    "CRD": ("n c b b h w", (0, 1, 4, 2, 5, 3)),
}


@lowering("DepthToSpace")
def _depth_to_space(b: Builder, node: Node) -> list[Value]:
    x = b.input(0)
    blk = int(node.attrs["blocksize"])
    n, c, h, w = x.type.shape
    sizes = {"n": n, "c": c // (blk * blk), "b": blk, "h": h, "w": w}
    view, perm = _D2S[str(node.attrs["mode"])]
    y = b.transpose(b.reshape(x, [sizes[s] for s in view.split()]), perm)
    return [b.reshape(y, b.out_type().shape)]


@lowering("SpaceToDepth")
def _space_to_depth(b: Builder, node: Node) -> list[Value]:
    x = b.input(0)
    blk = int(node.attrs["blocksize"])
    n, c, h, w = x.type.shape
    y = b.transpose(b.reshape(x, (n, c, h // blk, blk, w // blk, blk)), (0, 3, 5, 1, 2, 4))
    return [b.reshape(y, b.out_type().shape)]


# -- Trilu ---------------------------------------------------------------------------------------------

@lowering("Trilu")
def _trilu(b: Builder, node: Node) -> list[Value]:
    x = b.input(0)
    n, m = x.type.shape[-2:]
    k = int(node.attrs["k"])
    diag = np.arange(m)[None, :] - np.arange(n)[:, None]  # j - i
    keep = diag >= k if node.attrs["upper"] else diag <= k
    return [b.where(b.const(keep), x, b.scalar(0, x))]
