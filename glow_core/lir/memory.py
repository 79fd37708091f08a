"""The static memory plan's data: a plan, its report, its checker and the lifetime analyses it rests on.

An activation occupies ``[offset, offset + nbytes)`` from its ``alloc`` to its
``dealloc``; two activations whose lifetimes overlap must not overlap in the
arena. Offsets are multiples of :data:`~glow_core.lir.ir.ALIGNMENT` (64).
The planner that computes plans is ``glow_core.lircompiler.plan_memory``.

The report gives the arena size, the naive size (every activation its own
bytes) and the lower bound: the largest total of (aligned) bytes live at any
instruction, which no placement can beat.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from glow_core.lir.instructions import ALLOC, DEALLOC
from glow_core.lir.ir import ALIGNMENT, Activation, LIRFunction, align


@dataclass(frozen=True)
class MemoryReport:
    """The three memory figures of a planned function (bytes)."""

    arena_bytes: int
    naive_bytes: int
    lower_bound_bytes: int
    activations: int = 0
    heuristic: str = ""
    #: arena size each heuristic reached
    candidates: Mapping[str, int] = field(default_factory=dict)
    #: bytes of weights outside the arena, by role
    constant_bytes: int = 0
    io_bytes: int = 0

    @property
    def ratio(self) -> float:
        """arena / lower bound (1.0 for an empty arena)."""
        return self.arena_bytes / self.lower_bound_bytes if self.lower_bound_bytes else 1.0

    def format(self) -> str:
        def mib(n: int) -> str:
            return f"{n:,} bytes ({n / 2**20:.2f} MiB)"

        saved = 1 - self.arena_bytes / self.naive_bytes if self.naive_bytes else 0.0
        lines = [
            f"arena:        {mib(self.arena_bytes)}  [{self.heuristic or '-'}]",
            f"lower bound:  {mib(self.lower_bound_bytes)}  (arena / lower bound = {self.ratio:.3f})",
            f"naive:        {mib(self.naive_bytes)}  ({self.activations} activations; the plan saves {saved:.1%})",
            f"weights:      {mib(self.constant_bytes)} constant, {mib(self.io_bytes)} inputs/outputs (outside the arena)",
        ]
        if self.candidates:
            lines.append("heuristics:   " + ", ".join(f"{k}={v:,}" for k, v in self.candidates.items()))
        return "\n".join(lines)


@dataclass
class MemoryPlan:
    """Arena offsets of the activations of one LIR function."""

    offsets: dict[int, int]  # id(activation) -> byte offset
    report: MemoryReport

    @property
    def arena_bytes(self) -> int:
        return self.report.arena_bytes

    def offset_of(self, act: Activation) -> int:
        return self.offsets[id(act)]


def intervals(lir: LIRFunction) -> dict[int, tuple[Activation, int, int]]:
    """id(activation) -> (activation, index of its alloc, index of its dealloc)."""
    start: dict[int, int] = {}
    out: dict[int, tuple[Activation, int, int]] = {}
    for k, ins in enumerate(lir.instrs):
        if ins.kind == ALLOC:
            start[id(ins.operands[0].value)] = k
        elif ins.kind == DEALLOC:
            a = ins.operands[0].value
            assert isinstance(a, Activation)
            out[id(a)] = (a, start.get(id(a), k), k)
    return out


def live_profile(lir: LIRFunction) -> list[int]:
    """Aligned bytes of activations live at each instruction (allocated and not yet deallocated)."""
    live, prof = 0, []
    for ins in lir.instrs:
        if ins.kind == ALLOC:
            live += align(ins.operands[0].value.nbytes)  # type: ignore[union-attr]
        prof.append(live)
        if ins.kind == DEALLOC:
            live -= align(ins.operands[0].value.nbytes)  # type: ignore[union-attr]
    return prof


def check_plan(lir: LIRFunction, plan: MemoryPlan) -> list[str]:
    """Problems of a memory plan: missing or misaligned offsets, overflow, overlap of live activations."""
    problems: list[str] = []
    spans = intervals(lir)
    items = []
    for a in lir.activations:
        off = plan.offsets.get(id(a))
        if off is None:
            problems.append(f"memory plan: activation %{a.name} has no offset")
            continue
        if off % ALIGNMENT:
            problems.append(f"memory plan: activation %{a.name} at offset {off} is not {ALIGNMENT}-byte aligned")
        if off < 0 or off + a.nbytes > plan.arena_bytes:
            problems.append(f"memory plan: activation %{a.name} [{off}, {off + a.nbytes}) "
                            f"exceeds the arena of {plan.arena_bytes} bytes")
        if id(a) in spans and a.nbytes:
            items.append((spans[id(a)][1], spans[id(a)][2], off, off + a.nbytes, a))
    items.sort(key=lambda t: t[0])
    active: list[tuple[int, int, int, int, Activation]] = []
    for it in items:
        active = [x for x in active if x[1] >= it[0]]
        for x in active:
            if x[2] < it[3] and it[2] < x[3]:
                problems.append(f"memory plan: live activations %{x[4].name} [{x[2]}, {x[3]}) and "
                                f"%{it[4].name} [{it[2]}, {it[3]}) overlap")
        active.append(it)
    return problems
