"""QLookup on plain int8 codes: ``y[i] = table[x[i] + 128]`` (256-entry tables of activations, rescales).

The int8 conversion turns SiLU, HardSwish, GELU, Sigmoid, Tanh, ... into a lookup of the input's code
(``glow_core.quantization.tables``); ``lower_quantized`` keeps it, and makes every Rescale one too, as a
``QLookup`` on the plain ``int8`` codes for a backend that runs it (uint8 codes, which the kind does not
declare for plain operands, take the Gather lowering). The index of a code is its byte with the sign bit
flipped (``x - (-128) == x ^ 0x80`` modulo 256).

Paths, chosen from the target's features (``GLOW_CPU_FEATURES`` narrows them):

- ``vbmi`` (AVX512-VBMI): 64 codes per step; the table lives in four zmm registers and two
  ``vpermi2b`` (``llvm.x86.avx512.vpermi2var.qi.512``) look up the 7 low bits of the index in its
  lower and upper 128 entries; the index's top bit selects between the two;
- ``avx2``: 32 codes per step; sixteen ``vpshufb`` look the low nibble up in each 16-entry row of the
  table, and the high nibble selects the row;
- ``scalar``: one load of the table per code (any target).

The codes are split between the threads in whole steps; the remainder (fewer than one step) runs
scalar on the last thread.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from glow_backend_cpu.emit.context import EmitContext, Instr, register_emitter
from glow_backend_cpu.emit.vecops import module_of
from glow_backend_cpu.helpers import I8, I64, elem_ptr, for_range, i64, intrinsic, partition, vload, vstore
from glow_core.ir.types import ElemKind

E = ElemKind
#: below this many codes the lookup runs on one thread (a step per thread costs more than it saves)
MIN_PARALLEL = 1 << 14
#: codes per step of each path
LANES = {"vbmi": 64, "avx2": 32, "scalar": 1}


def lookup_isa(features: str) -> str:
    """``vbmi``, ``avx2`` or ``scalar`` for a target feature string."""
    feats = set(features.split(","))
    if "+avx512vbmi" in feats and "+avx512bw" in feats:
        return "vbmi"
    return "avx2" if "+avx2" in feats else "scalar"


def _splat8(lanes: int, value: int) -> ir.Constant:
    return ir.Constant(ir.VectorType(I8, lanes), [value & 0xFF] * lanes)


class _Lookup:
    """One kernel's lookup: the table's registers (loaded once) and the vector step."""

    def __init__(self, b: ir.IRBuilder, table: ir.Value, isa: str) -> None:
        self.b, self.isa = b, isa
        self.lanes = LANES[isa]
        if isa == "vbmi":
            self.rows = [vload(b, table, 64 * k, 64) for k in range(4)]
        elif isa == "avx2":
            dup = ir.Constant(ir.VectorType(ir.IntType(32), 32), [i % 16 for i in range(32)])
            rows16 = [vload(b, table, 16 * k, 16) for k in range(16)]
            self.rows = [b.shuffle_vector(r, r, dup) for r in rows16]

    def vector(self, idx: ir.Value) -> ir.Value:
        return _STEPS[self.isa](self, idx)

    def _vbmi(self, idx: ir.Value) -> ir.Value:
        b = self.b
        v64 = ir.VectorType(I8, 64)
        fn = intrinsic(module_of(b), "llvm.x86.avx512.vpermi2var.qi.512", v64, [v64, v64, v64])
        lo = b.call(fn, [self.rows[0], idx, self.rows[1]])
        hi = b.call(fn, [self.rows[2], idx, self.rows[3]])
        return b.select(b.icmp_signed("<", idx, _splat8(64, 0)), hi, lo)

    def _avx2(self, idx: ir.Value) -> ir.Value:
        b = self.b
        v32 = ir.VectorType(I8, 32)
        fn = intrinsic(module_of(b), "llvm.x86.avx2.pshuf.b", v32, [v32, v32])
        low = b.and_(idx, _splat8(32, 0x0F))
        high = b.lshr(idx, _splat8(32, 4))
        acc: ir.Value = ir.Constant(v32, None)
        for k, row in enumerate(self.rows):
            acc = b.select(b.icmp_unsigned("==", high, _splat8(32, k)), b.call(fn, [row, low]), acc)
        return acc


_STEPS: dict[str, Callable[[_Lookup, ir.Value], ir.Value]] = {"vbmi": _Lookup._vbmi, "avx2": _Lookup._avx2}


def _scalar_range(b: ir.IRBuilder, instr: Instr, start: ir.Value, stop: ir.Value, flip: int) -> None:
    x, table, y = instr.ins[0], instr.ins[1], instr.outs[0]
    assert x is not None and table is not None
    with for_range(b, start, stop, name="lut") as i:
        code = b.xor(b.load(elem_ptr(b, x.ptr, i)), ir.Constant(I8, flip))
        b.store(b.load(elem_ptr(b, table.ptr, b.zext(code, I64))), elem_ptr(b, y.ptr, i))


def _vector_range(b: ir.IRBuilder, instr: Instr, isa: str, s0: ir.Value, s1: ir.Value, flip: int) -> None:
    """Steps ``[s0, s1)`` of ``lanes`` codes each."""
    x, table, y = instr.ins[0], instr.ins[1], instr.outs[0]
    assert x is not None and table is not None
    with b.if_then(b.icmp_signed("<", s0, s1)):
        look = _Lookup(b, table.ptr, isa)
        lanes = look.lanes
        with for_range(b, s0, s1, name="lutv") as s:
            at = b.mul(s, i64(lanes))
            idx = b.xor(vload(b, x.ptr, at, lanes), _splat8(lanes, flip))
            vstore(b, look.vector(idx), y.ptr, at)


@register_emitter("QLookup", elems=frozenset({E.INT8}))
def emit_qlookup(ctx: EmitContext, instr: Instr) -> None:
    b = ctx.builder
    x, y = instr.ins[0], instr.outs[0]
    assert x is not None
    n = y.type.size
    if n == 0:
        return
    flip = 0x80  # int8 code -> table index
    isa = lookup_isa(ctx.target.features)
    lanes = LANES[isa]
    steps = n // lanes if lanes > 1 else 0
    done = steps * lanes
    last = b.icmp_signed("==", ctx.tid, b.sub(ctx.nthreads, i64(1)))
    if n < MIN_PARALLEL:  # one thread does it all
        with b.if_then(last):
            if steps:
                _vector_range(b, instr, isa, i64(0), i64(steps), flip)
            _scalar_range(b, instr, i64(done), i64(n), flip)
        return
    if not steps:
        t0, t1 = partition(b, n, ctx.tid, ctx.nthreads)
        _scalar_range(b, instr, t0, t1, flip)
        return
    s0, s1 = partition(b, steps, ctx.tid, ctx.nthreads)
    _vector_range(b, instr, isa, s0, s1, flip)
    if done < n:  # the remainder on the last thread
        with b.if_then(last):
            _scalar_range(b, instr, i64(done), i64(n), flip)
