"""LIR -> LLVM IR: one native entry point per compiled function.

In: a planned :class:`~glow_core.lir.LIRFunction`. Out: an ``llvmlite.ir.Module``
with the entry point

    void glow_main(i8** regions, i64 tid, i64 nthreads, i32 run)

that every worker thread calls once per inference (SPMD; ``run`` numbers the parallel runs for
the share tables of ``sync.py``, 0 on one thread), plus the
:class:`Layout` the runtime needs to set up the regions:

- ``regions[0]`` constants: the function's weights, each at a 64-byte aligned offset;
- ``regions[1]`` the activation arena of the memory plan;
- ``regions[2]`` scratch: ``scratch_stride`` bytes per thread;
- ``regions[3]`` packed constants: what emitters add at compile time (packed
  filters, tables), 64-byte aligned; a cache hit maps it from the cache file;
- ``regions[4 + k]`` the k-th input or output (caller memory; an input aligned to its element only).

Each compute instruction becomes a call of a kernel function emitted by its
emitter (``emit.context.EMITTERS``); kernels whose IR is identical (same kind,
shapes, attributes, alignment; pointers are arguments, emitter constants go
through a per-call table) are emitted once. Consecutive element-wise
instructions where each result feeds the next and dies there are fused into
one loop (:func:`find_steps`). A barrier separates instructions that
touch the same bytes (read after write, write after read or write); the
arena reuses bytes of dead activations, so hazards are tracked on byte ranges,
not on values.

A kernel whose estimated work is too small to pay for a second thread
(``workload.py``) is *solo*: only thread 0 calls it, with ``tid = 0,
nthreads = 1`` folded into its code, and no barrier separates it from the solo
kernels before it (they ran on the same thread); a barrier is needed only
where it touches bytes a parallel kernel since the last barrier touched, or a
parallel kernel touches bytes it did. ``Layout.parallel_kernels`` counts the
others; with none, the runtime never wakes a worker.
"""

from __future__ import annotations

import bisect
import math
import re
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from llvmlite import ir

from glow_backend_cpu import chunks
from glow_backend_cpu.emit.bf16 import set_precision
from glow_backend_cpu.emit.context import EMITTERS, EmitContext, Instr, Operand
from glow_backend_cpu.emit.dtypes import storage_type
from glow_backend_cpu.emit.elementwise import Step, emit_chain, emit_single
from glow_backend_cpu.helpers import I8P, I32, I64, VOID, i64, memcpy, partition_blocks
from glow_backend_cpu.profiling import Stamper, describe_step
from glow_backend_cpu.symbolic import SymbolValues, declare_symbols, symbols_of, valid_extents
from glow_backend_cpu.spill import PackedSpill, Pending
from glow_backend_cpu.balance import TIMED_BIT
from glow_backend_cpu.sync import declare_share_functions, define_error_flag, define_share_tables, \
    define_split_table, emit_glue
from glow_backend_cpu.target import Codegen
from glow_backend_cpu.workload import DEFAULT_SOLO_NS, is_solo
from glow_core import budget
from glow_core.errors import UnsupportedError
from glow_core.lir import ALIGNMENT, LIRFunction, LValue, Weight
from glow_core.lir.instructions import Effect
from glow_core.lir.ir import Activation
from glow_core.lir.ir import Instr as LInstr

REGION_CONST, REGION_ARENA, REGION_SCRATCH, REGION_PACKED, REGION_IO = 0, 1, 2, 3, 4
_GLOBAL_REF = re.compile(r'@"([^"]+)"|@([A-Za-z_.$][\w.$]*)')
ENTRY = "glow_main"
#: graph constants at least this large are placed in the packed region as chunks (shared between
#: executables by content, ``chunks.py``) instead of each executable's constant region
SHARED_CONST_BYTES = 1 << 20
#: the packed constants drop the mapped model file's pages every this many bytes (budget.release_pages)
RELEASE_EVERY = 64 << 20


def align_up(n: int, to: int = ALIGNMENT) -> int:
    return (n + to - 1) // to * to


@dataclass(frozen=True)
class Loc:
    """Where a region lives: region number, byte offset, byte size."""

    region: int
    offset: int
    nbytes: int

    def overlaps(self, other: Loc) -> bool:
        return (self.region == other.region and self.nbytes > 0 and other.nbytes > 0
                and self.offset < other.offset + other.nbytes and other.offset < self.offset + self.nbytes)


@dataclass
class Layout:
    """What the runtime needs besides the object code (JSON-serializable through ``as_dict``)."""

    const_bytes: int = 0
    #: constant weight name -> byte offset in the constant region (graph payloads are copied there)
    const_offsets: dict[str, int] = field(default_factory=dict)
    #: (offset in the packed region, byte payload) of the constants emitters added (packed at compile time)
    packed: list[tuple[int, bytes]] = field(default_factory=list)
    packed_bytes: int = 0
    #: (offset, bytes, digest) of each packed constant (``chunks.py``: shared between executables by digest)
    packed_chunks: list[tuple[int, int, str]] = field(default_factory=list)
    arena_bytes: int = 0
    scratch_stride: int = 0
    #: (role, io name, dtype, shape) per io region, in region order from REGION_IO
    io: list[tuple[str, str, str, tuple[int, ...]]] = field(default_factory=list)
    kernels: int = 0
    kernels_emitted: int = 0
    barriers: int = 0
    fused: int = 0
    #: kernels every thread runs a share of (the others run on thread 0 alone: ``workload.py``)
    parallel_kernels: int = 0
    #: with profiling: per kernel, its LIR instructions (``profiling.describe_step``; stamps in ``glow_profile``)
    profile: list[dict[str, Any]] = field(default_factory=list)
    #: the memory plan's report (``MemoryReport`` fields), kept for cache hits
    memory: dict[str, Any] = field(default_factory=dict)
    #: error-flag code (a string: JSON keys) -> the graph node whose index check stores it (``sync.set_error``)
    error_sites: dict[str, str] = field(default_factory=dict)
    #: the symbols of a function compiled for symbolic dims, in ``glow_symbols`` order (``symbolic.py``)
    symbols: list[str] = field(default_factory=list)


@dataclass
class _Step:
    """One call of the entry point: a kernel over some LIR instructions."""

    instrs: list[LInstr]
    reads: list[Loc]
    writes: list[Loc]
    kind: str
    #: run by thread 0 alone (too little work for a second thread: ``workload.is_solo``)
    solo: bool = False


class LIRCodegen:
    """Builds the module of one LIR function (see the module doc)."""

    def __init__(self, codegen: Codegen, lir: LIRFunction, name: str = "glow", *, profile: bool = False,
                 solo_ns: float = DEFAULT_SOLO_NS, on_kernel: Callable[[ir.Module, str], None] | None = None,
                 precision: str = "fp32", glue: bool = True, spill: PackedSpill | None = None) -> None:
        self.cg = codegen
        #: where packed constants are written as they are packed (None: kept in memory; ``spill.py``)
        self.spill = spill
        #: "fp32", or "bf16": the float32 GEMMs on bf16 operands (``emit/bf16.py``)
        self.precision = precision
        #: called with each new (not de-duplicated) kernel once it is complete (the parallel compile's pipelining)
        self.on_kernel = on_kernel
        #: kernels estimated below this many ns run on thread 0 only (0: every kernel on every thread)
        self.solo_ns = solo_ns
        #: stamp a cycle counter before and after every kernel on every thread (``profiling.Stamper``)
        self.profile = profile
        #: emit the glue (worker loop, shares, error functions) into this module; False: it is linked from
        #: ``glue.network_glue`` (JIT), the module defines only what the glue refers to
        self.glue = glue
        self.lir = lir
        self.module = codegen.new_module(name)
        self.layout = Layout()
        self.loc_of_root: dict[int, Loc] = {}
        self.payload_of: dict[int, np.ndarray] = {}
        self._kernel_text: dict[str, ir.Function] = {}
        #: per step: the kernel, its operand slots (region, offset, pointer type), its emitter constants' offsets
        self._calls: list[tuple[ir.Function, list[tuple[int, int, ir.Type]], list[int]]] = []
        self._const_weights: list[tuple[str, int, int]] = []
        self._used_args: dict[int, set[int]] = {}
        self._used_const: list[Loc] = []
        self.layout.symbols = symbols_of(lir)
        self._sym_global = declare_symbols(self.module, self.layout.symbols)
        #: the symbol loads of the kernel being emitted (None: no symbols)
        self._sym_values: SymbolValues | None = None
        self._layout_regions()

    # -- regions -----------------------------------------------------------------------------------
    def _layout_regions(self) -> None:
        lay = self.layout
        off = 0
        for w in self.lir.weights:
            if w.role == Weight.CONSTANT:
                self.loc_of_root[id(w)] = Loc(REGION_CONST, off, w.nbytes)
                self._const_weights.append((w.io_name, off, w.nbytes))
                if w.payload is not None:
                    self.payload_of[id(w)] = w.payload
                off = align_up(off + max(w.nbytes, 1))
            else:
                region = REGION_IO + len(lay.io)
                self.loc_of_root[id(w)] = Loc(region, 0, w.nbytes)
                lay.io.append((w.role, w.io_name, w.type.dtype.str if w.type.elem.name != "BFLOAT16" else "bfloat16",
                               tuple(w.type.shape)))
        lay.const_bytes = off
        plan = self.lir.plan
        assert plan is not None, "the LIR function needs a memory plan"
        for a in self.lir.activations:
            if id(a) in plan.offsets:
                self.loc_of_root[id(a)] = Loc(REGION_ARENA, plan.offsets[id(a)], a.nbytes)
        lay.arena_bytes = plan.arena_bytes
        rep = plan.report
        lay.memory = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in rep.__dict__.items()}

    def loc(self, v: LValue) -> Loc:
        root = v.root
        base = self.loc_of_root.get(id(root))
        if base is None:
            raise UnsupportedError(f"cpu codegen: %{v.name} has no memory location (root %{root.name})")
        return Loc(base.region, base.offset + v.root_offset, v.nbytes)

    def const_value(self, v: LValue) -> np.ndarray | None:
        root = v.root
        if not isinstance(root, Weight) or root.role != Weight.CONSTANT:
            return None
        payload = self.payload_of.get(id(root))
        if payload is None:
            return None
        raw = np.ascontiguousarray(payload).reshape(-1).view(np.uint8)
        off = v.root_offset
        return raw[off:off + v.nbytes].view(v.type.dtype).reshape(v.type.shape)

    def add_constant(self, array: np.ndarray) -> int:
        """Place an emitter's constant in the packed-constant region; returns its byte offset. A chunk equal to
        one a live region holds is kept as a view of it, not copied (``chunks.py``)."""
        a = np.ascontiguousarray(array)
        raw = memoryview(a.reshape(-1).view(np.uint8)) if a.size else memoryview(b"")
        d = chunks.digest(raw)
        hit = chunks.lookup(d, raw.nbytes)
        off = self.layout.packed_bytes
        data: bytes | memoryview | Pending | None = hit
        if self.spill is not None:  # (a chunk found in memory is written too: the image holds every constant)
            written = self.spill.put(off, raw)
            data = hit if hit is not None else written
        if data is None:
            data = raw.tobytes()
        self.layout.packed.append((off, data))
        self.layout.packed_chunks.append((off, len(data), d))
        self.layout.packed_bytes = align_up(off + max(len(data), 1))
        if self.layout.packed_bytes // RELEASE_EVERY != off // RELEASE_EVERY:
            budget.release_pages()  # the weights packed so far need not stay resident in their file form
        return off

    # -- steps ---------------------------------------------------------------------------------------
    def find_steps(self) -> list[_Step]:
        """Group the compute instructions into kernels, fusing element-wise chains."""
        instrs = [ins for ins in self.lir.instrs if ins.effect in (Effect.COMPUTE, Effect.COPY)]
        later_reads: list[set[int]] = [set() for _ in instrs]
        seen: set[int] = set()
        for i in reversed(range(len(instrs))):
            later_reads[i] = set(seen)
            for op in instrs[i].ins:
                if op.value is not None:
                    seen.add(id(op.value.root))
        steps: list[_Step] = []
        i = 0
        while i < len(instrs):
            chain = [instrs[i]]
            while self._elementwise(chain[-1]) and i + len(chain) < len(instrs) \
                    and self._extends(chain, instrs[i + len(chain)]):
                chain.append(instrs[i + len(chain)])
            while len(chain) > 1 and not self._valid_chain(chain, later_reads[i + len(chain) - 1]):
                chain.pop()
            steps.append(self._make_step(chain))
            i += len(chain)
        return steps

    @staticmethod
    def _elementwise(ins: LInstr) -> bool:
        return ins.effect is Effect.COMPUTE and EMITTERS.get(ins.kind) is emit_single and ins.n_out == 1

    def _extends(self, chain: list[LInstr], nxt: LInstr) -> bool:
        """May ``nxt`` join the chain? Element-wise, same shape, reads a result of the chain (by identity) and
        no other region of a result's buffer."""
        if not self._elementwise(nxt):
            return False
        out = nxt.outs[0].value
        if out is None or out.type.shape != chain[0].outs[0].value.type.shape:  # type: ignore[union-attr]
            return False
        produced = [c.outs[0].value for c in chain]
        ins = [op.value for op in nxt.ins if op.value is not None]
        if not any(any(x is p for p in produced) for x in ins):
            return False
        roots = {id(p.root) for p in produced if p is not None}
        return all(any(x is p for p in produced) or id(x.root) not in roots for x in ins)

    def _valid_chain(self, chain: list[LInstr], reads_after: set[int]) -> bool:
        """Every intermediate result dies inside the chain, and no operand read from memory overlaps the
        final output at another index."""
        final = chain[-1].outs[0].value
        assert final is not None
        for c in chain[:-1]:
            v = c.outs[0].value
            if v is final:
                continue
            if not isinstance(v, Activation):
                return False
            if id(v) in reads_after and v is not final.root:
                return False
        out_loc = self.loc(final)
        for x in chain_externals(chain):
            xl = self.loc(x)
            if xl.overlaps(out_loc) and not (xl == out_loc and x.type.shape == final.type.shape):
                return False
        return True

    def _make_step(self, chain: list[LInstr]) -> _Step:
        reads = [self.loc(v) for v in chain_externals(chain)]
        writes: list[Loc] = []
        for op in chain[-1].outs:
            if op.value is not None:
                writes.append(self.loc(op.value))
        kind = chain[0].kind if len(chain) == 1 else "+".join(c.kind for c in chain)
        return _Step(chain, reads, writes, kind, is_solo(chain, self.solo_ns))

    # -- kernels -------------------------------------------------------------------------------------
    def _operand(self, v: LValue | None, arg: ir.Value | None) -> Operand | None:
        if v is None or arg is None:
            return None
        off = self.loc(v).offset
        align = ALIGNMENT if off % ALIGNMENT == 0 else math.gcd(off, ALIGNMENT)
        return Operand(arg, v.type, align, self.const_value(v), valid_extents(v.type, self._sym_values))

    def emit_step(self, index: int, step: _Step) -> None:
        values: list[LValue] = []
        if len(step.instrs) > 1:  # a fused chain: the intermediates stay in registers
            candidates = chain_externals(step.instrs) + [step.instrs[-1].outs[0].value]
        else:
            candidates = [op.value for op in step.instrs[0].operands]
        for v in candidates:
            if v is not None and not any(v is x for x in values):
                values.append(v)
        locs = [self.loc(v) for v in values]
        disjoint = all(not a.overlaps(b) for i, a in enumerate(locs) for b in locs[i + 1:])
        arg_types = [storage_type(v.type.elem).as_pointer() for v in values]
        fnty = ir.FunctionType(VOID, [I64, I64, I8P, I8P.as_pointer()] + arg_types)
        fn = ir.Function(self.module, fnty, name=f"k{index}")
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        fn.attributes.add("noinline")
        tid, nthreads, scratch_arg, cargs = fn.args[:4]
        ptr_args = fn.args[4:]
        for a in ptr_args:
            if disjoint:
                a.add_attribute("noalias")
        entry = fn.append_basic_block("entry")
        body = fn.append_basic_block("body")
        eb = ir.IRBuilder(entry)
        term = eb.branch(body)
        eb.position_before(term)
        b = ir.IRBuilder(body)
        const_offsets: list[int] = []
        scratch_used = [0]
        self._sym_values = None if self._sym_global is None else \
            SymbolValues(eb, self._sym_global, self.layout.symbols)

        def add_constant(array: np.ndarray, name: str = "const") -> ir.Value:
            k = len(const_offsets)
            const_offsets.append(self.add_constant(array))
            p = eb.load(eb.gep(cargs, [i64(k)], inbounds=True))
            return eb.bitcast(p, storage_type_of(array).as_pointer())

        def scratch(nbytes: int) -> ir.Value:
            off = scratch_used[0]
            scratch_used[0] = align_up(off + int(nbytes))
            return eb.gep(scratch_arg, [i64(off)], inbounds=True)

        if step.solo:  # thread 0 alone: the partitioning folds away
            tid, nthreads = i64(0), i64(1)
        ctx = EmitContext(self.module, b, self.cg.target, tid, nthreads, fn, add_constant, scratch,
                          error_code=index + 1, symbols=self._sym_values)
        set_precision(ctx, self.precision)
        argmap = {id(v): a for v, a in zip(values, ptr_args)}
        first = step.instrs[0]
        if first.effect is Effect.COPY:
            self._emit_copy(ctx, argmap[id(first.outs[0].value)], argmap[id(first.ins[0].value)],
                            first.outs[0].value.nbytes)  # type: ignore[union-attr]
        elif len(step.instrs) > 1:
            self._emit_chain(ctx, step.instrs, argmap)
        else:
            instr = Instr(first.kind, first.attrs,
                          [self._operand(op.value, argmap.get(id(op.value))) for op in first.outs],  # type: ignore[misc]
                          [self._operand(op.value, argmap.get(id(op.value)) if op.value is not None else None)
                           for op in first.ins], name=first.name)
            EMITTERS[first.kind](ctx, instr)
            if ctx.checks_indices:
                self.layout.error_sites[str(index + 1)] = first.name
        b.ret_void()
        self.layout.scratch_stride = max(self.layout.scratch_stride, scratch_used[0])
        new = self._dedup(fn)
        if new is fn and self.on_kernel is not None:
            self.on_kernel(self.module, fn.name)
        fn = new
        slots = [(loc.region, loc.offset, t) for loc, t in zip(locs, arg_types)]
        self._calls.append((fn, slots, const_offsets))
        # constant weights a kernel never reads (packed copies replace them) need not be loaded
        used = self._used_args.get(id(fn))
        if used is None:
            used = self._used_args[id(fn)] = used_arguments(fn)
        for k, loc in enumerate(locs):
            if loc.region == REGION_CONST and (4 + k) in used:
                self._used_const.append(loc)

    def _emit_chain(self, ctx: EmitContext, chain: list[LInstr], argmap: dict[int, ir.Value]) -> None:
        externals: list[Operand] = []
        ext_index: dict[int, int] = {}
        steps: list[Step] = []
        produced: dict[int, int] = {}
        for j, ins in enumerate(chain):
            args: list[tuple[str, int]] = []
            for op in ins.ins:
                v = op.value
                assert v is not None
                if id(v) in produced:
                    args.append(("step", produced[id(v)]))
                    continue
                if id(v) not in ext_index:
                    ext_index[id(v)] = len(externals)
                    externals.append(self._operand(v, argmap[id(v)]))  # type: ignore[arg-type]
                args.append(("ext", ext_index[id(v)]))
            out = ins.outs[0].value
            assert out is not None
            steps.append(Step(ins.kind, ins.attrs, out.type.elem, args))
            produced[id(out)] = j
        last = chain[-1].outs[0].value
        emit_chain(ctx, steps, externals, self._operand(last, argmap[id(last)]))  # type: ignore[arg-type]
        self.layout.fused += len(chain) - 1

    @staticmethod
    def _emit_copy(ctx: EmitContext, dst: ir.Value, src: ir.Value, nbytes: int) -> None:
        if nbytes == 0:
            return
        b = ctx.builder
        block = 64 * 1024 if nbytes > 256 * 1024 else nbytes
        start, end = partition_blocks(b, nbytes, block, ctx.tid, ctx.nthreads)
        with b.if_then(b.icmp_signed("<", start, end)):
            d = b.gep(b.bitcast(dst, I8P), [start])
            s = b.gep(b.bitcast(src, I8P), [start])
            memcpy(b, d, s, b.sub(end, start))

    def _dedup(self, fn: ir.Function) -> ir.Function:
        raw = str(fn)  # the expensive part of IR generation: done once, reused by module_text
        text = raw.replace(f'@"{fn.name}"', "@K", 1).replace(f"@{fn.name}(", "@K(", 1)
        text = _GLOBAL_REF.sub(self._global_key, text)
        prev = self._kernel_text.get(text)
        if prev is not None:
            del self.module.globals[fn.name]
            return prev
        self._kernel_text[text] = fn
        _TEXTS.setdefault(self.module, {})[fn.name] = raw
        self.layout.kernels_emitted += 1
        return fn

    def _global_key(self, m: re.Match[str]) -> str:
        """A reference to a constant global, by its type and contents (emitters may name equal tables apart)."""
        name = m.group(1) or m.group(2)
        g = self.module.globals.get(name)
        if isinstance(g, ir.GlobalVariable) and g.global_constant and g.initializer is not None:
            return f"@const<{g.value_type}:{g.initializer}>"
        return m.group(0)

    def _compact_constants(self) -> None:
        """Keep only the constant weights some kernel reads, back to back (64-byte aligned), and move the
        kernels' operand offsets with them: the constant region (a bundle's weights file) has no holes where
        weights that packed copies replaced were laid out."""
        used = [w for w in self._const_weights
                if any(u.overlaps(Loc(REGION_CONST, w[1], w[2])) for u in self._used_const)]
        payloads = {w.io_name: w.payload for w in self.lir.weights if w.role == Weight.CONSTANT}
        moved: dict[int, tuple[int, int]] = {}  # old offset -> (region, new offset)
        off = 0
        for name, old, nbytes in used:
            payload = payloads.get(name)
            if nbytes >= SHARED_CONST_BYTES and payload is not None and payload.nbytes == nbytes:
                moved[old] = (REGION_PACKED, self.add_constant(payload))  # (a chunk: shared by content)
                continue
            moved[old] = (REGION_CONST, off)
            self.layout.const_offsets[name] = off
            off = align_up(off + max(nbytes, 1))
        self.layout.const_bytes = off
        starts = sorted((old, nbytes) for _, old, nbytes in self._const_weights)
        keys = [s for s, _ in starts]
        for fn, slots, consts in self._calls:
            for k, (region, o, t) in enumerate(slots):
                if region != REGION_CONST:
                    continue
                i = bisect.bisect_right(keys, o) - 1
                base = keys[i] if i >= 0 else 0
                # an operand of a weight no kernel reads is never dereferenced: point it at the region's start
                to_region, to_off = moved.get(base, (region, 0))
                slots[k] = (to_region, to_off + (o - base) if base in moved else 0, t)

    # -- the entry point -----------------------------------------------------------------------------
    def build(self) -> ir.Module:
        steps = self.find_steps()
        missing = sorted({s.instrs[0].kind for s in steps
                          if s.instrs[0].effect is Effect.COMPUTE and s.instrs[0].kind not in EMITTERS})
        if missing:
            where = {k: [s.instrs[0].where() for s in steps if s.instrs[0].kind == k][:3] for k in missing}
            raise UnsupportedError("the cpu backend has no emitter for: " + "; ".join(
                f"{k} ({', '.join(w)})" for k, w in where.items()), hint="choose another backend")
        for i, step in enumerate(steps):
            self.emit_step(i, step)
        self.layout.kernels = len(steps)
        self._compact_constants()
        first, nxt = declare_share_functions(self.module, internal=self.glue)
        main, segments = self._emit_main(steps, first, nxt)
        if self.glue:
            emit_glue(self.module, main, (first, nxt), segments, is_x86=self.cg.is_x86, triple=self.cg.triple)
        else:  # the glue comes compiled (glue.py): define what it refers to
            define_error_flag(self.module)
            define_share_tables(self.module, segments, internal=False)
        define_split_table(self.module, internal=self.glue)
        return self.module

    def _emit_main(self, steps: list[_Step], first: ir.Function, nxt: ir.Function) -> tuple[ir.Function, int]:
        """``glow_main``, cut into segments where kernels touch bytes earlier ones touched (see ``sync.py``,
        *shares*); returns it and the number of segments."""
        fn = ir.Function(self.module, ir.FunctionType(VOID, [I8P.as_pointer(), I64, I64, I32]), name=ENTRY)
        regions, tid, nthreads, run = fn.args
        entry = fn.append_basic_block("entry")
        b = ir.IRBuilder(entry)
        n_regions = REGION_IO + len(self.layout.io)
        bases = [b.load(b.gep(regions, [i64(r)], inbounds=True), name=f"region{r}") for r in range(n_regions)]
        max_cargs = max((len(c[2]) for c in self._calls), default=0)
        cargs = b.alloca(I8P, size=max(max_cargs, 1), name="cargs")
        segs = _Segments(b, first, nxt, (tid, nthreads, run), bases[REGION_SCRATCH], self.layout.scratch_stride)
        # what kernels since the last barrier read and wrote: [parallel kernels, solo kernels]
        pending_r: list[list[Loc]] = [[], []]
        pending_w: list[list[Loc]] = [[], []]
        stamper = Stamper(self.module, b, tid, len(steps)) if self.profile else None
        if stamper is not None:
            stamper.start()

        def open_segment() -> tuple[ir.Value, ir.Value]:
            share, scratch = segs.open()
            if stamper is not None:  # the kernel stamps of this segment go to the share's row
                stamper.in_share(share)
            return share, scratch

        share, scratch = open_segment()
        for index, (step, (kfn, slots, const_offsets)) in enumerate(zip(steps, self._calls)):
            # a solo kernel is ordered after the solo kernels before it (same share); only parallel ones race
            groups = (0,) if step.solo else (0, 1)
            seen_r = [loc for g in groups for loc in pending_r[g]]
            seen_w = [loc for g in groups for loc in pending_w[g]]
            hazard = any(w.overlaps(p) for w in step.writes for p in seen_r + seen_w) or \
                any(r.overlaps(p) for r in step.reads for p in seen_w)
            if hazard:
                segs.close()
                share, scratch = open_segment()
                self.layout.barriers += 1
                pending_r, pending_w = [[], []], [[], []]
            for k, off in enumerate(const_offsets):
                b.store(b.gep(bases[REGION_PACKED], [i64(off)], inbounds=True),
                        b.gep(cargs, [i64(k)], inbounds=True))
            if stamper is not None:
                stamper.before(index)
            args = [i64(0) if step.solo else share, i64(1) if step.solo else nthreads, scratch, cargs]
            for region, off, t in slots:
                args.append(b.bitcast(b.gep(bases[region], [i64(off)], inbounds=True), t))
            if step.solo:
                segs.timed = False  # thread 0's share holds more than its part: not a measure of its speed
                with b.if_then(b.icmp_signed("==", share, i64(0))):
                    b.call(kfn, args)
            else:
                b.call(kfn, args)
                self.layout.parallel_kernels += 1
            if stamper is not None:
                stamper.after(index)
            pending_r[int(step.solo)] += step.reads
            pending_w[int(step.solo)] += step.writes
        segs.close()
        self.layout.barriers += 1
        if stamper is not None:
            stamper.end()
            self.layout.profile = [dict(describe_step(s.instrs), solo=s.solo) for s in steps]
        b.ret_void()
        return fn, segs.count


class _Segments:
    """Emits the loop of each segment of ``glow_main``: claim a share, run the segment's kernels as that
    share (``tid`` = the share, its scratch), report it done and claim the next, until none is left."""

    def __init__(self, b: ir.IRBuilder, first: ir.Function, nxt: ir.Function,
                 thread: tuple[ir.Value, ir.Value, ir.Value], scratch_base: ir.Value, stride: int) -> None:
        self.b, self.first, self.nxt = b, first, nxt
        self.tid, self.n, self.run = thread
        self.scratch_base, self.stride = scratch_base, stride
        self.count = 0
        #: whether the open segment's shares are timed for the split (``balance.py``): no solo kernel in it
        self.timed = True
        self._open: tuple[ir.Value, ir.PhiInstr, ir.Block, ir.Block] | None = None

    def open(self) -> tuple[ir.Value, ir.Value]:
        """Start the next segment; returns (the share being run, its scratch)."""
        b = self.b
        seg = i64(self.count)
        self.count += 1
        p0 = b.call(self.first, [seg, self.tid, self.n, self.run])
        fn = b.function
        body = fn.append_basic_block(f"seg{self.count - 1}")
        end = fn.append_basic_block(f"seg{self.count - 1}.end")
        pre = b.block
        b.cbranch(b.icmp_signed("<", p0, i64(0)), end, body)
        b.position_at_end(body)
        share = b.phi(I64, name="share")
        share.add_incoming(p0, pre)
        scratch = b.gep(self.scratch_base, [b.mul(share, i64(self.stride))], inbounds=True)
        self._open = (seg, share, body, end)
        self.timed = True
        return share, scratch

    def close(self) -> None:
        assert self._open is not None
        seg, share, body, end = self._open
        b = self.b
        tagged = i64(seg.constant | TIMED_BIT) if self.timed else seg
        p = b.call(self.nxt, [tagged, share, self.tid, self.n, self.run])
        share.add_incoming(p, b.block)
        b.cbranch(b.icmp_signed("<", p, i64(0)), end, body)
        b.position_at_end(end)
        self._open = None


#: the text of the kernels each module's generator has printed already (by function name)
_TEXTS: weakref.WeakKeyDictionary[ir.Module, dict[str, str]] = weakref.WeakKeyDictionary()


def module_text(module: ir.Module) -> str:
    """``str(module)``, reusing the text of every kernel that ``_dedup`` printed (kernels are final by then):
    printing IR with llvmlite is slow, and each kernel would otherwise be printed twice. (Metadata is numbered
    when it is added, so a kernel's text stays valid; the metadata lines come last, as ``str`` prints them.)"""
    known = printed_texts(module)
    lines = ['; ModuleID = "%s"' % (module.name,), 'target triple = "%s"' % (module.triple,),
             'target datalayout = "%s"' % (module.data_layout,), '']
    lines += [it.get_declaration() for it in module.get_identified_types().values()]
    lines += [known.get(v.name) or str(v) for v in module.globals.values()]
    lines += module._get_metadata_lines()
    return "\n".join(lines)


def printed_texts(module: ir.Module) -> dict[str, str]:
    """The text of the kernels of ``module`` that its generator printed already, by name."""
    return _TEXTS.get(module, {})


def used_arguments(fn: ir.Function) -> set[int]:
    """Indices of the arguments of ``fn`` that some instruction uses."""
    args = {id(a): i for i, a in enumerate(fn.args)}
    used: set[int] = set()
    for block in fn.blocks:
        for ins in block.instructions:
            for op in getattr(ins, "operands", ()):
                k = args.get(id(op))
                if k is not None:
                    used.add(k)
            for inc in getattr(ins, "incomings", ()):  # phi nodes
                k = args.get(id(inc[0]))
                if k is not None:
                    used.add(k)
    return used


def chain_externals(chain: list[LInstr]) -> list[LValue]:
    """The operands a chain reads from memory: every in operand not computed by an earlier step."""
    produced: set[int] = set()
    out: list[LValue] = []
    for ins in chain:
        for op in ins.ins:
            v = op.value
            if v is not None and id(v) not in produced and not any(v is x for x in out):
                out.append(v)
        for op in ins.outs:
            if op.value is not None:
                produced.add(id(op.value))
    return out


def storage_type_of(array: np.ndarray) -> ir.Type:
    from glow_core.ir.types import ElemKind

    return storage_type(ElemKind.from_dtype(array.dtype)) if array.dtype.name != "bfloat16" else storage_type(
        ElemKind.BFLOAT16)


def generate(codegen: Codegen, lir: LIRFunction, name: str = "glow", *, profile: bool = False,
             solo_ns: float = DEFAULT_SOLO_NS, on_kernel: Callable[[ir.Module, str], None] | None = None,
             precision: str = "fp32", glue: bool = True, spill: PackedSpill | None = None) -> tuple[ir.Module, Layout]:
    """The LLVM module and region layout of ``lir`` (``on_kernel``, ``glue``, ``spill``: see :class:`LIRCodegen`)."""
    g = LIRCodegen(codegen, lir, name, profile=profile, solo_ns=solo_ns, on_kernel=on_kernel, precision=precision,
                   glue=glue, spill=spill)
    module = g.build()
    if spill is not None:
        spill.finish(g.layout)
    return module, g.layout


__all__ = ["ENTRY", "LIRCodegen", "Layout", "Loc", "generate", "module_text", "printed_texts"]
