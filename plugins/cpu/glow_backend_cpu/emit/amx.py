"""The AMX-BF16 micro-kernel of the precision bf16 (``emit/bf16.py``).

On a CPU with AMX (``amx-tile`` + ``amx-bf16``, and the Linux permission to use
the tile data, :func:`amx_permitted`), a bf16 GEMM runs on 32 x 32 blocks of C:
four 16 x 16 float32 tiles accumulate ``tdpbf16ps`` products of two A tiles
(16 rows x 16 pairs, read from rows of words with the row stride) and two B
tiles (16 pair rows x 16 columns, read from the packed panel with its stride:
the pair layout of the other bf16 kernels). Per K block the tiles start from
zero and are stored to a 4 KiB buffer on the stack; the block is then finished
by the float32 vector epilogue of ``gemm.py`` (the start block, residual, bias,
activation, masked stores), so tails in M and N are the vector code's. K blocks
are multiples of 16 pairs (the operands are padded with zero k).

The tile configuration (8 tiles of 16 rows x 64 bytes) is loaded once per GEMM
and thread (:func:`configure_tiles`), before its first micro-kernel call, and
released after its last (:func:`release_tiles`).
"""

from __future__ import annotations

import ctypes
import functools
import platform

from llvmlite import ir

from glow_backend_cpu.emit.vecops import F32, F32P, c64, const_table, gep, module_of, unique_name, vload
from glow_backend_cpu.helpers import I8, for_range, intrinsic

#: rows and columns of C a micro-kernel call computes; pairs (words) of K per tile step
BLOCK = 32
TILE_K = 16
#: Linux arch_prctl: request the permission to use a dynamic XSAVE feature; AMX tile data's number
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18


@functools.cache
def amx_permitted() -> bool:
    """Ask Linux for the permission to use AMX tile data in this process (once); False elsewhere or when refused."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.syscall(158, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA)) == 0  # SYS_arch_prctl
    except (OSError, AttributeError):  # pragma: no cover
        return False


def has_amx(features: str) -> bool:
    feats = set(features.split(","))
    return "+amx-tile" in feats and "+amx-bf16" in feats and "+avx512f" in feats


def _call(b: ir.IRBuilder, name: str, args: list[ir.Value]) -> None:
    fn = intrinsic(module_of(b), name, ir.VoidType(), [a.type for a in args])
    b.call(fn, args)


def configure_tiles(b: ir.IRBuilder) -> None:
    """``ldtilecfg``: palette 1, tiles 0..7 of 16 rows x 64 bytes."""
    cfg = [0] * 64
    cfg[0] = 1
    for t in range(8):
        cfg[16 + 2 * t] = 64
        cfg[48 + t] = 16
    table = const_table(module_of(b), I8, cfg, "glow.amx.cfg")
    table.align = 64
    _call(b, "llvm.x86.ldtilecfg", [b.bitcast(table, I8.as_pointer())])


def release_tiles(b: ir.IRBuilder) -> None:
    """``tilerelease``: the tiles back to their initial state (no AMX state for the OS to save)."""
    _call(b, "llvm.x86.tilerelease", [])


def _tile(t: int) -> ir.Constant:
    return ir.Constant(I8, t)


def build_amx_ukernel(mod: ir.Module, s: object, uk_args: list[ir.Type],
                      finish: object, add_start: object) -> ir.Function:
    """The micro-kernel ``s`` (a ``gemm.UKernel`` with ``bf16="amx"``, rows <= 32, nvec <= 2) on AMX tiles;
    ``finish`` / ``add_start``: gemm's epilogue helpers."""
    R, V, W = s.rows, s.nvec, s.lanes  # type: ignore[attr-defined]
    name = unique_name(mod, f"glow.amx.{R}x{V}.t{s.tail}")  # type: ignore[attr-defined]
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), uk_args), name)
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    a, a_stride, bp, cp, ldc, kc, flags, bias, bias_rs, pf, c0, aux = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    buf = b.alloca(ir.ArrayType(F32, BLOCK * BLOCK))
    buf.align = 64
    bufp = b.bitcast(buf, F32P)
    two_m, two_n = R > 16, V * W > 16
    c_tiles = [(0, 0, 0)] + ([(1, 0, 1)] if two_n else []) + ([(2, 1, 0)] if two_m else []) \
        + ([(3, 1, 1)] if two_m and two_n else [])
    for t, _, _ in c_tiles:
        _call(b, "llvm.x86.tilezero", [_tile(t)])
    a_bytes = b.mul(a_stride, c64(4))
    b_bytes = c64(s.ldb * 4)  # type: ignore[attr-defined]
    i8p = I8.as_pointer()
    with for_range(b, 0, kc, step=TILE_K, name="tk") as k:
        _call(b, "llvm.x86.tileloadd64", [_tile(4), b.bitcast(gep(b, a, k), i8p), a_bytes])
        if two_m:
            a1 = gep(b, a, b.add(b.mul(a_stride, c64(16)), k))
            _call(b, "llvm.x86.tileloadd64", [_tile(5), b.bitcast(a1, i8p), a_bytes])
        brow = gep(b, bp, b.mul(k, c64(s.ldb)))  # type: ignore[attr-defined]
        _call(b, "llvm.x86.tileloadd64", [_tile(6), b.bitcast(brow, i8p), b_bytes])
        if two_n:
            _call(b, "llvm.x86.tileloadd64", [_tile(7), b.bitcast(gep(b, brow, 16), i8p), b_bytes])
        for t, i, j in c_tiles:
            _call(b, "llvm.x86.tdpbf16ps", [_tile(t), _tile(4 + i), _tile(6 + j)])
    for t, i, j in c_tiles:
        dst = b.bitcast(gep(b, bufp, i * 16 * BLOCK + j * 16), i8p)
        _call(b, "llvm.x86.tilestored64", [_tile(t), dst, c64(BLOCK * 4)])
    acc = [[vload(b, gep(b, bufp, i * BLOCK + j * W), W, 64) for j in range(V)] for i in range(R)]
    c_rows = [gep(b, cp, b.mul(c64(i), ldc)) for i in range(R)]
    first = b.icmp_signed("!=", b.and_(flags, c64(1)), c64(0))
    src_rows = [gep(b, c0, b.mul(c64(i), ldc)) for i in range(R)] if s.c_src else None  # type: ignore[attr-defined]
    acc = add_start(b, s, acc, first, c_rows, src_rows)  # type: ignore[operator]
    finish(b, s, acc, flags, bias, bias_rs, c_rows)  # type: ignore[operator]
    b.ret_void()
    return fn


