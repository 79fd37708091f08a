"""Symbolic dims in the emitters: which axes of an operand a run fills only in part, and how many rows hold data.

In a function compiled for symbolic dims every buffer is laid out at its bound shape and ``Operand.valid``
gives, per axis, how many entries a run holds (``glow_backend_cpu/symbolic.py``). The helpers here let an
emitter restrict its loops to the valid entries:

- :func:`sym_axes` / :func:`is_sym`: the axes whose extent is a run-time value;
- :func:`valid_rows`: the rows (the product of the leading axes) that hold data, when they are a leading
  prefix of the flattened rows (the only partial axis is the first one that is not 1, every axis after it is
  whole): work row by row then stops after them; None when every row must be visited;
- :func:`unsupported`: the error an emitter raises at emit time for a case it does not handle (the core then
  compiles per shape).

Entries past ``valid`` are padding: arbitrary bytes, NaN included. An emitter registered with
``symbolic=True`` must keep them out of every valid result; any emitter may skip computing padding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir

from glow_backend_cpu.emit.context import Operand
from glow_backend_cpu.helpers import i64, smin
from glow_core.errors import UnsupportedError


def sym_axes(op: Operand | None) -> list[int]:
    """The axes of ``op`` whose extent a run gives (empty for a fixed operand)."""
    if op is None or op.valid is None or op.type.sym is None:
        return []
    return [k for k, e in enumerate(op.type.sym) if e is not None]


def is_sym(op: Operand | None, axis: int) -> bool:
    """True when ``axis`` (negative counts from the end) of ``op`` is symbolic."""
    if op is None or op.valid is None or op.type.rank == 0:
        return False
    return (axis % op.type.rank) in sym_axes(op)


def extent(b: ir.IRBuilder, op: Operand, axis: int) -> ir.Value:
    """The valid extent of ``axis`` as an i64 value, clamped to the bound (a constant for a fixed axis)."""
    axis %= op.type.rank
    v = op.extent(axis)
    if isinstance(v, int):
        return i64(v)
    return smin(b, v, i64(op.type.shape[axis]))


def valid_rows(b: ir.IRBuilder, op: Operand | None, naxes: int) -> ir.Value | None:
    """How many of the rows of ``op``'s first ``naxes`` axes (flattened in C order) hold data, when they are a
    leading prefix of those rows; None when no leading axis is symbolic, or when the valid rows are not a prefix
    (the caller then visits every row, which is correct for row-wise work)."""
    axes = [k for k in sym_axes(op) if k < naxes]
    if not axes or op is None:
        return None
    first = axes[0]
    shape = op.type.shape
    if len(axes) > 1 or any(d != 1 for d in shape[:first]):
        return None
    inner = math.prod(shape[first + 1:naxes])
    n = extent(b, op, first)
    return n if inner == 1 else b.mul(n, i64(inner))


@dataclass
class RowSpace:
    """The rows of an operand's leading axes that hold data, as a dense range ``[0, count)``: row ``r`` of the
    range is row :meth:`row` of the bound layout (the identity when the valid rows are a prefix)."""

    count: ir.Value
    #: (bound size, valid extent) of the leading axes not 1, outermost first; None: a prefix (no mapping)
    axes: list[tuple[int, ir.Value | int]] | None

    def row(self, b: ir.IRBuilder, r: ir.Value) -> ir.Value:
        """The bound row index of dense valid row ``r``."""
        if self.axes is None:
            return r
        out: ir.Value = i64(0)
        stride, rem = 1, r
        for k, (size, ext) in enumerate(reversed(self.axes)):
            last = k == len(self.axes) - 1
            idx = rem if last else b.urem(rem, i64(ext) if isinstance(ext, int) else ext)
            if not last:
                rem = b.udiv(rem, i64(ext) if isinstance(ext, int) else ext)
            out = b.add(out, idx if stride == 1 else b.mul(idx, i64(stride)))
            stride *= size
        return out


def row_space(b: ir.IRBuilder, op: Operand | None, naxes: int) -> RowSpace | None:
    """The rows of ``op``'s first ``naxes`` axes that hold data (None when no leading axis is symbolic); the
    valid rows are enumerated densely (:class:`RowSpace`), a prefix without any index arithmetic."""
    if op is None or not [k for k in sym_axes(op) if k < naxes]:
        return None
    prefix = valid_rows(b, op, naxes)
    if prefix is not None:
        return RowSpace(prefix, None)
    sym = set(sym_axes(op))
    axes: list[tuple[int, ir.Value | int]] = []
    for k in range(naxes):
        size = op.type.shape[k]
        if size == 1:
            continue
        ext: ir.Value | int = extent(b, op, k) if k in sym else size
        if axes and k not in sym and not isinstance(axes[-1][1], ir.Value):
            axes[-1] = (axes[-1][0] * size, axes[-1][0] * size)  # merge neighbouring fixed axes
        else:
            axes.append((size, ext))
    count: ir.Value = i64(1)
    for _, ext in axes:
        count = b.mul(count, i64(ext) if isinstance(ext, int) else ext)
    return RowSpace(count, axes)


def unsupported(kind: str, why: str) -> UnsupportedError:
    """The error for a symbolic case an emitter does not handle (raised at emit time)."""
    return UnsupportedError(f"{kind} on the cpu backend: {why} is not supported with symbolic dims")


__all__ = ["RowSpace", "extent", "is_sym", "row_space", "sym_axes", "unsupported", "valid_rows"]
