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
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from glow_backend_cpu.emit import dtypes
from glow_backend_cpu.emit.context import EMITTERS, EmitContext, Instr, Operand
from glow_backend_cpu.helpers import for_range
from glow_backend_cpu.target import host_codegen
from glow_backend_cpu.sync import define_split_table
from llvmlite import ir

from glow_core.ir.types import ElemKind, TensorType

I8P = ir.IntType(8).as_pointer()
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


class KernelSuite:
    """Several instructions compiled as one module (one entry point each), so micro-kernels are shared
    and LLVM runs once.

    Each case's entry is ``void run.<i>(i64 tid, i64 nthreads, i8** operands, i8* constants, i8* scratch)``.
    ``inputs`` of :meth:`add` are example arrays (None for an omitted optional operand); ``const`` lists
    the input positions that are compile-time constants (their payload goes to the emitter and is fixed).
    """

    def __init__(self, name: str = "suite") -> None:
        self.cg = host_codegen()
        self.mod = self.cg.new_module(f"kut.{name}")
        self.const_chunks: list[tuple[int, np.ndarray]] = []
        self.const_size = 0
        self.cases: list[dict[str, Any]] = []
        self.lib: Any = None

    def add(self, kind: str, attrs: Mapping[str, Any], inputs: Sequence[np.ndarray | None],
            out_shapes: Sequence[Sequence[int]], out_elem: ElemKind, const: Sequence[int] = ()) -> int:
        idx = len(self.cases)
        fnty = ir.FunctionType(ir.VoidType(), [I64, I64, I8P.as_pointer(), I8P, I8P])
        fn = ir.Function(self.mod, fnty, f"run.{idx}")
        tid, nth, args, consts, scratch = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        case: dict[str, Any] = {"scratch": 0, "out_shapes": [tuple(s) for s in out_shapes],
                                "out_dtype": out_elem.dtype, "name": fn.name}

        def add_constant(arr: np.ndarray, name: str) -> ir.Value:
            arr = np.ascontiguousarray(arr)
            off = self.const_size
            self.const_chunks.append((off, arr))
            self.const_size = off + ((arr.nbytes + 63) // 64) * 64
            p = b.gep(consts, [ir.Constant(I64, off)])
            return b.bitcast(p, dtypes.storage_type(ElemKind.from_dtype(arr.dtype)).as_pointer())

        def scratch_fn(nbytes: int) -> ir.Value:
            case["scratch"] = max(case["scratch"], int(nbytes))
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
        ctx = EmitContext(module=self.mod, builder=b, target=self.cg.target, tid=tid, nthreads=nth, function=fn,
                          add_constant=add_constant, scratch=scratch_fn)
        EMITTERS[kind](ctx, Instr(kind=kind, attrs=dict(attrs), outs=outs, ins=ins, name=f"{kind.lower()}{idx}"))
        b.ret_void()
        self._add_bench(fn)
        self.cases.append(case)
        return idx

    def _add_bench(self, run: ir.Function) -> None:
        """``bench.<i>(tid, nth, reps, args, consts, scratch, i64* barrier)``: reps runs, a spin barrier after each."""
        fn = ir.Function(self.mod, ir.FunctionType(ir.VoidType(), [I64, I64, I64, I8P.as_pointer(), I8P, I8P,
                                                                    I64.as_pointer()]),
                         run.name.replace("run.", "bench."))
        tid, nth, reps, args, consts, scratch, bar = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
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

    def build(self) -> KernelSuite:
        define_split_table(self.mod)  # the kernels' split table (codegen defines it in a network's module)
        self.ir_text = str(self.mod)
        self.lib = self.cg.load(self.cg.compile_module(self.mod))
        self.consts = aligned_empty((max(self.const_size, 64),), np.uint8)
        for off, arr in self.const_chunks:
            self.consts[off:off + arr.nbytes] = arr.view(np.uint8).reshape(-1)
        run_t = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.c_void_p)
        bench_t = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                                   ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
        for c in self.cases:
            c["fn"] = run_t(self.lib.address(c["name"]))
            c["bench"] = bench_t(self.lib.address(c["name"].replace("run.", "bench.")))
        return self

    def _buffers(self, case: dict[str, Any], inputs: Sequence[np.ndarray | None]) -> tuple[list[np.ndarray], Any, list[np.ndarray]]:
        outs = [aligned_empty(s, case["out_dtype"]) for s in case["out_shapes"]]
        for o in outs:
            o.reshape(-1).view(np.uint8)[...] = 0xFF  # NaN / garbage: every element must be written
        ins = [aligned_copy(a) if a is not None else None for a in inputs]
        ptrs = [o.ctypes.data for o in outs] + [a.ctypes.data if a is not None else 0 for a in ins]
        arr = (ctypes.c_void_p * len(ptrs))(*ptrs)
        return outs, arr, [a for a in ins if a is not None]

    def run(self, idx: int, inputs: Sequence[np.ndarray | None], nthreads: int = 1) -> list[np.ndarray]:
        """Run case ``idx``: every thread id in turn on this thread."""
        case = self.cases[idx]
        outs, arr, _keep = self._buffers(case, inputs)
        scratch = aligned_empty((max(case["scratch"], 64),), np.uint8)
        for t in range(nthreads):
            case["fn"](t, nthreads, ctypes.addressof(arr), self.consts.ctypes.data, scratch.ctypes.data)
        return outs

    def bench(self, idx: int, inputs: Sequence[np.ndarray | None], nthreads: int, reps: int,
              rounds: int = 5) -> float:
        """Best over ``rounds`` of the mean seconds per run, ``reps`` runs on ``nthreads`` real threads."""
        case = self.cases[idx]
        _outs, arr, _keep = self._buffers(case, inputs)
        scratches = [aligned_empty((max(case["scratch"], 64) + 4096,), np.uint8) for _ in range(nthreads)]
        bar = aligned_empty((16,), np.int64)
        bar[:] = 0
        best = float("inf")

        def work(t: int) -> None:
            case["bench"](t, nthreads, reps, ctypes.addressof(arr), self.consts.ctypes.data,
                          scratches[t].ctypes.data, bar.ctypes.data)

        for _ in range(rounds):
            threads = [threading.Thread(target=work, args=(t,)) for t in range(1, nthreads)]
            t0 = time.perf_counter()
            for th in threads:
                th.start()
            work(0)
            for th in threads:
                th.join()
            best = min(best, (time.perf_counter() - t0) / reps)
        return best


    def bench_split(self, idx: int, inputs: Sequence[np.ndarray | None], nthreads: int, reps: int,
                    rounds: int = 5) -> float:
        """The slowest thread's share alone: each thread id of an ``nthreads`` split, run by itself on this
        thread (best over ``rounds`` of ``reps`` runs, in thread CPU time). What ``nthreads`` free cores
        would take, without contention for memory bandwidth; robust against other load on the machine
        (``bench_split(idx, inputs, 1, ...)`` is the 1-thread time measured the same way)."""
        case = self.cases[idx]
        _outs, arr, _keep = self._buffers(case, inputs)
        scratch = aligned_empty((max(case["scratch"], 64),), np.uint8)
        best = [float("inf")] * nthreads
        for _ in range(rounds):
            for t in range(nthreads):
                t0 = time.thread_time()  # CPU time of this thread: time slices lost to other load do not count
                for _ in range(reps):
                    case["fn"](t, nthreads, ctypes.addressof(arr), self.consts.ctypes.data, scratch.ctypes.data)
                best[t] = min(best[t], (time.thread_time() - t0) / reps)
        return max(best)


class KernelUnderTest:
    """One instruction compiled alone (a one-case :class:`KernelSuite`)."""

    def __init__(self, kind: str, attrs: Mapping[str, Any], inputs: Sequence[np.ndarray | None],
                 out_shapes: Sequence[Sequence[int]], out_elem: ElemKind, const: Sequence[int] = ()) -> None:
        self.suite = KernelSuite(kind.lower())
        self.suite.add(kind, attrs, inputs, out_shapes, out_elem, const)
        self.suite.build()
        self.lib = self.suite.lib

    def run(self, inputs: Sequence[np.ndarray | None], nthreads: int = 1) -> list[np.ndarray]:
        return self.suite.run(0, inputs, nthreads)

    def bench(self, inputs: Sequence[np.ndarray | None], nthreads: int, reps: int, rounds: int = 5) -> float:
        return self.suite.bench(0, inputs, nthreads, reps, rounds)
