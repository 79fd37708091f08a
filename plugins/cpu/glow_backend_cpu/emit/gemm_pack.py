"""B tiles packed at run time for the GEMM driver (``gemm.py``): rows of a run-time operand copied into a
tile of whole vectors (lanes past a row's width are zero, so the micro-kernel loads whole vectors)."""

from __future__ import annotations

from llvmlite import ir

from glow_backend_cpu.emit.vecops import Geometry, c64, gep, masked_load, vload, vstore
from glow_backend_cpu.helpers import for_range, iota, splat


def pack_rows(b: ir.IRBuilder, geo: Geometry, src: ir.Value, ld: int, kc: ir.Value, width: ir.Value,
              dst: ir.Value, full_width: bool, nvec: int = 0) -> None:
    """dst[k][0:width] = src[k * ld + 0:width] for k < kc, dst rows of ``nvec`` vectors (default NR floats;
    width <= the row; lanes past width are 0)."""
    W = geo.lanes
    V = nvec or geo.nvec
    NR = V * W
    if full_width:
        masks = None
    else:
        lanes = splat(b, width, W)
        masks = [b.icmp_signed("<", b.add(iota(W), splat(b, c64(j * W), W)), lanes) for j in range(V)]
    with for_range(b, 0, kc, name="pk") as k:
        s = gep(b, src, b.mul(k, c64(ld)))
        d = gep(b, dst, b.mul(k, c64(NR)))
        for j in range(V):
            if masks is None:
                v = vload(b, gep(b, s, j * W), W)
            else:
                v = masked_load(b, gep(b, s, j * W), masks[j])
            vstore(b, v, gep(b, d, j * W), align=64)
