"""Micro-kernel variants that share one function.

A convolutional network asks for micro-kernels that differ only in details the kernel can as well read at
run time: the row stride of B (``ldb``: 64 or 80 floats between ResNet-50's layers, any N for a B read in
place) and whether the first K block starts from a residual's block (``c_src``). Each such variant used to be
a function of its own, and the LLVM compile of a network grows with the volume of its IR. The variants that
differ only there now share one micro-kernel (``UKernel.dynamic``) that reads them from its ``flags``
argument; each variant is a one-call thunk, inlined (``alwaysinline``), that adds its constant bits to the
flags, so the call sites do not change and the code at a call is that of one call. ResNet-50: 42
micro-kernels -> 31, 2.65 -> 2.48 MB of IR, its cold compile 4.6 -> 3.9 s (2 cores, ``bench_compile.py``).

Flag bits: 0 first K block, 1 last K block (the drivers' ``kblock_flags``), :data:`FLAG_C_SRC`; ``ldb`` from
bit :data:`LDB_SHIFT` up.

The epilogue (bias and activation) stays a property of the kernel: made run-time choices as well (19
micro-kernels for ResNet-50), the compile got no faster and the runs of a block of convolutions were 1-2 %
slower (median of 80 interleaved runs, one thread).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from llvmlite import ir

from glow_backend_cpu.emit.vecops import c64, unique_name

if TYPE_CHECKING:
    from glow_backend_cpu.emit.gemm import UKernel

#: the flags bit "the first K block adds the block at c0" (``UKernel.c_src``)
FLAG_C_SRC = 4
#: ``ldb`` is ``flags >> LDB_SHIFT``
LDB_SHIFT = 32


def shared_spec(s: UKernel) -> UKernel | None:
    """The shared micro-kernel ``s`` is called through, or None when ``s`` is built as it is (taps, bf16)."""
    if s.dynamic or s.taps or s.bf16:
        return None
    return replace(s, ldb=0, c_src=False, dynamic=True)


def static_flags(s: UKernel) -> int:
    """The bits ``s``'s thunk adds to the flags of every call."""
    return (s.ldb << LDB_SHIFT) | (FLAG_C_SRC if s.c_src else 0)


def flag_set(b: ir.IRBuilder, flags: ir.Value, bit: int) -> ir.Value:
    """``flags & bit != 0``."""
    return b.icmp_unsigned("!=", b.and_(flags, c64(bit)), c64(0))


def ldb_of(b: ir.IRBuilder, flags: ir.Value) -> ir.Value:
    """A shared micro-kernel's ``ldb``."""
    return b.lshr(flags, c64(LDB_SHIFT))


def flag_thunk(mod: ir.Module, target: ir.Function, bits: int) -> ir.Function:
    """An inlined function with ``target``'s signature that calls it with ``bits`` added to the flags."""
    fn = ir.Function(mod, target.function_type, unique_name(mod, f"{target.name}.use"))
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    args = list(fn.args)
    args[6] = b.or_(args[6], c64(bits))  # the flags (UK_ARGS)
    b.call(target, args)
    b.ret_void()
    return fn
