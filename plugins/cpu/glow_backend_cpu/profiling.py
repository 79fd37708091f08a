"""Per-kernel profiling of the cpu backend: compiled in only with ``options={"profile": True}``.

A profiled module differs from the normal one in three ways, all emitted here
(:class:`Stamper`), so a module compiled without the option holds no timing
code at all (``tests/cpu/test_profile.py`` checks its LLVM IR):

- a global ``glow_profile``: ``MAX_THREADS + 1`` rows of ``2 * kernels + 2``
  i64 cycle stamps (ids past ``MAX_THREADS`` share the last row, which is never read);
- in ``glow_main``: one ``llvm.readcyclecounter`` stamp when the thread starts and
  one after the final barrier, in the thread's row; one before and one after every
  kernel call, in the row of the *share* being run (``sync.py``: share ``p`` of a
  segment is what thread ``p`` runs unless another thread took it, so each row holds
  one execution of every kernel, and a profiled run steals shares as a normal one);
- ``i64 glow_profile_clock()``: the same counter, for the host to measure its
  rate against ``time.perf_counter`` once per process (:func:`cycles_per_second`).

The host side (:func:`read_profile`) turns the stamps of the last run into a
:class:`ProfileRun`: per kernel and share (the "thread" of the tables and of the
trace) a (start, end) in seconds from the run's start; per kernel the LIR
instructions it runs (an element-wise chain fused into one loop is one kernel of
several instructions), their ONNX origin and FLOPs (:data:`FLOP_RULES`, a table
keyed by instruction kind).
"""

from __future__ import annotations

import ctypes
import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from glow_backend_cpu.helpers import I64, i64, intrinsic

PROFILE_GLOBAL = "glow_profile"
CLOCK_FN = "glow_profile_clock"
#: threads with their own row of stamps (more threads run, but only these are profiled)
MAX_THREADS = 64


# -- FLOPs per LIR instruction kind --------------------------------------------------------------

def _shape(op: Any) -> tuple[int, ...]:
    return tuple(op.value.type.shape) if op is not None and op.value is not None else ()


def _conv(ins: Any) -> int:  # per output element: C/group x kernel multiply-accumulates
    if len(ins.ins) < 2:
        return 0
    return 2 * math.prod(_shape(ins.outs[0])) * math.prod(_shape(ins.ins[1])[1:])


def _conv_transpose(ins: Any) -> int:  # per input element: C_out/group x kernel multiply-accumulates
    if len(ins.ins) < 2:
        return 0
    return 2 * math.prod(_shape(ins.ins[0])) * math.prod(_shape(ins.ins[1])[1:])


def _matmul(ins: Any) -> int:
    a = _shape(ins.ins[0]) if ins.ins else ()
    return 2 * math.prod(_shape(ins.outs[0])) * a[-1] if a else 0


def _gemm(ins: Any) -> int:
    a = _shape(ins.ins[0]) if ins.ins else ()
    if not a:
        return 0
    k = a[0] if ins.attrs.get("trans_a") else a[-1]
    return 2 * math.prod(_shape(ins.outs[0])) * k


def _recurrent(ins: Any) -> int:  # input projection and recurrent product of every step and direction
    if len(ins.ins) < 3:
        return 0
    seq, batch, inp = _shape(ins.ins[0])
    dirs, gh, hid = _shape(ins.ins[2])
    return 2 * seq * batch * dirs * gh * (inp + hid)


def _attention(ins: Any) -> int:  # the two products: scores Q KT and the weighted sum with V
    if len(ins.ins) < 3:
        return 0
    q, kt, v = (_shape(ins.ins[i]) for i in range(3))
    return 2 * math.prod(q[:-1]) * kt[-1] * (q[-1] + v[-1]) if q and kt and v else 0


#: LIR instruction kind -> FLOPs of one instruction (2 x multiply-accumulates); other kinds have none
FLOP_RULES: Mapping[str, Callable[[Any], int]] = {
    "Conv": _conv, "FusedConv": _conv, "ConvTranspose": _conv_transpose,
    "MatMul": _matmul, "FusedMatMul": _matmul, "Gemm": _gemm, "FusedGemm": _gemm,
    "GRU": _recurrent, "LSTM": _recurrent, "RNN": _recurrent, "FusedAttention": _attention,
}


def describe_step(instrs: Sequence[Any]) -> dict[str, Any]:
    """What the layout keeps of one kernel: its LIR instructions (name, kind, ONNX origin, FLOPs)."""
    rows = []
    for ins in instrs:
        rule = FLOP_RULES.get(ins.kind)
        rows.append({"name": ins.name, "kind": ins.kind, "origin": ins.origin or ins.name,
                     "flops": int(rule(ins)) if rule is not None else 0})
    return {"kind": "+".join(r["kind"] for r in rows), "instrs": rows}


# -- code generation -----------------------------------------------------------------------------

class Stamper:
    """Emits the stamps of a profiled ``glow_main`` (see the module doc)."""

    def __init__(self, module: ir.Module, builder: ir.IRBuilder, tid: ir.Value, kernels: int) -> None:
        self.width = 2 * kernels + 2
        at = ir.ArrayType(ir.ArrayType(I64, self.width), MAX_THREADS + 1)
        self.table = ir.GlobalVariable(module, at, name=PROFILE_GLOBAL)
        self.table.initializer = ir.Constant(at, None)
        self.table.align = 64
        self.clock = intrinsic(module, "llvm.readcyclecounter", I64, [])
        self.b = builder
        self.thread_row = self._row(tid)
        #: the row the kernel stamps go to: the share being run (see :meth:`in_share`)
        self.row = self.thread_row
        self._emit_clock_function(module)

    def _row(self, index: ir.Value) -> ir.Value:
        b = self.b
        row = b.select(b.icmp_unsigned("<", index, i64(MAX_THREADS)), index, i64(MAX_THREADS))
        return b.gep(self.table, [i64(0), row], inbounds=True)

    def in_share(self, share: ir.Value) -> None:
        """From here on, kernel stamps go to the row of ``share``: a thread that takes another thread's
        share of a segment stamps that share's row, so every row holds one execution of each kernel."""
        self.row = self._row(share)

    def _emit_clock_function(self, module: ir.Module) -> None:
        fn = ir.Function(module, ir.FunctionType(I64, []), name=CLOCK_FN)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        b.ret(b.call(self.clock, []))

    def _stamp(self, slot: int, row: ir.Value | None = None) -> None:
        at = self.b.gep(self.row if row is None else row, [i64(0), i64(slot)], inbounds=True)
        self.b.store(self.b.call(self.clock, []), at)

    def start(self) -> None:
        self._stamp(0, self.thread_row)

    def before(self, k: int) -> None:
        self._stamp(1 + 2 * k)

    def after(self, k: int) -> None:
        self._stamp(2 + 2 * k)

    def end(self) -> None:
        self._stamp(self.width - 1, self.thread_row)


# -- the host side -------------------------------------------------------------------------------

_RATE: list[float] = []


def cycles_per_second(clock: Callable[[], int], interval: float = 0.05) -> float:
    """The counter's rate, measured once per process against ``time.perf_counter`` (best of 3)."""
    if not _RATE:
        rates = []
        for _ in range(3):
            t0, c0 = time.perf_counter(), clock()
            time.sleep(interval)
            t1, c1 = time.perf_counter(), clock()
            rates.append((c1 - c0) / max(t1 - t0, 1e-9))
        _RATE.append(float(np.median(rates)))
    return _RATE[0]


@dataclass
class KernelTime:
    """One kernel of one run: its instructions and, per share that ran it (the thread of that id, unless another
    thread took the share), (start, end) seconds from the run start."""

    index: int
    kind: str
    instrs: list[dict[str, Any]]
    spans: list[tuple[float, float]]

    @property
    def seconds(self) -> float:
        """Mean busy time over the threads that ran it (each runs its share; a solo kernel has one)."""
        return float(np.mean([e - s for s, e in self.spans])) if self.spans else 0.0

    @property
    def slowest(self) -> float:
        return max((e - s for s, e in self.spans), default=0.0)

    @property
    def flops(self) -> int:
        return sum(int(i["flops"]) for i in self.instrs)

    @property
    def label(self) -> str:
        return "+".join(i["name"] for i in self.instrs)


class ProfileRun:
    """The stamps of one run, in seconds. Reading them is cheap (a copy of the table's rows); the kernels are
    built on first use, so a loop that keeps every run's profile runs at the pace of an unprofiled loop (the
    worker threads stay awake between runs, as they do there)."""

    def __init__(self, sec: np.ndarray, steps: Sequence[Mapping[str, Any]], threads: int, wall: float) -> None:
        self._sec, self._steps = sec, steps
        self.threads = threads
        #: wall time of the run as the host measured it (the native call, from Python)
        self.wall = wall
        #: first start to last end over the threads, from the stamps
        self.span = float(sec[:, -1].max())

    @functools.cached_property
    def kernels(self) -> list[KernelTime]:
        sec, out = self._sec, []
        for k, step in enumerate(self._steps):
            # a solo kernel (``workload.py``) runs on thread 0 alone: the other threads only skip it
            ran = 1 if step.get("solo") else self.threads
            spans = [(float(sec[t, 1 + 2 * k]), float(sec[t, 2 + 2 * k])) for t in range(ran)]
            out.append(KernelTime(k, str(step["kind"]), list(step["instrs"]), spans))
        return out

    @property
    def in_kernels(self) -> float:
        """Seconds of the run during which some thread was in a kernel (the union of every kernel's spans);
        the rest of :attr:`wall` is outside the kernels: the call and its input and output handling, and
        the time every thread spent waiting (barriers, wake-ups)."""
        spans = sorted(span for k in self.kernels for span in k.spans)
        total, end = 0.0, float("-inf")
        for s, e in spans:
            if e <= end:
                continue
            total += e - max(s, end)
            end = e
        return total

    def by_origin(self) -> list[tuple[str, str, float, int]]:
        """(ONNX node, kinds, seconds, FLOPs) per origin node, slowest first; a kernel of several
        instructions shares its time equally among them."""
        acc: dict[str, list[Any]] = {}
        for k in self.kernels:
            share = k.seconds / max(len(k.instrs), 1)
            for i in k.instrs:
                row = acc.setdefault(i["origin"], [set(), 0.0, 0])
                row[0].add(i["kind"])
                row[1] += share
                row[2] += int(i["flops"])
        rows = [(name, "+".join(sorted(r[0])), r[1], r[2]) for name, r in acc.items()]
        return sorted(rows, key=lambda r: -r[2])

    def idle(self, long: float = 1e-3) -> list[tuple[float, float, int]]:
        """Per thread: (busy seconds, seconds between its kernels, how many of those gaps exceed ``long``).
        Gaps are barrier waits; long ones on a loaded machine are a worker that was descheduled."""
        out = []
        for t in range(self.threads):
            spans = sorted(k.spans[t] for k in self.kernels if t < len(k.spans))
            busy = sum(e - s for s, e in spans)
            gaps = [max(b[0] - a[1], 0.0) for a, b in zip(spans, spans[1:])]
            out.append((busy, sum(gaps), sum(1 for g in gaps if g > long)))
        return out

    def chrome_trace(self, label: str = "glow") -> dict[str, Any]:
        """Trace-event JSON (chrome://tracing, Perfetto): one complete event per kernel and thread."""
        events: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0,
                                         "args": {"name": label}}]
        for t in range(self.threads):
            events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": t,
                           "args": {"name": f"worker {t}" if t else "worker 0 (caller)"}})
        for k in self.kernels:
            for t, (s, e) in enumerate(k.spans):
                events.append({"name": k.label, "cat": k.kind, "ph": "X", "pid": 1, "tid": t,
                               "ts": s * 1e6, "dur": max(e - s, 0.0) * 1e6,
                               "args": {"kernel": k.index, "kinds": k.kind,
                                        "onnx": sorted({i["origin"] for i in k.instrs}), "flops": k.flops}})
        return {"traceEvents": events, "displayTimeUnit": "ms"}


def read_profile(stamps: np.ndarray, steps: Sequence[Mapping[str, Any]], threads: int, wall: float,
                 rate: float) -> ProfileRun:
    """A :class:`ProfileRun` from the stamp table (rows: threads; ``2 * len(steps) + 2`` columns)."""
    rows = np.asarray(stamps[:threads], dtype=np.int64)
    t0 = int(rows[:, 0].min())
    return ProfileRun((rows - t0).astype(np.float64) / rate, steps, threads, wall)


def stamp_table(engine: Any, kernels: int, threads: int = MAX_THREADS + 1) -> np.ndarray:
    """A copy of the first ``threads`` rows of ``glow_profile`` of a loaded library."""
    addr = engine.get_global_value_address(PROFILE_GLOBAL)
    width = 2 * kernels + 2
    rows = min(threads, MAX_THREADS + 1)
    raw = (ctypes.c_int64 * (width * rows)).from_address(addr)
    return np.ctypeslib.as_array(raw).reshape(rows, width).copy()


__all__ = ["CLOCK_FN", "FLOP_RULES", "KernelTime", "MAX_THREADS", "PROFILE_GLOBAL", "ProfileRun", "Stamper",
           "cycles_per_second", "describe_step", "read_profile", "stamp_table"]
