"""A standalone harness for the CPU backend's kernel emitters (no graph, no memory plan).

:class:`KernelUnderTest` emits one instruction with its registered emitter into
a module whose entry point is ``void run(i64 tid, i64 nthreads, i8** operands,
i8* constants, i8* scratch)``, JIT-compiles it with the backend's code
generator and runs it on 64-byte-aligned numpy buffers:

- :meth:`run` calls the entry once per thread id, one after the other (a
  single instruction needs no barrier, so this checks the work split without
  threads);
- :meth:`bench` runs ``reps`` back-to-back executions on real threads (one
  Python thread per worker calling native code with the GIL released, a
  native spin barrier between repetitions) and returns seconds per run.
"""

from __future__ import annotations

import ctypes
import threading
import time
from typing import Any, Mapping, Sequence

import numpy as np
from llvmlite import ir

from glow_backend_cpu.emit import dtypes
from glow_backend_cpu.emit.context import EMITTERS, EmitContext, Instr, Operand
from glow_backend_cpu.target import host_codegen
from glow_core.ir.types import ElemKind, TensorType

I8P = ir.IntType(8).as_pointer()

#: compiled libraries stay alive for the whole process: an MCJIT engine owns the target machine it was
#: created with (llvmlite), so freeing one would free the code generator's shared target machine
_KEEP: list[Any] = []
I64 = ir.IntType(64)


def aligned_empty(shape: Sequence[int], dtype: Any, align: int = 64) -> np.ndarray:
    dt = np.dtype(dtype)
    n = int(np.prod(shape)) * dt.itemsize
    raw = np.empty(n + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + n].view(dt).reshape(shape)


def aligned_copy(a: np.ndarray) -> np.ndarray:
    out = aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out


class KernelUnderTest:
    """One instruction of ``kind`` compiled alone.

    ``inputs`` are example arrays (or None for an omitted optional operand);
    ``const`` lists the input positions that are compile-time constants (their
    payload is handed to the emitter, and their value is fixed).
    """

    def __init__(self, kind: str, attrs: Mapping[str, Any], inputs: Sequence[np.ndarray | None],
                 out_shapes: Sequence[Sequence[int]], out_elem: ElemKind, const: Sequence[int] = ()) -> None:
        cg = host_codegen()
        self.cg = cg
        mod = cg.new_module(f"kut.{kind}")
        fnty = ir.FunctionType(ir.VoidType(), [I64, I64, I8P.as_pointer(), I8P, I8P])
        fn = ir.Function(mod, fnty, "run")
        tid, nth, args, consts, scratch = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.const_chunks: list[tuple[int, np.ndarray]] = []
        self.const_size = 0
        self.scratch_bytes = 0

        def add_constant(arr: np.ndarray, name: str) -> ir.Value:
            arr = np.ascontiguousarray(arr)
            off = self.const_size
            self.const_chunks.append((off, arr))
            self.const_size = off + ((arr.nbytes + 63) // 64) * 64
            p = b.gep(consts, [ir.Constant(I64, off)])
            return b.bitcast(p, dtypes.storage_type(ElemKind.from_dtype(arr.dtype)).as_pointer())

        def scratch_fn(nbytes: int) -> ir.Value:
            self.scratch_bytes = max(self.scratch_bytes, int(nbytes))
            return scratch

        def operand(i: int, shape: Sequence[int], elem: ElemKind, value: np.ndarray | None) -> Operand:
            raw = b.load(b.gep(args, [ir.Constant(I64, i)]))
            ptr = b.bitcast(raw, dtypes.storage_type(elem).as_pointer())
            return Operand(ptr=ptr, type=TensorType(elem, tuple(shape)), align=64, const_value=value)

        outs = [operand(i, s, out_elem, None) for i, s in enumerate(out_shapes)]
        ins: list[Operand | None] = []
        for j, a in enumerate(inputs):
            if a is None:
                ins.append(None)
                continue
            ins.append(operand(len(outs) + j, a.shape, ElemKind.from_dtype(a.dtype), a if j in const else None))
        ctx = EmitContext(module=mod, builder=b, target=cg.target, tid=tid, nthreads=nth, function=fn,
                          add_constant=add_constant, scratch=scratch_fn)
        EMITTERS[kind](ctx, Instr(kind=kind, attrs=dict(attrs), outs=outs, ins=ins, name=kind.lower()))
        b.ret_void()
        self._add_bench(mod, fnty)
        self.ir_text = str(mod)
        self.lib = cg.load(cg.compile_module(mod))
        _KEEP.append(self.lib)
        self.fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_void_p)(self.lib.address("run"))
        self.bench_fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                                         ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
            self.lib.address("bench"))
        self.consts = aligned_empty((max(self.const_size, 64),), np.uint8)
        for off, arr in self.const_chunks:
            self.consts[off:off + arr.nbytes] = arr.view(np.uint8).reshape(-1)
        self.out_shapes = [tuple(s) for s in out_shapes]
        self.out_dtype = out_elem.dtype
        self.n_in = len(inputs)

    @staticmethod
    def _add_bench(mod: ir.Module, fnty: ir.FunctionType) -> None:
        """``bench(tid, nth, reps, args, consts, scratch, i64* barrier)``: reps runs, a spin barrier after each."""
        run = mod.get_global("run")
        fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [I64, I64, I64, I8P.as_pointer(), I8P, I8P,
                                                               I64.as_pointer()]), "bench")
        tid, nth, reps, args, consts, scratch, bar = fn.args
        entry = fn.append_basic_block("entry")
        b = ir.IRBuilder(entry)
        from glow_backend_cpu.helpers import for_range
        count = bar
        gen = b.gep(bar, [ir.Constant(I64, 8)])
        with for_range(b, 0, reps, name="rep"):
            b.call(run, [tid, nth, args, consts, scratch])
            g = b.load_atomic(gen, "acquire", 8)
            old = b.atomic_rmw("add", count, ir.Constant(I64, 1), "acq_rel")
            last = b.icmp_signed("==", old, b.sub(nth, ir.Constant(I64, 1)))
            with b.if_else(last) as (then, other):
                with then:
                    b.store_atomic(ir.Constant(I64, 0), count, "release", 8)
                    b.store_atomic(b.add(g, ir.Constant(I64, 1)), gen, "release", 8)
                with other:
                    spin = fn.append_basic_block("spin")
                    out = fn.append_basic_block("spun")
                    b.branch(spin)
                    b.position_at_end(spin)
                    cur = b.load_atomic(gen, "acquire", 8)
                    b.cbranch(b.icmp_signed("==", cur, g), spin, out)
                    b.position_at_end(out)
        b.ret_void()

    def _buffers(self, inputs: Sequence[np.ndarray | None]) -> tuple[list[np.ndarray], Any, list[np.ndarray]]:
        outs = [aligned_empty(s, self.out_dtype) for s in self.out_shapes]
        for o in outs:
            o.view(np.uint8)[...] = 0xFF  # NaN / garbage: every element must be written
        ins = [aligned_copy(a) if a is not None else None for a in inputs]
        ptrs = [o.ctypes.data for o in outs] + [a.ctypes.data if a is not None else 0 for a in ins]
        arr = (ctypes.c_void_p * len(ptrs))(*ptrs)
        return outs, arr, [a for a in ins if a is not None]

    def run(self, inputs: Sequence[np.ndarray | None], nthreads: int = 1) -> list[np.ndarray]:
        outs, arr, keep = self._buffers(inputs)
        scratch = aligned_empty((max(self.scratch_bytes, 64),), np.uint8)
        for t in range(nthreads):
            self.fn(t, nthreads, ctypes.addressof(arr), self.consts.ctypes.data, scratch.ctypes.data)
        return outs

    def bench(self, inputs: Sequence[np.ndarray | None], nthreads: int, reps: int, rounds: int = 5) -> float:
        """Best over ``rounds`` of the mean seconds per run of ``reps`` runs on ``nthreads`` threads."""
        outs, arr, keep = self._buffers(inputs)
        scratches = [aligned_empty((max(self.scratch_bytes, 64) + 4096,), np.uint8) for _ in range(nthreads)]
        bar = aligned_empty((16,), np.int64)
        bar[:] = 0
        best = float("inf")
        for _ in range(rounds):
            ts = []

            def work(t: int) -> None:
                self.bench_fn(t, nthreads, reps, ctypes.addressof(arr), self.consts.ctypes.data,
                              scratches[t].ctypes.data, bar.ctypes.data)

            threads = [threading.Thread(target=work, args=(t,)) for t in range(1, nthreads)]
            t0 = time.perf_counter()
            for th in threads:
                th.start()
            work(0)
            for th in threads:
                th.join()
            ts.append(time.perf_counter() - t0)
            best = min(best, ts[0] / reps)
        return best
