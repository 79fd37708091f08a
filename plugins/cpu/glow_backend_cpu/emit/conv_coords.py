"""The output-index decomposition shared by the general (scalar) convolution loops.

``emit/conv.py``'s scalar float loop and ``emit/qgeneric.py``'s IntConv loop walk
the flat output ``[N, M, spatial...]`` one element at a time; both split the
flat index the same way, here.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from glow_backend_cpu.helpers import i64


@dataclass(frozen=True)
class ConvCoords:
    """One output element of a convolution: its pixel, output channel, batch image and group."""

    pixel: ir.Value     # flat index into the output's spatial plane
    channel: ir.Value   # output channel (0 .. M-1)
    image: ir.Value     # batch index
    group: ir.Value     # channel // (M / group)


def conv_coords(b: ir.IRBuilder, e: ir.Value, plane: int, channels: int, per_group: int) -> ConvCoords:
    """Split flat output index ``e`` of an ``[N, channels, plane]`` result (``per_group`` channels a group)."""
    o = b.urem(e, i64(plane))
    nm = b.udiv(e, i64(plane))
    oc = b.urem(nm, i64(channels))
    return ConvCoords(o, oc, b.udiv(nm, i64(channels)), b.udiv(oc, i64(per_group)))
