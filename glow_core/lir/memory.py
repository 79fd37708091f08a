"""Static memory allocation: every activation at a compile-time offset in one arena.

An activation occupies ``[offset, offset + nbytes)`` from its ``alloc`` to its
``dealloc``; two activations whose lifetimes overlap must not overlap in the
arena. Offsets are multiples of :data:`~glow_core.lir.ir.ALIGNMENT` (64).

Placement is NP-hard in general (dynamic storage allocation), so the planner
tries several heuristics and keeps the smallest arena:

- ``size-first-fit`` / ``size-best-fit``: largest buffers first, each at the
  lowest (first-fit) or tightest (best-fit) gap left by the already placed
  buffers whose lifetimes overlap it (TFLite's "greedy by size");
- ``breadth``: buffers of the most crowded instructions first (greedy by breadth);
- ``time-first-fit`` / ``time-best-fit``: in allocation order, like a
  run-time allocator would.

The report gives the arena size, the naive size (every activation its own
bytes) and the lower bound: the largest total of (aligned) bytes live at any
instruction, which no placement can beat.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from glow_core.lir.ir import ALIGNMENT, Activation, LIRFunction, align
from glow_core.lir.lifetimes import intervals, live_profile


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


@dataclass(frozen=True)
class _Buf:
    index: int
    start: int  # index of the alloc instruction
    end: int  # index of the dealloc instruction
    size: int  # aligned bytes


Placement = Callable[[Sequence[_Buf], Sequence[int]], list[int]]


def _place(order: Sequence[_Buf], n: int, best_fit: bool) -> list[int]:
    """Place buffers in ``order``, each in a gap among placed buffers whose lifetimes overlap it."""
    offsets = [0] * n
    starts = np.empty(len(order), dtype=np.int64)
    ends = np.empty(len(order), dtype=np.int64)
    offs = np.empty(len(order), dtype=np.int64)
    sizes = np.empty(len(order), dtype=np.int64)
    k = 0
    for b in order:
        if b.size == 0:
            offsets[b.index] = 0
            continue
        mask = (starts[:k] <= b.end) & (ends[:k] >= b.start)
        idx = np.nonzero(mask)[0]
        placed = sorted(zip(offs[idx].tolist(), sizes[idx].tolist()))
        cur, best, best_gap = 0, -1, None
        for o, s in placed:
            gap = o - cur
            if gap >= b.size:
                if not best_fit:
                    best = cur
                    break
                if best_gap is None or gap < best_gap:
                    best, best_gap = cur, gap
            cur = max(cur, o + s)
        off = best if best >= 0 else cur
        offsets[b.index] = off
        starts[k], ends[k], offs[k], sizes[k] = b.start, b.end, off, b.size
        k += 1
    return offsets


def _by_size(bufs: Sequence[_Buf], profile: Sequence[int]) -> list[_Buf]:
    return sorted(bufs, key=lambda b: (-b.size, b.start))


def _by_time(bufs: Sequence[_Buf], profile: Sequence[int]) -> list[_Buf]:
    return sorted(bufs, key=lambda b: b.start)


def _by_breadth(bufs: Sequence[_Buf], profile: Sequence[int]) -> list[_Buf]:
    prof = np.asarray(profile, dtype=np.int64)
    breadth = {b.index: int(prof[b.start:b.end + 1].max()) if b.end >= b.start else 0 for b in bufs}
    return sorted(bufs, key=lambda b: (-breadth[b.index], -b.size, b.start))


def _by_area(bufs: Sequence[_Buf], profile: Sequence[int]) -> list[_Buf]:
    return sorted(bufs, key=lambda b: (-b.size * (b.end - b.start + 1), b.start))


#: name -> (order of placement, best fit?)
HEURISTICS: Mapping[str, tuple[Callable[[Sequence[_Buf], Sequence[int]], list[_Buf]], bool]] = {
    "size-first-fit": (_by_size, False),
    "size-best-fit": (_by_size, True),
    "breadth": (_by_breadth, False),
    "area": (_by_area, False),
    "time-first-fit": (_by_time, False),
    "time-best-fit": (_by_time, True),
}


def plan_memory(lir: LIRFunction, heuristics: Sequence[str] | None = None) -> MemoryPlan:
    """Assign arena offsets to every activation of ``lir`` (sets and returns ``lir.plan``)."""
    spans = intervals(lir)
    acts = [a for a in lir.activations if id(a) in spans]
    bufs = [_Buf(i, spans[id(a)][1], spans[id(a)][2], align(a.nbytes)) for i, a in enumerate(acts)]
    profile = live_profile(lir)
    lower = max(profile, default=0)
    naive = sum(b.size for b in bufs)
    best: tuple[int, str, list[int]] | None = None
    candidates: dict[str, int] = {}
    for name in heuristics or list(HEURISTICS):
        order_fn, best_fit = HEURISTICS[name]
        offsets = _place(order_fn(bufs, profile), len(bufs), best_fit)
        arena = align(max((o + a.nbytes for o, a in zip(offsets, acts)), default=0))
        candidates[name] = arena
        if best is None or arena < best[0]:
            best = (arena, name, offsets)
    arena, name, offsets = best if best is not None else (0, "", [])
    report = MemoryReport(
        arena_bytes=arena, naive_bytes=naive, lower_bound_bytes=lower, activations=len(acts), heuristic=name,
        candidates=candidates,
        constant_bytes=sum(w.nbytes for w in lir.constants),
        io_bytes=sum(w.nbytes for w in lir.inputs + lir.outputs),
    )
    plan = MemoryPlan({id(a): o for a, o in zip(acts, offsets)}, report)
    lir.plan = plan
    return plan


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
