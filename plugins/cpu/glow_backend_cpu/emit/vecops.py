"""Vector building blocks of the cpu emitters: typed constants, (masked, strided) vector loads and stores,
FMA, the fused activations, prefetch and addressing, and the micro-kernels' register blocking."""

from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir

from glow_backend_cpu.helpers import F32, I1, I32, I64, i32, i64, intrinsic, splat

F32P = F32.as_pointer()
c64 = i64
c32 = i32


def cf(v: float) -> ir.Constant:
    return ir.Constant(F32, float(v))


def vty(lanes: int, elem: ir.Type = F32) -> ir.VectorType:
    return ir.VectorType(elem, lanes)


def module_of(b: ir.IRBuilder) -> ir.Module:
    return b.block.function.module  # type: ignore[no-any-return]


def unique_name(mod: ir.Module, base: str) -> str:
    name, i = base, 0
    while name in mod.globals:
        i += 1
        name = f"{base}.{i}"
    return name


def const_table(mod: ir.Module, elem: ir.Type, values: list[int], base: str) -> ir.GlobalVariable:
    """An internal constant array of ``values`` (a run-time-indexed table instead of unrolled code)."""
    ty = ir.ArrayType(elem, len(values))
    gv = ir.GlobalVariable(mod, ty, unique_name(mod, base))
    gv.linkage = "internal"
    gv.global_constant = True
    gv.initializer = ir.Constant(ty, values)
    return gv


def fn_cache(mod: ir.Module) -> dict[object, ir.Function]:
    """Per-module cache of generated helper functions (micro-kernels, ...)."""
    cache = getattr(mod, "_glow_linalg_fns", None)
    if cache is None:
        cache = {}
        mod._glow_linalg_fns = cache
    return cache  # type: ignore[no-any-return]


# -- vectors -----------------------------------------------------------------------------------------------

def iota_step(lanes: int, step: int = 1) -> ir.Constant:
    return ir.Constant(vty(lanes, I64), [i * step for i in range(lanes)])


def lane_mask(lanes: int, valid: int) -> ir.Constant:
    return ir.Constant(vty(lanes, I1), [1 if i < valid else 0 for i in range(lanes)])


def vptr(b: ir.IRBuilder, p: ir.Value, lanes: int) -> ir.Value:
    return b.bitcast(p, vty(lanes).as_pointer())


def vload(b: ir.IRBuilder, p: ir.Value, lanes: int, align: int = 4) -> ir.Value:
    return b.load(vptr(b, p, lanes), align=align)


def vstore(b: ir.IRBuilder, v: ir.Value, p: ir.Value, align: int = 4) -> None:
    b.store(v, vptr(b, p, v.type.count), align=align)


def _filled(t: ir.VectorType, fill: float) -> ir.Constant:
    """Every lane ``fill`` (``zeroinitializer`` for 0.0, the shortest IR text)."""
    return ir.Constant(t, None) if fill == 0.0 else ir.Constant(t, [fill] * t.count)


def masked_load(b: ir.IRBuilder, p: ir.Value, mask: ir.Value, align: int = 4,
                fill: float = 0.0) -> ir.Value:
    """Load the lanes of ``mask`` from ``p`` (others ``fill``); masked-off lanes are never accessed."""
    lanes = mask.type.count
    t = vty(lanes)
    fn = intrinsic(module_of(b), f"llvm.masked.load.v{lanes}f32.p0", t, [t.as_pointer(), I32, mask.type, t])
    return b.call(fn, [vptr(b, p, lanes), c32(align), mask, _filled(t, fill)])


def masked_store(b: ir.IRBuilder, v: ir.Value, p: ir.Value, mask: ir.Value, align: int = 4) -> None:
    lanes = mask.type.count
    t = vty(lanes)
    fn = intrinsic(module_of(b), f"llvm.masked.store.v{lanes}f32.p0", ir.VoidType(),
                   [t, t.as_pointer(), I32, mask.type])
    b.call(fn, [v, vptr(b, p, lanes), c32(align), mask])


def load_maybe_masked(b: ir.IRBuilder, p: ir.Value, lanes: int, valid: int, align: int = 4) -> ir.Value:
    if valid >= lanes:
        return vload(b, p, lanes, align)
    return masked_load(b, p, lane_mask(lanes, valid), align)


def store_maybe_masked(b: ir.IRBuilder, v: ir.Value, p: ir.Value, valid: int, align: int = 4) -> None:
    lanes = v.type.count
    if valid >= lanes:
        vstore(b, v, p, align)
    else:
        masked_store(b, v, p, lane_mask(lanes, valid), align)


def strided_masked_load(b: ir.IRBuilder, p: ir.Value, mask: ir.Value, stride: int, fill: float = 0.0) -> ir.Value:
    """Lanes ``p[i * stride]`` for the set lanes of ``mask`` (``fill`` elsewhere)."""
    lanes = mask.type.count
    if stride == 1:
        return masked_load(b, p, mask, fill=fill)
    if stride <= 4:  # one wide masked load, then keep every stride-th lane
        wide = lanes * stride
        idx = []
        for i in range(wide):
            idx.append(i // stride if i % stride == 0 else lanes)
        false = ir.Constant(vty(lanes, I1), None)
        wmask = b.shuffle_vector(mask, false, ir.Constant(vty(wide, I32), idx))
        v = masked_load(b, p, wmask, fill=fill)
        keep = ir.Constant(vty(lanes, I32), [i * stride for i in range(lanes)])
        return b.shuffle_vector(v, ir.Constant(vty(wide), ir.Undefined), keep)
    base = b.ptrtoint(p, I64)
    addrs = b.add(splat(b, base, lanes), iota_step(lanes, 4 * stride))
    ptrs = b.inttoptr(addrs, vty(lanes, F32P))
    t = vty(lanes)
    fn = intrinsic(module_of(b), f"llvm.masked.gather.v{lanes}f32.v{lanes}p0", t, [ptrs.type, I32, mask.type, t])
    return b.call(fn, [ptrs, c32(4), mask, _filled(t, fill)])


def fma(b: ir.IRBuilder, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
    t = x.type
    name = f"llvm.fma.v{t.count}f32" if isinstance(t, ir.VectorType) else "llvm.fma.f32"
    return b.call(intrinsic(module_of(b), name, t, [t, t, t]), [x, y, z])


def activation(b: ir.IRBuilder, v: ir.Value, act: str, lo: float, hi: float) -> ir.Value:
    """relu: ``max(v, 0)``; clip: ``min(max(v, lo), hi)`` as numpy does them (NaN stays NaN, ties keep v);
    hardswish: ``v * max(min((v + 3) / 6, 1), 0)``, the lowered nodes' operations in their order;
    hardswish6: ``(v * clip(v + 3, 0, 6)) / 6``, likewise."""
    if act == "none":
        return v
    if act == "hardswish6":
        def k(x: float) -> ir.Constant:
            return ir.Constant(v.type, [x] * v.type.count) if isinstance(v.type, ir.VectorType) else cf(x)
        t = activation(b, b.fadd(v, k(3.0)), "clip", 0.0, 6.0)
        return b.fdiv(b.fmul(v, t), k(6.0))
    zero = ir.Constant(v.type, None)
    if act == "relu":
        return b.select(b.fcmp_ordered("<", v, zero), zero, v)
    if act == "hardswish":
        def c(x: float) -> ir.Constant:
            return ir.Constant(v.type, [x] * v.type.count) if isinstance(v.type, ir.VectorType) else cf(x)
        t = b.fdiv(b.fadd(v, c(3.0)), c(6.0))
        t = b.select(b.fcmp_ordered(">", t, c(1.0)), c(1.0), t)
        return b.fmul(v, b.select(b.fcmp_ordered("<", t, zero), zero, t))
    if act == "clip":
        if not math.isinf(lo):
            c = ir.Constant(v.type, [lo] * v.type.count) if isinstance(v.type, ir.VectorType) else cf(lo)
            v = b.select(b.fcmp_ordered("<", v, c), c, v)
        if not math.isinf(hi):
            c = ir.Constant(v.type, [hi] * v.type.count) if isinstance(v.type, ir.VectorType) else cf(hi)
            v = b.select(b.fcmp_ordered(">", v, c), c, v)
        return v
    raise ValueError(f"unknown activation {act!r}")


# -- addressing --------------------------------------------------------------------------------------------

def prefetch_lines(b: ir.IRBuilder, p: ir.Value, lines: int) -> None:
    """Prefetch ``lines`` 64-byte lines from ``p`` into L2 (a hint: never faults, whatever the address)."""
    i8p = ir.IntType(8).as_pointer()
    fn = intrinsic(module_of(b), "llvm.prefetch.p0i8", ir.VoidType(), [i8p, I32, I32, I32])
    for i in range(lines):
        b.call(fn, [b.bitcast(gep(b, p, 16 * i), i8p), i32(0), i32(2), i32(1)])


def gep(b: ir.IRBuilder, p: ir.Value, off: ir.Value | int) -> ir.Value:
    return b.gep(p, [c64(off) if isinstance(off, int) else off])


# -- register blocking ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Geometry:
    """Register blocking for a vector width: MR rows x NVEC vectors of ``lanes`` floats."""

    lanes: int
    mr: int
    nvec: int

    @property
    def nr(self) -> int:
        return self.lanes * self.nvec


def geometry(lanes: int) -> Geometry:
    if lanes >= 16:  # 32 zmm registers: 24 accumulators, 4 B vectors, broadcasts
        return Geometry(16, 6, 4)
    if lanes == 8:  # 16 ymm registers: 12 accumulators
        return Geometry(8, 6, 2)
    return Geometry(4, 4, 2)
