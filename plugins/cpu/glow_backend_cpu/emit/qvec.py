"""Vector loads and stores of 8-/32-bit integers for the direct int8 kernels (MaxPool, grouped IntConv).

The float kernels' helpers (``gemm.masked_load`` / ``strided_masked_load``) load
float32 lanes with 0.0 in the masked-off ones; the integer kernels need bytes,
with a chosen fill value in the masked-off lanes (the type's minimum for a max,
the input zero point for a convolution, so padding contributes nothing).
"""

from __future__ import annotations

from llvmlite import ir

from glow_backend_cpu.emit.vecops import module_of
from glow_backend_cpu.helpers import I1, I8, I32, I64, i32, intrinsic, iota, splat


def vec(lanes: int, elem: ir.Type) -> ir.VectorType:
    return ir.VectorType(elem, lanes)


def masked_load_int(b: ir.IRBuilder, p: ir.Value, mask: ir.Value, fill: ir.Value) -> ir.Value:
    """``<lanes x iN>`` from ``p`` (an ``iN*``) in the set lanes of ``mask``, ``fill`` elsewhere (never read)."""
    t = fill.type
    n, bits = t.count, t.element.width
    fn = intrinsic(module_of(b), f"llvm.masked.load.v{n}i{bits}.p0", t, [t.as_pointer(), I32, mask.type, t])
    return b.call(fn, [b.bitcast(p, t.as_pointer()), i32(1), mask, fill])


def masked_store_int(b: ir.IRBuilder, v: ir.Value, p: ir.Value, mask: ir.Value) -> None:
    t = v.type
    fn = intrinsic(module_of(b), f"llvm.masked.store.v{t.count}i{t.element.width}.p0", ir.VoidType(),
                   [t, t.as_pointer(), I32, mask.type])
    b.call(fn, [v, b.bitcast(p, t.as_pointer()), i32(1), mask])


def strided_load_i8(b: ir.IRBuilder, p: ir.Value, mask: ir.Value, stride: int, fill: ir.Value) -> ir.Value:
    """Bytes ``p[i * stride]`` for the set lanes of ``mask``, ``fill`` (a ``<lanes x i8>``) elsewhere.

    Stride 1 is one masked load; strides 2..4 one wide masked load whose every stride-th lane is kept;
    larger strides a masked gather.
    """
    lanes = mask.type.count
    if stride == 1:
        return masked_load_int(b, p, mask, fill)
    if stride <= 4:
        wide = lanes * stride
        idx = [i // stride if i % stride == 0 else lanes for i in range(wide)]
        wmask = b.shuffle_vector(mask, ir.Constant(vec(lanes, I1), None), ir.Constant(vec(wide, I32), idx))
        wfill = b.shuffle_vector(fill, fill, ir.Constant(vec(wide, I32), [i % lanes for i in range(wide)]))
        v = masked_load_int(b, p, wmask, wfill)
        keep = ir.Constant(vec(lanes, I32), [i * stride for i in range(lanes)])
        return b.shuffle_vector(v, ir.Constant(v.type, None), keep)
    base = b.ptrtoint(p, I64)
    addrs = b.add(splat(b, base, lanes), ir.Constant(vec(lanes, I64), [i * stride for i in range(lanes)]))
    ptrs = b.inttoptr(addrs, vec(lanes, I8.as_pointer()))
    t = vec(lanes, I8)
    fn = intrinsic(module_of(b), f"llvm.masked.gather.v{lanes}i8.v{lanes}p0", t, [ptrs.type, I32, mask.type, t])
    return b.call(fn, [ptrs, i32(1), mask, fill])


def lane_range(b: ir.IRBuilder, first: ir.Value, lanes: int, lo: int, hi: int) -> ir.Value:
    """The lanes of ``first + iota`` inside ``[lo, hi)`` (constant bounds)."""
    v = b.add(splat(b, first, lanes), iota(lanes))
    return b.and_(b.icmp_signed(">=", v, splat(b, ir.Constant(I64, lo), lanes)),
                  b.icmp_signed("<", v, splat(b, ir.Constant(I64, hi), lanes)))
