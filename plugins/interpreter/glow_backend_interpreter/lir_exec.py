"""Executes the low-level IR on one arena, as a device would.

All activations live in a single numpy byte array (``np.empty`` of the planned
arena size, 64-byte aligned) at their compile-time offsets; operands are
numpy views into the arena, the constant payloads, the caller's input arrays
or freshly allocated output arrays. A compute instruction calls the kernel of
its kind (``fn(attrs, out_types, *inputs)``) on read-only views of its in
operands and copies each result into the view of its out operand, so a wrong
memory plan (two live activations sharing bytes, a view at a wrong offset, a
dealloc too early) shows up as a wrong answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from glow_core import budget
from glow_core.errors import ExecutionError
from glow_core.ir.graph import Function
from glow_core.ir.types import TensorType
from glow_core.lir.instructions import ALLOC, COPY, DEALLOC, TENSORVIEW
from glow_core.lir.ir import ALIGNMENT, Instr, LIRFunction, LValue, View, Weight
from glow_core.lir.memory import MemoryReport
from glow_sdk.backend import CompiledFunction

#: run_kernel(kind, attrs, inputs, out_types, where) -> results (see backend.run_kernel)
KernelRunner = Callable[[str, Mapping[str, Any], Sequence["np.ndarray | None"], Sequence[TensorType], str],
                        list[np.ndarray]]


def aligned_arena(nbytes: int) -> np.ndarray:
    """An uninitialized byte array of ``nbytes`` whose first byte is ALIGNMENT-aligned."""
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    start = (-raw.ctypes.data) % ALIGNMENT
    return raw[start:start + nbytes]


def region(base: np.ndarray, offset: int, t: TensorType) -> np.ndarray:
    """The bytes ``[offset, offset + t.nbytes)`` of contiguous ``base`` as an array of type ``t``."""
    flat = base.reshape(-1).view(np.uint8)
    return flat[offset:offset + t.nbytes].view(t.dtype).reshape(t.shape)


def _readonly(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.setflags(write=False)
    return v


class _Memory:
    """Per-run operand arrays: writable and read-only aliases, indexed by value slot."""

    __slots__ = ("ro", "rw")

    def __init__(self, n: int) -> None:
        self.rw: list[np.ndarray | None] = [None] * n
        self.ro: list[np.ndarray | None] = [None] * n

    def bind(self, slot: int, a: np.ndarray, writable: bool = True) -> None:
        self.rw[slot] = a if writable else None
        self.ro[slot] = _readonly(a)


Step = Callable[[_Memory, np.ndarray], None]


class LIRExecutable(CompiledFunction):
    """The interpreter's executable: a planned LIR function and its arena."""

    def __init__(self, function: Function, lir: LIRFunction, run_kernel: KernelRunner, *,
                 poison: bool = False) -> None:
        super().__init__(function)
        #: fill the arena with 0xff bytes (NaN, -1, True) before each run, so reading unwritten memory shows
        self.poison = poison
        if lir.plan is None:
            raise ExecutionError(f"LIR function {lir.name} has no memory plan")
        self.function = function
        self.lir = lir
        #: the memory budget of the compile, in force for the kernels' temporaries at run time too
        self.limits = budget.current()
        self.memory: MemoryReport = lir.plan.report
        self._run_kernel = run_kernel
        self._slot: dict[int, int] = {}
        for v in [*lir.weights, *lir.activations, *lir.views]:
            self._slot[id(v)] = len(self._slot)
        self._steps: list[Step] = [self._compile(ins) for ins in lir.instrs]

    def slot(self, v: LValue) -> int:
        return self._slot[id(v)]

    # -- compile each instruction to a closure --------------------------------------------------
    def _compile(self, ins: Instr) -> Step:
        plan = self.lir.plan
        assert plan is not None
        if ins.kind == ALLOC:
            act = ins.operands[0].value
            assert act is not None
            s, off, t = self.slot(act), plan.offsets[id(act)], act.type

            def do_alloc(m: _Memory, arena: np.ndarray) -> None:
                m.bind(s, region(arena, off, t))
            return do_alloc
        if ins.kind == DEALLOC:
            s = self.slot(ins.operands[0].value)  # type: ignore[arg-type]

            def do_dealloc(m: _Memory, arena: np.ndarray) -> None:
                m.rw[s] = m.ro[s] = None
            return do_dealloc
        if ins.kind == TENSORVIEW:
            view = ins.operands[0].value
            assert isinstance(view, View)
            s, b, off, t = self.slot(view), self.slot(view.base), view.offset, view.type
            writable = not (isinstance(view.root, Weight) and view.root.role != Weight.OUTPUT)

            def do_view(m: _Memory, arena: np.ndarray) -> None:
                base = m.rw[b] if writable else m.ro[b]
                m.bind(s, region(base, off, t), writable)  # type: ignore[arg-type]
            return do_view
        if ins.kind == COPY:
            d, src = self.slot(ins.operands[0].value), self.slot(ins.operands[1].value)  # type: ignore[arg-type]

            def do_copy(m: _Memory, arena: np.ndarray) -> None:
                np.copyto(m.rw[d], m.ro[src])  # type: ignore[arg-type]
            return do_copy
        return self._compile_compute(ins)

    def _compile_compute(self, ins: Instr) -> Step:
        outs = [self.slot(op.value) for op in ins.outs]  # type: ignore[arg-type]
        ins_ = [-1 if op.value is None else self.slot(op.value) for op in ins.ins]
        out_types = [op.value.type for op in ins.outs]  # type: ignore[union-attr]
        kind, attrs, where, run = ins.kind, ins.attrs, ins.where(), self._run_kernel

        def do_compute(m: _Memory, arena: np.ndarray) -> None:
            args = [None if s < 0 else m.ro[s] for s in ins_]
            results = run(kind, attrs, args, out_types, where)
            for s, r in zip(outs, results):
                np.copyto(m.rw[s], r)  # type: ignore[arg-type]
        return do_compute

    # -- run ------------------------------------------------------------------------------------
    def execute(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        with budget.using(self.limits):
            return self._execute(feeds)

    def _execute(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        m = _Memory(len(self._slot))
        for w in self.lir.weights:
            s = self.slot(w)
            if w.role == Weight.CONSTANT:
                assert w.payload is not None
                m.bind(s, w.payload, writable=False)
            elif w.role == Weight.INPUT:
                m.bind(s, np.asarray(feeds[w.io_name], order="C"), writable=False)
            else:
                m.bind(s, np.empty(w.type.shape, dtype=w.type.dtype))
        arena = aligned_arena(self.memory.arena_bytes)
        if self.poison:
            arena.fill(0xFF)
        for step in self._steps:
            step(m, arena)
        return {w.io_name: m.rw[self.slot(w)] for w in self.lir.outputs}  # type: ignore[misc]
