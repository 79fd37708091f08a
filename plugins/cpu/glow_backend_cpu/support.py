"""The run-time support library: functions LLVM may call that no library of this process provides.

LLVM lowers some operations to calls of compiler-rt functions (conversions
between ``half`` and ``float`` / ``double`` on CPUs without F16C, and
``double -> half`` on every x86 CPU). A JIT-compiled module has no
compiler-rt, so this module builds those functions once per process (integer
code only, so they never call themselves), JIT-compiles them and registers
their addresses with LLVM (``llvm.add_symbol``) before any generated code is
loaded:

- ``__extendhfsf2`` (half -> float, exact; subnormals through one exact multiply),
- ``__truncsfhf2`` (float -> half, round to nearest even),
- ``__truncdfhf2`` (double -> half: round to odd into float, then to nearest
  even, which is the correctly rounded result; numpy rounds the same way).

Their object code is kept in the cache folder (``support/KEY.o``, the key a digest of this file and of
``Codegen.identity``; the file holds a SHA-256 of the object code, then the code, and a copy whose digest
does not match is compiled again): generating it took most of a fresh process's cache hit.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import llvmlite.binding as llvm
from llvmlite import ir

from glow_backend_cpu.helpers import F16, F32, F64, I16, I32, I64

#: the layout of a cached support object (part of its key), and the cache folder's subfolder of them
OBJECT_FORMAT = 1
SUPPORT_DIR = "support"

SYMBOLS = ("__extendhfsf2", "__truncsfhf2", "__truncdfhf2", "__gnu_h2f_ieee", "__gnu_f2h_ieee")


def _c32(v: int) -> ir.Constant:
    return ir.Constant(I32, v & 0xFFFFFFFF)


def _float_bits_to_half(b: ir.IRBuilder, fbits: ir.Value) -> ir.Value:
    """float bits -> half bits (i16), round to nearest even (F. Giesen's float_to_half_fast3_rtne)."""
    sign = b.and_(fbits, _c32(0x80000000))
    f = b.xor(fbits, sign)
    # inf / NaN (and anything >= 2^16)
    big = b.icmp_unsigned(">=", f, _c32(0x47800000))
    nan = b.icmp_unsigned(">", f, _c32(0x7F800000))
    o_big = b.select(nan, _c32(0x7E00), _c32(0x7C00))
    # subnormal halves and zero: add 0.5 as a float, the result's low bits are the half
    denorm_magic = ((127 - 15) + (23 - 10) + 1) << 23
    fl = b.bitcast(f, F32)
    dsum = b.fadd(fl, b.bitcast(_c32(denorm_magic), F32))
    o_small = b.sub(b.bitcast(dsum, I32), _c32(denorm_magic))
    # normal halves
    mant_odd = b.and_(b.lshr(f, _c32(13)), _c32(1))
    n = b.add(f, _c32(((15 - 127) << 23) + 0xFFF))
    n = b.add(n, mant_odd)
    o_norm = b.lshr(n, _c32(13))
    small = b.icmp_unsigned("<", f, _c32(0x38800000))
    o = b.select(big, o_big, b.select(small, o_small, o_norm))
    o = b.or_(o, b.lshr(sign, _c32(16)))
    return b.trunc(o, I16)


def _half_bits_to_float(b: ir.IRBuilder, h: ir.Value) -> ir.Value:
    w = b.zext(h, I32)
    sign = b.shl(b.and_(w, _c32(0x8000)), _c32(16))
    em = b.and_(w, _c32(0x7FFF))
    # finite: (em << 13) as float times 2^112 is exact (subnormal halves included)
    scaled = b.fmul(b.bitcast(b.shl(em, _c32(13)), F32), ir.Constant(F32, 2.0 ** 112))
    special = b.icmp_unsigned(">=", em, _c32(0x7C00))
    infnan = b.bitcast(b.or_(_c32(0x7F800000), b.shl(b.and_(em, _c32(0x3FF)), _c32(13))), F32)
    v = b.select(special, infnan, scaled)
    return b.bitcast(b.or_(b.bitcast(v, I32), sign), F32)


def build_module(triple: str, data_layout: str, into: ir.Module | None = None, linkage: str = "") -> ir.Module:
    """The support functions in a module of their own, or added to ``into`` (bundles: ``linkage="weak_odr"``)."""
    m = into if into is not None else ir.Module(name="glow_support")
    m.triple = triple
    m.data_layout = data_layout

    def fn(name: str, ret: ir.Type, arg: ir.Type) -> tuple[ir.IRBuilder, ir.Value]:
        f = ir.Function(m, ir.FunctionType(ret, [arg]), name=name)
        f.attributes.add("nounwind")
        if linkage:
            f.linkage = linkage
        return ir.IRBuilder(f.append_basic_block("entry")), f.args[0]

    for name in ("__extendhfsf2", "__gnu_h2f_ieee"):
        b, x = fn(name, F32, F16)
        b.ret(_half_bits_to_float(b, b.bitcast(x, I16)))
    for name in ("__truncsfhf2", "__gnu_f2h_ieee"):
        b, x = fn(name, F16, F32)
        b.ret(b.bitcast(_float_bits_to_half(b, b.bitcast(x, I32)), F16))
    b, x = fn("__truncdfhf2", F16, F64)
    # round to odd into float: truncate toward zero, then set the lowest bit when inexact
    f = b.fptrunc(x, F32)
    back = b.fpext(f, F64)
    ax = b.bitcast(b.and_(b.bitcast(x, I64), ir.Constant(I64, (1 << 63) - 1)), F64)
    aback = b.bitcast(b.and_(b.bitcast(back, I64), ir.Constant(I64, (1 << 63) - 1)), F64)
    fb = b.bitcast(f, I32)
    away = b.fcmp_ordered(">", aback, ax)
    fb = b.select(away, b.sub(fb, _c32(1)), fb)
    inexact = b.fcmp_ordered("!=", back, x)
    fb = b.select(inexact, b.or_(fb, _c32(1)), fb)
    nan = b.fcmp_unordered("uno", x, x)
    fb = b.select(nan, b.bitcast(f, I32), fb)
    b.ret(b.bitcast(_float_bits_to_half(b, fb), F16))
    return m


def _cached_path(identity: str) -> Path | None:
    from glow_backend_cpu import cache

    if not cache.enabled():
        return None
    key = hashlib.sha256(f"support {OBJECT_FORMAT}|{identity}|".encode() + Path(__file__).read_bytes())
    return cache.cache_dir() / SUPPORT_DIR / f"{key.hexdigest()}.o"


def object_code(target_machine: llvm.TargetMachine, triple: str, data_layout: str, identity: str) -> bytes:
    """The support functions' object code for the code generator ``identity``: an intact cached copy, or
    compiled now (and stored, when the cache is on; a folder that cannot be written is no error)."""
    path = _cached_path(identity)
    if path is not None:
        try:
            data = path.read_bytes()
            if len(data) > 32 and hashlib.sha256(data[32:]).digest() == data[:32]:
                return data[32:]
        except OSError:
            pass
    mod = llvm.parse_assembly(str(build_module(triple, data_layout)))
    mod.verify()
    obj = bytes(target_machine.emit_object(mod))
    if path is not None:
        from glow_backend_cpu.cache import write_atomic

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, hashlib.sha256(obj).digest() + obj)
        except OSError:
            pass
    return obj


def install(target_machine: llvm.TargetMachine, triple: str, data_layout: str,
            identity: str) -> llvm.ExecutionEngine:
    """Load the support functions' object code and register their addresses (keep the returned engine
    alive); ``identity``: the code generator's (``Codegen.identity``)."""
    empty = llvm.parse_assembly(f'target triple = "{triple}"\ntarget datalayout = "{data_layout}"\n')
    ee = llvm.create_mcjit_compiler(empty, target_machine)
    ee.add_object_file(llvm.ObjectFileRef.from_data(object_code(target_machine, triple, data_layout, identity)))
    ee.finalize_object()
    for name in SYMBOLS:
        llvm.add_symbol(name, ee.get_function_address(name))
    return ee
